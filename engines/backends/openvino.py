"""OpenVINO behind the inference-runtime protocol (engines.backends.base): `--runtime openvino`.

Why a second CPU runtime: most people who want a neural swap have a laptop, not a data-centre
GPU. Intel's runtime is often faster than ONNX Runtime on the same x86 cores (above all on
INT8 QDQ files, whose Q/DQ pairs it folds into its own low-precision kernels), and it is the
one way to run the models on an Intel integrated or discrete GPU, or an NPU.

It reads the same ONNX files as ONNX Runtime, float and INT8 QDQ alike (precision is a
property of the file), through OpenVINO's own ONNX reader, and compiles them for
`runtime.device` (CPU, GPU, NPU, or AUTO: OpenVINO's own pick among what it sees) with a
latency hint. On the CPU it uses `runtime.intra_threads` threads and computes in float32:
OpenVINO's own default on a CPU with bf16 units (AVX512-BF16, AMX) is bf16, about twice as
fast there but a drift no budget has measured, and results would then depend on the CPU.
A float file runs in float, and the speed comes from its INT8 file. A GPU or NPU keeps its
plugin's own precision (fp16 on Intel GPUs, what they are built for).

There is no VRAM plan (that is NVIDIA cards') and no pinned memory (that is CUDA's): the
host buffers are plain numpy arrays.
"""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from engines.backends.base import (
    HostAllocator,
    HostBuffers,
    RuntimeOptions,
    TensorSpec,
    normalize_device,
    open_expecting,
)
from engines.errors import EngineError, ModelNotFound

log = logging.getLogger(__name__)

INSTALL = "pip install 'facestream[openvino]'"

# OpenVINO's element types, named as ONNX Runtime names them (what TensorSpec.dtype holds).
_TYPES = {"f32": "tensor(float)", "f16": "tensor(float16)", "bf16": "tensor(bfloat16)", "f64": "tensor(double)",
          "i8": "tensor(int8)", "u8": "tensor(uint8)", "i16": "tensor(int16)", "u16": "tensor(uint16)",
          "i32": "tensor(int32)", "u32": "tensor(uint32)", "i64": "tensor(int64)", "u64": "tensor(uint64)",
          "boolean": "tensor(bool)", "string": "tensor(string)"}


class OpenVinoUnavailable(EngineError):
    """The openvino package is not installed (the machine's lack, not the model file's)."""


class DeviceUnavailable(EngineError):
    """`runtime.device` names a device OpenVINO does not see on this machine."""


def import_openvino() -> ModuleType:
    """The openvino package, or a one-line OpenVinoUnavailable naming the extra to install."""
    try:
        import openvino
    except ImportError as exc:
        raise OpenVinoUnavailable(f"--runtime openvino needs the openvino package, which is not installed: "
                                  f"{INSTALL}") from exc
    return openvino


def device_seen(device: str, seen: list[str]) -> bool:
    """Whether `device` is among OpenVINO's `available_devices` (AUTO always is; one GPU is
    listed as 'GPU' and answers to 'GPU.0' too; 'GPU' means any of 'GPU.0', 'GPU.1', ...)."""
    if device == "AUTO":
        return bool(seen)
    base, _, index = device.partition(".")
    if device in seen:
        return True
    if not index:
        return any(d.partition(".")[0] == base for d in seen)
    return index == "0" and base in seen


def auto_choice(seen: list[str]) -> str:
    """What AUTO runs on among `seen`, by the order OpenVINO documents: a GPU before the CPU
    ("GPU": OpenVINO picks which, a discrete one before an integrated one), the CPU otherwise;
    never an NPU, which AUTO leaves out unless it is named."""
    return "GPU" if any(d.startswith("GPU") for d in seen) else "CPU"


_CORE: list[Any] = []  # the process's one Core, made on first use and kept (see `core`)
_CORE_LOCK = threading.Lock()


