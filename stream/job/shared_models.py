"""Models shared by several pipelines at once (a server with one pipeline per peer).

The engines keep per-call scratch state (buffers, IO bindings, dlib's network), so two
pipelines must not run the same method of one model at the same time. `Shared` wraps a
model so each of its methods runs under a lock of its own: one detection at a time, one
swap at a time, while the stages of one pipeline (detect, swap, paste) still overlap as
they do with a single pipeline. The models are loaded once; only their calls queue.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from engines.registry import EngineSet


class Shared:
    """A model whose methods are serialised per method; attributes read through."""

    def __init__(self, model: Any) -> None:
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "_locks", {})
        object.__setattr__(self, "_methods", {})
        object.__setattr__(self, "_guard", threading.Lock())

    def lock_for(self, name: str) -> threading.Lock:
        with self._guard:
            lock = self._locks.get(name)
            if lock is None:
                lock = self._locks[name] = threading.Lock()
            return lock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._model, name)
        if not callable(attr) or name.startswith("__"):
            return attr
        method = self._methods.get(name)
        if method is None:
            lock = self.lock_for(name)

            def method(*args: Any, _attr: Callable[..., Any] = attr, **kwargs: Any) -> Any:
                with lock:
                    return _attr(*args, **kwargs)

            self._methods[name] = method
        return method

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._model, name, value)

    def __repr__(self) -> str:
        return f"Shared({self._model!r})"


def shared(model: Any) -> Any:
    """`model` wrapped in `Shared` (itself when it already is)."""
    return model if isinstance(model, Shared) else Shared(model)


def share_engines(engines: EngineSet) -> EngineSet:
    """The same models, each wrapped in `Shared` (idempotent)."""
    return EngineSet(name=engines.name, detector=shared(engines.detector), landmarker=shared(engines.landmarker),
                     embedder=shared(engines.embedder), swapper=shared(engines.swapper),
                     photo_detector=shared(engines.photo_detector), note=engines.note)


@contextmanager
def exclusive(model: Any, method: str) -> Iterator[None]:
    """Hold `model`'s lock for `method` (nothing when the model is not shared)."""
    if isinstance(model, Shared):
        with model.lock_for(method):
            yield
    else:
        yield
