"""Model run times for facestream_model_seconds: each model of a job's engine set timed
where it runs. A model on an inference runtime (ONNX Runtime, OpenVINO, TensorRT, Triton)
is timed at its runtime's `run`/`run_into`, labelled with the runtime and the model file's
name (runtime="ort", model="inswapper_128"); the dlib family's models and the classical
swapper (whatever they run inside) at their protocol calls, labelled with their family and
role (runtime="dlib", model="detector").

A timed call costs two clock reads and a histogram update (about a microsecond); a timed
call inside another (a model calling another) counts once, as the outer one."""
from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stream.ops.buckets import Buckets
from stream.ops.metrics import StreamMetrics

ROLES = ("detector", "landmarker", "embedder", "swapper")
# The calls through which the pipeline uses a model (engines.protocols).
MODEL_CALLS = ("forward", "forward_points", "forward_near", "forward_many", "forward_batch", "swap_cut")
RUNTIME_CALLS = ("run", "run_into")
_RUNTIME_LABELS = {"OrtRuntime": "ort", "OpenVinoRuntime": "openvino", "TrtRuntime": "tensorrt",
                   "TritonRuntime": "triton"}
_SEARCH_DEPTH = 3
_inside = threading.local()


class ModelClock:
    """Where an engine set's timed calls are counted: the `metrics` of the process (a test
    that serves the same job twice points it at the second server's)."""

    def __init__(self, metrics: StreamMetrics) -> None:
        self.metrics = metrics


def time_models(engines: Any, enhancer: Any, metrics: StreamMetrics) -> None:
    """Time every model of `engines` (an EngineSet) and `enhancer` (or None) into
    `metrics`; done once per engine set, later calls only redirect the counts."""
    clock = getattr(engines, "_ops_clock", None)
    if isinstance(clock, ModelClock):
        clock.metrics = metrics
        return
    clock = ModelClock(metrics)
    timed: set[int] = set()
    roles = [(role, getattr(engines, role)) for role in ROLES]
    if enhancer is not None:
        roles.append(("enhancer", enhancer))
    for role, held in roles:
        model = _unshared(held)
        runtimes = [] if _classical(model) else _runtimes_in(model)
        if runtimes:
            for runtime in runtimes:
                labels = (_runtime_label(runtime), Path(str(getattr(runtime, "path", "model"))).stem)
                _wrap(runtime, RUNTIME_CALLS, labels, clock, timed)
        else:
            family = "dlib" if _classical(model) else engines.name
            _wrap(model, MODEL_CALLS, (family, role), clock, timed)
        _forget_methods(held)
    engines._ops_clock = clock


def _classical(model: Any) -> bool:
    return type(model).__module__.startswith(("engines.dlib", "engines.classic"))


def _unshared(model: Any) -> Any:
    """The model itself, out of a server's `Shared` lock wrapper (stream.job.shared_models):
    timed there, a call's time leaves out its wait for another pipeline's call."""
    from stream.job.shared_models import Shared

    return object.__getattribute__(model, "_model") if isinstance(model, Shared) else model


def _forget_methods(model: Any) -> None:
    """A `Shared` wrapper keeps each method it has locked: dropped, so the timed ones are
    fetched from the model from now on."""
    from stream.job.shared_models import Shared

    if isinstance(model, Shared):
        object.__getattribute__(model, "_methods").clear()  # one step: safe beside a caller


def _runtime_label(runtime: Any) -> str:
    name = type(runtime).__name__
    return _RUNTIME_LABELS.get(name, name.lower().strip("_").removesuffix("runtime") or "runtime")


def _is_runtime(value: Any) -> bool:
    return callable(getattr(value, "run", None)) and callable(getattr(value, "open_expecting", None))


def _runtimes_in(model: Any) -> list[Any]:
    """The inference runtimes a model object holds, a few attributes deep (adapters hold
    the model that holds the runtime; a swapper's masks hold theirs)."""
    found: dict[int, Any] = {}
    seen: set[int] = set()
    level = [model]
    for _ in range(_SEARCH_DEPTH):
        following = []
        for obj in level:
            for value in list(getattr(obj, "__dict__", {}).values()):
                if id(value) in seen:
                    continue
                seen.add(id(value))
                if _is_runtime(value):
                    found[id(value)] = value
                elif type(value).__module__.startswith("engines.") and hasattr(value, "__dict__"):
                    following.append(value)
        level = following
    return list(found.values())


def _wrap(obj: Any, names: tuple[str, ...], labels: tuple[str, str], clock: ModelClock, timed: set[int]) -> None:
    if id(obj) in timed:  # one model shared by two roles: timed once
        return
    timed.add(id(obj))
    for name in names:
        call = getattr(obj, name, None)
        if callable(call):
            setattr(obj, name, _timed(call, labels, clock))


def _timed(call: Callable[..., Any], labels: tuple[str, str], clock: ModelClock) -> Callable[..., Any]:
    held: list[Any] = [None, None]  # the metrics last counted into, and its buckets for these labels

    def buckets() -> Buckets:
        metrics = clock.metrics
        if held[0] is not metrics:
            held[0], held[1] = metrics, metrics.model_buckets(*labels)
        return held[1]  # type: ignore[no-any-return]

    @functools.wraps(call)
    def run(*args: Any, **kwargs: Any) -> Any:
        if getattr(_inside, "busy", False):
            return call(*args, **kwargs)
        _inside.busy = True
        start = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            _inside.busy = False
            buckets().add(time.perf_counter() - start)

    return run
