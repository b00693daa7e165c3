"""ONNX Runtime behind the inference-runtime protocol (engines.backends.base): named inputs in, named outputs out.

Providers are chosen by name or `auto` among those installed, best first (TensorRT EP,
CUDA, DirectML, CoreML, OpenVINO, CPU). CPU thread counts follow the machine.

On CUDA and the TensorRT EP, `run` goes through ONNX Runtime's IO binding: inputs are
bound from host arrays (pinned ones when the pipeline hands the runtime a pinned
allocator, see `host_buffer`), outputs are bound to device memory that ONNX Runtime
allocates, and are copied back to the host once the run has finished; `run_into` binds
them to the caller's host arrays instead (a ring slot's). The CPU keeps the plain
`session.run`, which has nothing to gain from a binding.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from engines.backends.base import HostAllocator, HostBuffers, RuntimeOptions, TensorSpec, open_expecting
from engines.errors import EngineError, ModelNotFound

log = logging.getLogger(__name__)

# Best first: what `auto` picks among the installed providers.
PROVIDER_ORDER = (
    "TensorrtExecutionProvider",
    "CUDAExecutionProvider",
    "DmlExecutionProvider",
    "CoreMLExecutionProvider",
    "OpenVINOExecutionProvider",
    "CPUExecutionProvider",
)
# Providers whose outputs live in CUDA device memory: IO binding is on for them by default.
CUDA_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider")
SHORT_NAMES = {
    "tensorrt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "directml": "DmlExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "cpu": "CPUExecutionProvider",
}


def io_binding_device(setting: bool | None, providers: list[str]) -> str | None:
    """The device ("cuda" or "cpu") to bind outputs to, or None for the plain `session.run`.

    `setting` None (auto) binds only when the first provider is CUDA or the TensorRT EP:
    their outputs are produced in device memory, and the binding lets ONNX Runtime keep
    them there until one explicit copy. True binds on any provider (outputs on the CPU
    when the first provider is not a CUDA one: useful to exercise the path without a GPU).
    """
    first = providers[0] if providers else ""
    on_cuda = first in CUDA_PROVIDERS
    if setting is None:
        return "cuda" if on_cuda else None
    if not setting:
        return None
    return "cuda" if on_cuda else "cpu"


def available_providers() -> list[str]:
    import onnxruntime as ort

    return list(ort.get_available_providers())


def runs_on_cuda(providers: str | list[str]) -> bool:
    """Whether ONNX Runtime, asked for these providers, runs the models on an NVIDIA GPU (its
    first provider CUDA or the TensorRT EP); False where the ask cannot be met (the runtime
    says why when it opens)."""
    try:
        chosen = choose_providers(providers, available_providers())
    except ValueError:
        return False
    return bool(chosen) and chosen[0] in CUDA_PROVIDERS


def choose_providers(wanted: str | list[str], installed: list[str]) -> list[str]:
    """The provider list to hand to ONNX Runtime; ValueError naming what is missing."""
    if wanted == "auto":
        chosen = [p for p in PROVIDER_ORDER if p in installed]
    else:
        names = [wanted] if isinstance(wanted, str) else list(wanted)
        chosen = []
        for name in names:
            full = SHORT_NAMES.get(name.lower(), name)
            if full not in installed:
                raise ValueError(f"ONNX Runtime provider {name!r} is not installed; "
                                 f"installed: {', '.join(installed)}")
            chosen.append(full)
    if "CPUExecutionProvider" in installed and "CPUExecutionProvider" not in chosen:
        chosen.append("CPUExecutionProvider")  # the fallback for ops a device lacks
    return chosen


class OrtRuntime:
    """One ONNX model file in an ONNX Runtime session; `run` maps named inputs to outputs."""

    def __init__(self, path: str | os.PathLike[str], options: RuntimeOptions | None = None,
                 allocator: HostAllocator | None = None) -> None:
        self.path = Path(path)
        self.options = options or RuntimeOptions()
        self.allocator = allocator  # for `host_buffer`; the pipeline passes its pinned one on CUDA
        self.session: Any = None
        self.inputs: list[TensorSpec] = []
        self.outputs: list[TensorSpec] = []
        self.providers: list[str] = []
        self.binding_device: str | None = None  # set by open(): see io_binding_device
        self.calls = 0
        self._host = HostBuffers(allocator)

    @property
    def is_open(self) -> bool:
        return self.session is not None

    def open(self) -> None:
        """Create the session; a missing or non-ONNX file is a one-line EngineError."""
        if self.session is not None:
            return
        if not self.path.is_file():
            raise ModelNotFound(f"model file {str(self.path)!r} does not exist")
        import onnxruntime as ort

        opts = self.options
        so = ort.SessionOptions()
        so.intra_op_num_threads = opts.intra_threads or (os.cpu_count() or 1)
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        providers = choose_providers(opts.providers, available_providers())
        provider_options = [self._provider_options(p) for p in providers]
        try:
            self.session = ort.InferenceSession(str(self.path), sess_options=so, providers=providers,
                                                provider_options=provider_options)
        except Exception as exc:  # ORT raises its own exception types for bad files
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise EngineError(f"model file {str(self.path)!r} is not a loadable ONNX model ({text})") from exc
        self.providers = list(self.session.get_providers())
        self.inputs = [TensorSpec(i.name, _shape(i.shape), i.type) for i in self.session.get_inputs()]
        self.outputs = [TensorSpec(o.name, _shape(o.shape), o.type) for o in self.session.get_outputs()]
        self.binding_device = io_binding_device(opts.io_binding, self.providers)
        log.debug("%s on %s%s", self.path.name, ", ".join(self.providers),
                  f" (IO binding, outputs on {self.binding_device})" if self.binding_device else "")

    def _provider_options(self, provider: str) -> dict[str, Any]:
        opts = self.options
        out: dict[str, Any] = dict(opts.extra.get(provider, {}))
        if provider in ("CUDAExecutionProvider", "TensorrtExecutionProvider"):
            out.setdefault("device_id", opts.device_id)
        if provider == "CUDAExecutionProvider" and opts.gpu_mem_limit:
            out.setdefault("gpu_mem_limit", int(opts.gpu_mem_limit))
        if provider == "TensorrtExecutionProvider":
            if opts.trt_cache_dir:
                out.setdefault("trt_engine_cache_enable", True)
                out.setdefault("trt_engine_cache_path", opts.trt_cache_dir)
            out.setdefault("trt_fp16_enable", bool(opts.trt_fp16))
            if _quantized(self.path):  # a Q/DQ file: its scales are in it, no calibration table
                out.setdefault("trt_int8_enable", True)
        return out

    def open_expecting(self, what: str) -> None:
        """`open()`, with a load failure saying which kind of model file was expected
        (a missing file stays ModelNotFound)."""
        open_expecting(self, what)

    def run(self, feeds: dict[str, np.ndarray], outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        """Named inputs in, named outputs out (all outputs unless `outputs` names some)."""
        if self.session is None:
            self.open()
        names = outputs or [o.name for o in self.outputs]
        self.calls += 1
        if self.binding_device is not None:
            return self._run_bound(feeds, names, self.binding_device)
        values = self.session.run(names, feeds)
        return dict(zip(names, values))

    def _run_bound(self, feeds: dict[str, np.ndarray], names: list[str], device: str) -> dict[str, np.ndarray]:
        """One run through an IO binding: host inputs, outputs on `device`, copied back at the end."""
        # A fresh binding per call: an IOBinding holds per-run state, and a runtime may be run
        # from more than one thread; making one costs microseconds next to a GPU inference.
        binding = self.session.io_binding()
        # Contiguous inputs, held until the run is over, in case the binding reads the arrays'
        # memory directly rather than copying it when bound.
        held = [(name, np.ascontiguousarray(value)) for name, value in feeds.items()]
        for name, value in held:
            binding.bind_cpu_input(name, value)
        for name in names:
            # ONNX Runtime allocates each output on the device, at the shape the run produces
            # (shapes may be dynamic, so nothing is preallocated here).
            binding.bind_output(name, device, self.options.device_id)
        self.session.run_with_iobinding(binding)
        values = binding.copy_outputs_to_cpu()
        if len(values) != len(names):
            raise EngineError(f"model file {str(self.path)!r}: IO binding returned {len(values)} outputs "
                              f"for {len(names)} bound ({', '.join(names)})")
        return dict(zip(names, values))

    def run_into(self, feeds: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Named inputs in, each output written into the given host array (engines.backends.bound_outputs).

        Through the IO binding (CUDA, the TensorRT EP, or `io_binding` on), each output is
        bound to its array, so ONNX Runtime's device->host copy lands there (in page-locked
        memory when the arrays come from the pipeline's pinned allocator). The plain CPU
        path gains nothing from a binding: it returns ONNX Runtime's own arrays.
        """
        if self.session is None:
            self.open()
        names = list(outputs)
        if self.binding_device is None:
            return self.run(feeds, names)
        self.calls += 1
        binding = self.session.io_binding()
        held = [(name, np.ascontiguousarray(value)) for name, value in feeds.items()]
        for name, value in held:
            binding.bind_cpu_input(name, value)
        for name, out in outputs.items():
            if not out.flags.c_contiguous:
                raise ValueError(f"output {name!r}: the array to write into must be C-contiguous")
            binding.bind_output(name, "cpu", 0, out.dtype, list(out.shape), out.ctypes.data)
        self.session.run_with_iobinding(binding)
        return dict(outputs)

    def host_buffer(self, name: str, shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> np.ndarray:
        """A reusable host array for input `name`: write a blob into it and pass it to `run`.

        It comes from the runtime's allocator (page-locked memory when the pipeline gives a
        pinned one, which the driver can copy to the device without a staging copy) and is
        kept for the next call of the same shape and type; plain numpy without an allocator.
        """
        return self._host.get(name, shape, dtype)

    def close(self) -> None:
        """Release the session (and with it the model's memory on the device) and host buffers."""
        self.session = None
        self.binding_device = None
        self._host.clear()


def _quantized(path: Path) -> bool:
    """Whether `path` is a Q/DQ (INT8) file; an unreadable one is left to ONNX Runtime to report."""
    from engines.backends.onnx_io import OnnxReadError, is_quantized

    try:
        return is_quantized(path)
    except OnnxReadError:
        return False


def _shape(shape: Any) -> tuple[int | None, ...]:
    return tuple(d if isinstance(d, int) else None for d in shape)
