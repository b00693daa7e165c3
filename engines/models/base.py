"""What every model class shares: the backend it is given (it never builds one), the count
of its invocations, and opening that backend once with a message that names the kind of
file expected. A new model is one class on this base, in its own file."""
from __future__ import annotations

from engines.backends.base import InferenceRuntime


class OnnxModel:
    """A model class run by a backend: subclass it, give `open` its I/O checks."""

    def __init__(self, runtime: InferenceRuntime) -> None:
        self.runtime = runtime

    @property
    def calls(self) -> int:
        """Model invocations so far (a batched call counts once)."""
        return self.runtime.calls

    def open_runtime(self, what: str) -> bool:
        """Open the backend, a load failure saying that `what` was expected ("an inswapper_128
        ONNX file"); False when it was open already (nothing to check again)."""
        if self.runtime.is_open:
            return False
        self.runtime.open_expecting(what)
        return True