def core() -> Any:
    """The process's OpenVINO Core, made once and never released. A Core per model unloaded
    OpenVINO's device plugins whenever the last model closed, and a Ctrl-C (SIGINT) after that
    crashed the process (SIGSEGV: the signal was delivered on memory the unloaded plugin had
    owned); one Core kept for the process keeps the plugins loaded, and it is what OpenVINO's
    documentation advises anyway (a Core is costly to make)."""
    with _CORE_LOCK:
        if not _CORE:
            _CORE.append(import_openvino().Core())
        return _CORE[0]


def devices() -> list[tuple[str, str]]:
    """The devices OpenVINO sees here, each with its full name ("GPU.0", "Intel(R) Arc(TM) ...");
    OpenVinoUnavailable without the package (`facestream doctor`'s line)."""
    ov_core = core()
    out = []
    for name in ov_core.available_devices:
        try:
            full = str(ov_core.get_property(name, "FULL_DEVICE_NAME"))
        except Exception:  # noqa: BLE001 - a name is all the doctor needs
            full = ""
        out.append((name, full))
    return out


def compile_config(device: str, threads: int) -> dict[str, Any]:
    """The properties the model is compiled with on `device` (string keys and values, as
    OpenVINO's `compile_model` takes them): a latency hint everywhere; on the CPU (itself, or
    as AUTO's candidate) `threads` threads and float32 arithmetic."""
    cpu = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"}
    config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY"}
    if device == "CPU":
        config.update(cpu)
    elif device == "AUTO":
        config["DEVICE_PROPERTIES"] = {"CPU": cpu}
    return config


