"""Building a TensorRT engine from an ONNX file: the optimisation profile, the precision
switch per TensorRT version, the timing cache, and TensorRT's log turned into one-line errors.

The profile: an input whose first axis is dynamic gets batches 1..max_batch (optimised
for 1: a live frame usually holds one face); any other dynamic axis gets the configured
(min, opt, max) range; static inputs keep their shape.

fp16: TensorRT 10 lowers an fp32 network itself when the builder's FP16 flag is set.
TensorRT 11 builds only strongly typed networks (no FP16 flag): it is given an fp16 copy
of the ONNX file (float32 inputs and outputs kept), made once and cached.

int8: a file with Q/DQ nodes (`<stem>_int8.onnx`) is explicit quantisation; TensorRT's
implicit calibrator is deprecated and not used. TensorRT 10 (weakly typed networks) gets
the INT8 flag, and FP16 too when fp16 is on, so the layers the file keeps in float may run
in fp16 ("int8+fp16"). TensorRT 11 removed both flags: the Q/DQ nodes give INT8 and the
other layers keep the file's own float type ("int8" whatever trt_fp16 says; no fp16 copy
is made of a Q/DQ file). Either way TensorRT is given a symmetric copy of the file
(symmetric.py: our files quantise activations to U8 with zero points, which TensorRT's
parser refuses), made once and cached.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from engines.backends.onnx_io import read_onnx
from engines.backends.trt.cache import EngineCache, ProfileEntry
from engines.backends.trt.symmetric import make_symmetric
from engines.errors import EngineError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OnnxIO:
    """Names and shapes (-1 for a dynamic axis) of an ONNX file's inputs, and its output names."""

    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    outputs: tuple[str, ...]
    quantized: bool = False  # Q/DQ nodes: an INT8 file


def read_onnx_io(path: Path) -> OnnxIO:
    """The graph's I/O as the build plans it (`engines.backends.onnx_io.read_onnx`)."""
    graph = read_onnx(path)
    return OnnxIO(tuple((t.name, tuple(-1 if d is None else d for d in t.shape)) for t in graph.inputs),
                  tuple(t.name for t in graph.outputs), graph.quantized)


def plan_precision(fp16: bool, quantized: bool, major: int) -> str:
    """The engine's precision (what the cache key holds): "fp32", "fp16", "int8" or "int8+fp16".

    A Q/DQ file is INT8 whatever the options say; fp16 adds to it only on TensorRT 10,
    whose FP16 flag lets the file's float layers run in fp16 (TensorRT 11 has no flag)."""
    if not quantized:
        return "fp16" if fp16 else "fp32"
    return "int8+fp16" if fp16 and major == 10 else "int8"


def plan_profile(io: OnnxIO, max_batch: int, dim_range: tuple[int, int, int]) -> tuple[ProfileEntry, ...]:
    """The optimisation profile for these inputs; empty when every input is static."""
    if all(d >= 0 for _, shape in io.inputs for d in shape):
        return ()
    entries = []
    for name, shape in io.inputs:
        lo, opt, hi = [], [], []
        for axis, d in enumerate(shape):
            if d >= 0:
                bounds = (d, d, d)
            elif axis == 0:
                bounds = (1, 1, max_batch)
            else:
                bounds = dim_range
            lo.append(bounds[0])
            opt.append(bounds[1])
            hi.append(bounds[2])
        entries.append(ProfileEntry(name, tuple(lo), tuple(opt), tuple(hi)))
    return tuple(entries)


def convert_to_fp16(src: Path) -> bytes:
    """An fp16 copy of ONNX file `src`, float32 inputs and outputs kept, serialised."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    _sort_nodes(model.graph)  # the converter appends its input casts after their users
    return bytes(model.SerializeToString())


def _sort_nodes(graph: Any) -> None:
    """Put the graph's nodes in topological order, as ONNX requires (stable otherwise)."""
    known = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending = list(graph.node)
    ordered = []
    while pending:
        ready = [n for n in pending if all(i in known for i in n.input)]
        if not ready:  # names from an enclosing scope or a cycle: keep the rest as they were
            ordered += pending
            break
        for node in ready:
            known.update(node.output)
        ordered += ready
        pending = [n for n in pending if not any(n is r for r in ready)]
    nodes = [type(n)() for n in ordered]
    for copy, node in zip(nodes, ordered):
        copy.CopyFrom(node)
    del graph.node[:]
    graph.node.extend(nodes)


