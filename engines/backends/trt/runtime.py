"""Native TensorRT behind the inference-runtime protocol (engines.backends.base): named inputs in,
named outputs out, on TensorRT 10 or 11 (whichever is installed).

`open()` finds the engine in the cache (engines.backends.trt.cache) or builds it from the ONNX file
(engines.backends.trt.build), then sizes every device buffer once, at the profile's maximum, with a
host staging buffer beside each from the runtime's allocator (page-locked memory when the
pipeline hands over its pinned allocator). A `run` on its own CUDA stream:

    inputs host -> device (async)  ->  execute_async_v3  ->  outputs device -> host (async)
    ->  event recorded, then synchronised  ->  outputs returned

Inputs already in page-locked memory (the swap stage's pinned ring slots) are copied to the
device from where they are; others go through the staging buffer. `run_into` lands the
outputs in the caller's arrays (the pinned output slots). A batch larger than the profile's
maximum runs in chunks. Everything that
can go wrong is a one-line EngineError: no TensorRT or cupy, no (supported) GPU, a file
TensorRT's parser rejects, a failed build, inputs outside the engine's profile.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from math import prod
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from engines.backends.base import HostAllocator, HostBuffers, RuntimeOptions, TensorSpec, open_expecting
from engines.backends.trt.build import (
    OnnxIO,
    build_engine,
    fp16_onnx,
    make_logger,
    plan_precision,
    plan_profile,
    read_onnx_io,
    symmetric_int8_onnx,
)
from engines.backends.trt.cache import EngineCache, EngineKey, file_sha256, stat_id
from engines.backends.trt.env import GpuInfo, TrtUnavailable, check_supported, gpu_info, load_cupy, load_tensorrt
from engines.errors import EngineError, ModelNotFound

log = logging.getLogger(__name__)

DEFAULT_WORKSPACE = 1 << 30  # builder scratch memory when runtime.trt_workspace is not set

Shape = tuple[int, ...]


@dataclass
class _Buffer:
    """One engine tensor: its device buffer and host staging buffer, both flat, at the profile maximum."""

    name: str
    dtype: np.dtype
    lo: Shape  # smallest shape the engine takes (inputs; outputs: unused)
    hi: Shape  # largest
    device: Any  # cupy ndarray
    host: np.ndarray


def _dtypes(trt: ModuleType) -> dict[Any, tuple[np.dtype, str]]:
    """TensorRT's data types as numpy types and ONNX Runtime's type names (what TensorSpec holds)."""
    return {
        trt.DataType.FLOAT: (np.dtype(np.float32), "tensor(float)"),
        trt.DataType.HALF: (np.dtype(np.float16), "tensor(float16)"),
        trt.DataType.INT8: (np.dtype(np.int8), "tensor(int8)"),
        trt.DataType.INT32: (np.dtype(np.int32), "tensor(int32)"),
        trt.DataType.INT64: (np.dtype(np.int64), "tensor(int64)"),
        trt.DataType.UINT8: (np.dtype(np.uint8), "tensor(uint8)"),
        trt.DataType.BOOL: (np.dtype(np.bool_), "tensor(bool)"),
    }


def _fmt_bounds(lo: Shape, hi: Shape) -> str:
    return "[" + ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in zip(lo, hi)) + "]"


class TrtRuntime:
    """One ONNX model file as a TensorRT engine on one GPU; `run` maps named inputs to outputs."""

    def __init__(self, path: str | os.PathLike[str], options: RuntimeOptions | None = None,
                 allocator: HostAllocator | None = None, progress: Callable[[str], None] | None = None) -> None:
        self.path = Path(path)
        self.options = options or RuntimeOptions()
        self.allocator = allocator  # host staging buffers; the pipeline passes its pinned one on CUDA
        self.progress = progress  # told when a (slow) build starts; a log warning when None
        self.inputs: list[TensorSpec] = []
        self.outputs: list[TensorSpec] = []
        self.calls = 0  # `run` calls
        self.executions = 0  # engine launches (a batch over the profile's maximum takes several)
        self.built = False  # whether the last open() built the engine rather than load it
        self.engine_path: Path | None = None
        self.gpu: GpuInfo | None = None
        self.trt_version = ""
        self._cupy: ModuleType | None = None
        self._runtime: Any = None  # trt.Runtime: outlives nothing it made
        self._engine: Any = None
        self._context: Any = None
        self._stream: Any = None
        self._event: Any = None
        self._in: dict[str, _Buffer] = {}
        self._out: dict[str, _Buffer] = {}
        self._max_batch = 0  # > 0 when every input and output has a dynamic batch axis: larger batches split
        self._host = HostBuffers(allocator)  # host buffers that do not fit a staging buffer
        self._lock = threading.Lock()  # one execution context: one call at a time

    @property
    def is_open(self) -> bool:
        return self._context is not None

    # -- lifecycle -----------------------------------------------------------------

    def open(self) -> None:
        """Load the cached engine or build it, and size the buffers; a one-line EngineError when it cannot."""
        if self._context is not None:
            return
        if not self.path.is_file():
            raise ModelNotFound(f"model file {str(self.path)!r} does not exist")
        opts = self.options
        trt, major = load_tensorrt()
        cupy = load_cupy()
        gpu = gpu_info(cupy, opts.device_id)
        version = str(trt.__version__)
        check_supported(gpu, version)
        io = read_onnx_io(self.path)
        precision = plan_precision(bool(opts.trt_fp16), io.quantized, major)
        if io.quantized and opts.trt_fp16 and major >= 11:
            log.info("%s: an INT8 file on TensorRT %s: its float layers stay in the file's float type "
                     "(TensorRT 11 has no FP16 flag)", self.path.name, version)
        workspace = opts.trt_workspace or DEFAULT_WORKSPACE
        if opts.gpu_mem_limit:
            workspace = min(workspace, int(opts.gpu_mem_limit))
        profile = plan_profile(io, opts.trt_max_batch, opts.trt_dim_range)
        key = EngineKey(file_sha256(self.path), version, gpu.name, gpu.compute, precision, profile, workspace)
        cache = EngineCache(opts.trt_cache_dir)
        self.engine_path = cache.engine_path(self.path, key)
        self.gpu, self.trt_version, self._cupy = gpu, version, cupy
        logger = make_logger(trt)
        with cupy.cuda.Device(gpu.index):
            runtime = trt.Runtime(logger)
            try:
                engine, self.built = self._load_or_build(trt, major, runtime, logger, cache, key)
            except OSError as exc:  # an unwritable folder, a full disk
                raise TrtUnavailable(f"TensorRT engine cache folder {str(cache.folder)!r} cannot be used "
                                  f"({exc.strerror or exc}): set runtime.trt_cache_dir to a folder you can write"
                                  ) from exc
            self._bind(trt, cupy, engine, io, logger)
        self._runtime, self._engine = runtime, engine
        log.debug("%s: TensorRT %s engine %s on %s", self.path.name, version, self.engine_path.name, gpu.name)

    def open_expecting(self, what: str) -> None:
        """`open()`, with a load failure saying which kind of model file was expected
        (a missing file stays ModelNotFound; what the machine lacks says only that)."""
        open_expecting(self, what, (TrtUnavailable,))

    def close(self) -> None:
        """Release the engine, its execution context and the device and host buffers."""
        with self._lock:
            self._context = None  # before the engine, and the engine before the runtime
            self._engine = None
            self._runtime = None
            self._in.clear()
            self._out.clear()
            self._stream = self._event = None
            self._host.clear()
            self._max_batch = 0

    # -- engine: cache or build ----------------------------------------------------

    def _load_or_build(self, trt: ModuleType, major: int, runtime: Any, logger: Any, cache: EngineCache,
                       key: EngineKey) -> tuple[Any, bool]:
        path = self.engine_path
        assert path is not None
        seen = stat_id(path)
        if seen is not None:
            engine = self._deserialize(runtime, logger, cache.read(path), path)
            if engine is not None:
                return engine, False
        with cache.lock(path):
            now = stat_id(path)
            if now is not None and now != seen:  # another process built it while this one waited
                engine = self._deserialize(runtime, logger, cache.read(path), path)
                if engine is not None:
                    return engine, False
            data = self._build(trt, major, logger, cache, key)
            cache.write(path, data)
        engine = runtime.deserialize_cuda_engine(data)
        if engine is None:
            raise EngineError(f"TensorRT built an engine from model file {str(self.path)!r} but cannot load it "
                              f"({logger.last_error()})")
        return engine, True

    def _deserialize(self, runtime: Any, logger: Any, data: bytes | None, path: Path) -> Any:
        """The engine in `data`, or None (with a warning) when TensorRT cannot load it."""
        if data is None:
            return None
        errors = len(logger.errors)
        try:
            engine = runtime.deserialize_cuda_engine(data)
        except Exception as exc:  # some versions raise rather than return None
            logger.errors.append(str(exc) or type(exc).__name__)
            engine = None
        if engine is None:
            why = logger.errors[-1].splitlines()[0] if len(logger.errors) > errors else "no detail from TensorRT"
            log.warning("TensorRT engine cache file %s cannot be loaded (%s): corrupt, or built by another "
                        "TensorRT; building it again", path, why)
        return engine

    def _build(self, trt: ModuleType, major: int, logger: Any, cache: EngineCache, key: EngineKey) -> bytes:
        source = self.path
        if key.precision == "fp16" and major >= 11:  # strongly typed: the precision is the ONNX file's
            source = fp16_onnx(self.path, key.onnx_sha256, cache)
        elif key.precision.startswith("int8"):  # TensorRT takes symmetric INT8 only
            source = symmetric_int8_onnx(self.path, key.onnx_sha256, cache)
        batch = max((e.max[0] for e in key.profile if e.min[0] != e.max[0]), default=0)
        self._say(f"building the TensorRT {key.trt_version} engine for {self.path.name} ({key.precision}"
                  f"{f', batch up to {batch}' if batch else ''}) on {key.gpu_name}: the first build of a model "
                  f"may take several minutes; it is cached in {cache.folder}")
        timing_path = cache.timing_cache_path(key.trt_version, key.gpu_name, key.compute)
        start = time.monotonic()
        data, timing = build_engine(trt, major, source, self.path, key.profile, key.precision, key.workspace,
                                    cache.read(timing_path), logger)
        cache.write(timing_path, timing)
        log.info("%s: TensorRT engine built in %.0f s", self.path.name, time.monotonic() - start)
        return data

    def _say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(line)
        else:  # a warning so that it shows by default: a silent pause of minutes looks like a hang
            log.warning("%s", line)

    # -- buffers -------------------------------------------------------------------

    def _bind(self, trt: ModuleType, cupy: ModuleType, engine: Any, io: OnnxIO, logger: Any) -> None:
        """The execution context, I/O specs and buffers (device and host) at the profile maximum."""
        where = f"model file {str(self.path)!r}"
        context = engine.create_execution_context()
        if context is None:
            raise EngineError(f"{where}: TensorRT cannot create an execution context ({logger.last_error()})")
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        order = {n: i for i, n in enumerate([n for n, _ in io.inputs] + list(io.outputs))}
        names.sort(key=lambda n: order.get(n, len(order)))  # the ONNX file's order (SCRFD's outputs rely on it)
        types = _dtypes(trt)
        specs: dict[str, tuple[bool, Shape, np.dtype, str]] = {}
        for name in names:
            is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
            shape = tuple(int(d) for d in engine.get_tensor_shape(name))
            kind = engine.get_tensor_dtype(name)
            if kind not in types:
                raise EngineError(f"{where}: tensor {name!r} has type {kind}, which this runtime cannot hold")
            specs[name] = (is_input, shape, *types[kind])
        bounds: dict[str, tuple[Shape, Shape]] = {}
        for name, (is_input, shape, _, _) in specs.items():
            if not is_input:
                continue
            if any(d < 0 for d in shape):
                lo, _, hi = (tuple(int(d) for d in s) for s in engine.get_tensor_profile_shape(name, 0))
            else:
                lo = hi = shape
            if not context.set_input_shape(name, hi):
                raise EngineError(f"{where}: TensorRT rejects input {name!r} at {list(hi)} ({logger.last_error()})")
            bounds[name] = (lo, hi)
        for name, (is_input, _, _, _) in specs.items():
            if not is_input:
                hi = tuple(int(d) for d in context.get_tensor_shape(name))
                if any(d < 0 for d in hi):
                    raise EngineError(f"{where}: the shape of output {name!r} depends on the input data, which "
                                      f"this runtime does not support")
                bounds[name] = (hi, hi)
        self._in, self._out = {}, {}
        self.inputs, self.outputs = [], []
        for name, (is_input, shape, dtype, type_name) in specs.items():
            lo, hi = bounds[name]
            size = max(1, prod(hi))
            try:
                device = cupy.empty((size,), dtype=dtype)
            except Exception as exc:  # cupy's OutOfMemoryError, or a CUDA error
                text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise EngineError(f"{where}: no room on the GPU for the buffer of {name!r} at the profile's maximum "
                                  f"{list(hi)} ({text}); lower runtime.trt_max_batch or runtime.trt_dim_range"
                                  ) from exc
            host = self._host.empty((size,), dtype)
            if not context.set_tensor_address(name, int(device.data.ptr)):
                raise EngineError(f"{where}: TensorRT rejects the buffer of {name!r} ({logger.last_error()})")
            (self._in if is_input else self._out)[name] = _Buffer(name, dtype, lo, hi, device, host)
            spec = TensorSpec(name, tuple(None if d < 0 else d for d in shape), type_name)
            (self.inputs if is_input else self.outputs).append(spec)
        batch_axis = all(s[1] and s[1][0] < 0 for s in specs.values())
        self._max_batch = min(b.hi[0] for b in self._in.values()) if batch_axis else 0
        self._stream = cupy.cuda.Stream(non_blocking=True)
        self._event = cupy.cuda.Event(disable_timing=True)
        self._context = context

    def host_buffer(self, name: str, shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> np.ndarray:
        """A reusable host array for input `name`: write a blob into it and pass it to `run`.

        Once open, it is the input's staging buffer (from the allocator: page-locked when
        the pipeline gives a pinned one), so `run` copies it to the device with no host
        copy first. Valid until the next `host_buffer` or `run` for that input.
        """
        dt = np.dtype(dtype)
        shape = tuple(int(d) for d in shape)
        buf = self._in.get(name)
        if buf is not None and buf.dtype == dt and prod(shape) <= buf.host.size:
            return buf.host[:prod(shape)].reshape(shape)
        return self._host.get(name, shape, dt)  # before open, or larger than the profile allows

    # -- per call ------------------------------------------------------------------

    def run(self, feeds: dict[str, np.ndarray], outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        """Named inputs in, named outputs out (all outputs unless `outputs` names some)."""
        return self._execute(feeds, list(outputs) if outputs else None, {})

    def run_into(self, feeds: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Named inputs in, each named output copied from the device straight into the given
        host array (engines.backends.bound_outputs: the swap stage's pinned output slots), or returned
        in an array of its own where the given one does not fit (shape, type, layout)."""
        return self._execute(feeds, list(outputs), outputs)

    def _execute(self, feeds: dict[str, np.ndarray], outputs: list[str] | None,
                 into: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._context is None:
            self.open()
        names = outputs or [o.name for o in self.outputs]
        unknown = [n for n in names if n not in self._out]
        if unknown:
            raise EngineError(f"model file {str(self.path)!r} has no output {unknown[0]!r}; "
                              f"outputs: {', '.join(self._out)}")
        arrays = self._check_feeds(feeds)
        with self._lock:
            n = next(iter(arrays.values())).shape[0] if self._max_batch else 0
            if self._max_batch and n > self._max_batch:
                step = self._max_batch
                parts = [self._run_once({k: v[i:i + step] for k, v in arrays.items()}, names,
                                        {k: v[i:i + step] for k, v in into.items() if len(v) == n})
                         for i in range(0, n, step)]
                result = {}
                for name in names:
                    pieces = [p[name] for p in parts]
                    whole = into.get(name)
                    landed = whole is not None and all(
                        _same_memory(piece, whole[i * step:i * step + len(piece)]) for i, piece in enumerate(pieces))
                    result[name] = whole if landed else np.concatenate(pieces)
            else:
                result = self._run_once(arrays, names, into)
            self.calls += 1
        return result

    def _check_feeds(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        where = f"model file {str(self.path)!r}"
        missing = [n for n in self._in if n not in feeds]
        if missing:
            raise EngineError(f"{where}: input {missing[0]!r} is missing; inputs: {', '.join(self._in)}")
        extra = [n for n in feeds if n not in self._in]
        if extra:
            raise EngineError(f"{where} has no input {extra[0]!r}; inputs: {', '.join(self._in)}")
        arrays = {name: np.asarray(value) for name, value in feeds.items()}
        for name, arr in arrays.items():
            buf = self._in[name]
            if arr.dtype != buf.dtype:
                raise EngineError(f"{where}: input {name!r} is {arr.dtype}, the engine takes {buf.dtype}")
            shape = arr.shape
            fits = len(shape) == len(buf.lo) and all(
                lo <= d <= hi or (axis == 0 and self._max_batch and d > hi)  # larger batches are split
                for axis, (d, lo, hi) in enumerate(zip(shape, buf.lo, buf.hi)))
            if not fits:
                raise EngineError(f"{where}: input {name!r} of shape {list(shape)} is outside the engine's profile "
                                  f"{_fmt_bounds(buf.lo, buf.hi)} (runtime.trt_max_batch and runtime.trt_dim_range "
                                  f"set it)")
        if self._max_batch and len({a.shape[0] for a in arrays.values()}) > 1:
            sizes = ", ".join(f"{n} {a.shape[0]}" for n, a in arrays.items())
            raise EngineError(f"{where}: the inputs' batch sizes differ ({sizes})")
        return arrays

    def _run_once(self, arrays: dict[str, np.ndarray], names: list[str],
                  into: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One engine launch on this runtime's stream, synchronised before returning.

        An input already in page-locked memory (the pipeline's pinned ring slots) is copied
        to the device straight from where it is; any other goes through the input's staging
        buffer first. An output lands in the caller's array from `into` when it fits, else
        in the staging buffer, returned as a copy (the next call overwrites the buffer)."""
        cupy, context, stream = self._cupy, self._context, self._stream
        assert cupy is not None and self.gpu is not None
        where = f"model file {str(self.path)!r}"
        with cupy.cuda.Device(self.gpu.index):
            for name, arr in arrays.items():
                buf = self._in[name]
                if not context.set_input_shape(name, arr.shape):
                    raise EngineError(f"{where}: TensorRT rejects input {name!r} of shape {list(arr.shape)}")
                source = arr
                if not self._page_locked(arr):
                    source = buf.host[:arr.size].reshape(arr.shape)
                    if not _same_memory(arr, source):  # pageable: into the (pinned) staging buffer
                        np.copyto(source, arr)
                buf.device[:arr.size].reshape(arr.shape).set(source, stream=stream)
            if not context.execute_async_v3(stream.ptr):
                raise EngineError(f"{where}: TensorRT failed to run the engine")
            views, own = {}, set()
            for name in names:
                buf = self._out[name]
                shape = tuple(int(d) for d in context.get_tensor_shape(name))
                target = into.get(name)
                if target is None or target.shape != shape or target.dtype != buf.dtype \
                        or not target.flags.c_contiguous or not target.flags.writeable:
                    target = buf.host[:prod(shape)].reshape(shape)
                    own.add(name)
                buf.device[:prod(shape)].reshape(shape).get(stream=stream, out=target, blocking=False)
                views[name] = target
            self._event.record(stream)
            self._event.synchronize()
        self.executions += 1
        return {name: view.copy() if name in own else view for name, view in views.items()}

    def _page_locked(self, arr: np.ndarray) -> bool:
        """Whether `arr` is contiguous page-locked host memory the device can read directly."""
        if not arr.flags.c_contiguous or arr.size == 0:
            return False
        cuda_rt = self._cupy.cuda.runtime  # type: ignore[union-attr]
        try:
            attrs = cuda_rt.pointerGetAttributes(int(arr.__array_interface__["data"][0]))
        except Exception:  # pageable memory on old drivers raises: not page-locked
            return False
        kind = getattr(attrs, "type", getattr(attrs, "memoryType", None))
        return kind == getattr(cuda_rt, "memoryTypeHost", 1)


def _same_memory(arr: np.ndarray, host: np.ndarray) -> bool:
    return (arr.__array_interface__["data"][0] == host.__array_interface__["data"][0]
            and arr.shape == host.shape and arr.dtype == host.dtype and arr.flags.c_contiguous)