def _reason(exc: BaseException) -> str:
    """The last non-empty line of OpenVINO's message (the lines before it are source locations)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def _spec(port: Any) -> TensorSpec:
    shape = tuple(d.get_length() if d.is_static else None for d in port.get_partial_shape())
    kind = port.get_element_type().get_type_name()
    return TensorSpec(port.get_any_name(), shape, _TYPES.get(kind, f"openvino type {kind}"))


class OpenVinoRuntime:
    """One ONNX model file compiled by OpenVINO for `options.device`; `run` maps named inputs
    to named outputs.

    A runtime may be run from several threads at once (the analyse and swap stages, or the
    pipelines of a server). An OpenVINO infer request holds one run's state, so each call
    takes one from a pool and gives it back: concurrent callers get a request each (made on
    first need, so the pool grows to the most callers at once), and OpenVINO may run them
    together where the device can. A lock around one request would queue them instead, and a
    request per thread would keep one for every thread that ever called, including the
    short-lived ones."""

    def __init__(self, path: str | os.PathLike[str], options: RuntimeOptions | None = None,
                 allocator: HostAllocator | None = None) -> None:
        self.path = Path(path)
        self.options = options or RuntimeOptions()
        self.allocator = allocator  # for `host_buffer` (plain numpy: nothing here gains from pinned memory)
        self.compiled: Any = None
        self.device = ""  # what the model was compiled for, once open ("AUTO", "CPU", ...)
        self.inputs: list[TensorSpec] = []
        self.outputs: list[TensorSpec] = []
        self._index: dict[str, int] = {}  # output name -> its place in a result (set by open)
        self.calls = 0
        self._host = HostBuffers(allocator)
        self._idle: list[Any] = []  # infer requests not in use
        self._lock = threading.Lock()  # guards _idle and calls

    @property
    def is_open(self) -> bool:
        return self.compiled is not None

    def open(self) -> None:
        """Read and compile the model; a one-line EngineError for a missing or non-ONNX file,
        a device this machine lacks, or no openvino package."""
        if self.compiled is not None:
            return
        if not self.path.is_file():
            raise ModelNotFound(f"model file {str(self.path)!r} does not exist")
        ov = import_openvino()
        device = normalize_device(self.options.device)
        ov_core = core()
        seen = list(ov_core.available_devices)
        if not device_seen(device, seen):
            raise DeviceUnavailable(f"OpenVINO device {device!r} is not on this machine; OpenVINO sees: "
                                    f"{', '.join(seen) or 'none'} (--device)")
        model = self._read(ov)
        threads = self.options.intra_threads or (os.cpu_count() or 1)
        try:
            self.compiled = ov_core.compile_model(model, device, compile_config(device, threads))
        except Exception as exc:  # OpenVINO raises its own types: an op the device lacks, a plugin failure
            raise EngineError(f"model file {str(self.path)!r}: OpenVINO cannot compile it for {device} "
                              f"({_reason(exc)})") from exc
        self.device = device
        self.inputs = [_spec(p) for p in self.compiled.inputs]
        self.outputs = [_spec(p) for p in self.compiled.outputs]
        self._index = {o.name: i for i, o in enumerate(self.outputs)}
        log.debug("%s on OpenVINO %s (%s threads on the CPU)", self.path.name, device, threads)

    def _read(self, ov: ModuleType) -> Any:
        """The ONNX file as an OpenVINO model, read by OpenVINO's ONNX reader alone: the
        generic `Core.read_model` tries every framework's reader on a bad file, and some print
        to stderr as they fail."""
        try:
            reader = ov.frontend.FrontEndManager().load_by_framework("onnx")
            model = reader.convert(reader.load(str(self.path)))
        except Exception as exc:  # the reader's GeneralFailure and friends
            raise EngineError(f"model file {str(self.path)!r} is not a loadable ONNX model "
                              f"({_reason(exc)})") from exc
        if not model.inputs:
            raise EngineError(f"model file {str(self.path)!r} is not a loadable ONNX model (it has no inputs)")
        return model

    def open_expecting(self, what: str) -> None:
        """`open()`, with a load failure saying which kind of model file was expected (a
        missing file, package or device passes unchanged)."""
        open_expecting(self, what, (OpenVinoUnavailable, DeviceUnavailable))

    def _infer(self, feeds: dict[str, np.ndarray], names: list[str] | None, share: bool,
               outputs: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """One run on a pooled request. `share`: OpenVINO's outputs are views of the request's
        memory, so they are copied out (into `outputs` where given) before it is given back."""
        if self.compiled is None:
            self.open()
        index = self._index
        wanted = names or list(index)
        missing = [n for n in wanted if n not in index]
        if missing:
            raise EngineError(f"model file {str(self.path)!r} has no output {missing[0]!r}; "
                              f"outputs: {', '.join(index)}")
        with self._lock:
            request = self._idle.pop() if self._idle else None
            compiled = self.compiled
            self.calls += 1
        if request is None:
            request = compiled.create_infer_request()
        try:
            # Inputs are read in place (the call is synchronous, the caller's arrays outlive it).
            result = request.infer(feeds, share_inputs=True, share_outputs=share)
            out: dict[str, np.ndarray] = {}
            for name in wanted:
                value = result[index[name]]
                target = outputs.get(name) if outputs is not None else None
                if target is not None and target.shape == value.shape and target.dtype == value.dtype:
                    np.copyto(target, value)
                    out[name] = target
                else:
                    out[name] = value.copy() if share else value
            return out
        finally:
            with self._lock:
                if self.compiled is compiled:  # a request of a closed model is dropped
                    self._idle.append(request)

    def run(self, feeds: dict[str, np.ndarray], outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        """Named inputs in, named outputs out (all outputs unless `outputs` names some), in
        arrays of their own."""
        return self._infer(feeds, outputs, share=False)

    def run_into(self, feeds: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Named inputs in, each output copied into the given host array (a ring slot's) from
        the request's own memory: one copy, no allocation (engines.backends.bound_outputs). An
        array of another shape or type than this run's output is left alone, and the output
        comes back in an array of its own."""
        for name, out in outputs.items():
            if not out.flags.c_contiguous:
                raise ValueError(f"output {name!r}: the array to write into must be C-contiguous")
        return self._infer(feeds, list(outputs), share=True, outputs=outputs)

    def host_buffer(self, name: str, shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> np.ndarray:
        """A reusable host array for input `name`: write a blob into it and pass it to `run`
        (kept for the next call of the same shape and type)."""
        return self._host.get(name, shape, dtype)

    def close(self) -> None:
        """Release the compiled model, its infer requests and the host buffers."""
        with self._lock:
            self.compiled = None
            self._idle.clear()
        self._host.clear()