def fp16_onnx(src: Path, onnx_sha256: str, cache: EngineCache) -> Path:
    """The cached fp16 copy of `src` (for TensorRT 11), made on first use."""
    path = cache.fp16_onnx_path(src, onnx_sha256)
    if path.is_file():
        return path
    with cache.lock(path):
        if not path.is_file():
            log.info("%s: making an fp16 copy for TensorRT (once): %s", src.name, path)
            try:
                data = convert_to_fp16(src)
            except Exception as exc:
                raise EngineError(f"model file {str(src)!r}: cannot make its fp16 copy for TensorRT "
                                  f"({str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__})"
                                  ) from exc
            cache.write(path, data)
    return path


def symmetric_int8_onnx(src: Path, onnx_sha256: str, cache: EngineCache) -> Path:
    """What TensorRT builds an INT8 file from: `src` itself when its Q/DQ nodes are
    symmetric int8 already, else its cached symmetric copy (symmetric.py), made on first use."""
    path = cache.int8_onnx_path(src, onnx_sha256)
    if path.is_file():
        return path
    import onnx

    with cache.lock(path):
        if path.is_file():
            return path
        try:
            model = onnx.load(str(src))
            changed = make_symmetric(model, str(src))
            data = bytes(model.SerializeToString()) if changed else b""
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(f"model file {str(src)!r}: cannot make its symmetric INT8 copy for TensorRT "
                              f"({str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__})"
                              ) from exc
        if not changed:
            return src
        log.info("%s: made a symmetric INT8 copy for TensorRT (once): %s", src.name, path)
        cache.write(path, data)
    return path


def make_logger(trt: ModuleType) -> Any:
    """A TensorRT logger that keeps the errors (for one-line messages) and logs the rest quietly."""
    severity = trt.ILogger.Severity
    errors = (severity.INTERNAL_ERROR, severity.ERROR)

    class Logger(trt.ILogger):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.errors: list[str] = []

        def log(self, level: Any, msg: str) -> None:
            if level in errors:
                self.errors.append(str(msg).strip())
                log.debug("TensorRT error: %s", msg)
            elif level == severity.WARNING:
                log.debug("TensorRT warning: %s", msg)

        def last_error(self) -> str:
            return self.errors[-1].splitlines()[0] if self.errors else "no detail from TensorRT"

    return Logger()


def build_engine(trt: ModuleType, major: int, onnx_path: Path, source: Path, profile: tuple[ProfileEntry, ...],
                 precision: str, workspace: int, timing: bytes | None, logger: Any) -> tuple[bytes, bytes]:
    """Build a serialised engine from `onnx_path`; returns (engine, timing cache) bytes.

    `source` is the file the user named (the same as `onnx_path` except for TensorRT 11's
    fp16 copy): errors name it.
    """
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        detail = parser.get_error(0).desc() if parser.num_errors else logger.last_error()
        raise EngineError(f"model file {str(source)!r} cannot be read by TensorRT's ONNX parser ({detail})")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace))
    if major == 10:  # weakly typed: the flags allow the lower precisions (11 has neither flag)
        parts = precision.split("+")
        if "fp16" in parts:
            config.set_flag(trt.BuilderFlag.FP16)
        if "int8" in parts:  # explicit quantisation: the Q/DQ nodes say where
            config.set_flag(trt.BuilderFlag.INT8)
    if profile:
        shapes = builder.create_optimization_profile()
        for entry in profile:
            shapes.set_shape(entry.name, entry.min, entry.opt, entry.max)
        config.add_optimization_profile(shapes)
    _use_timing_cache(config, timing, onnx_path)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EngineError(f"TensorRT could not build an engine from model file {str(source)!r} "
                          f"({logger.last_error()})")
    return bytes(serialized), bytes(config.get_timing_cache().serialize())


def _use_timing_cache(config: Any, timing: bytes | None, onnx_path: Path) -> None:
    """Start from the saved timings when they load; from an empty cache otherwise."""
    if timing:
        try:
            cache = config.create_timing_cache(timing)
            if cache is not None and config.set_timing_cache(cache, False):
                return
        except Exception as exc:  # a damaged file must only cost the timings
            log.debug("timing cache unusable (%s)", exc)
        log.info("%s: the saved TensorRT timing cache does not fit; starting a new one", onnx_path.name)
    config.set_timing_cache(config.create_timing_cache(b""), False)
