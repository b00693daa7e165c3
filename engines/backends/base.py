"""The inference-runtime seam: the protocol every runtime implements and the options that
configure it (`engines.backends.registry` makes one for a model file by name).

A model class (detector, embedder, swapper, enhancer, landmarker) receives a runtime and
never builds one, so a new runtime (native TensorRT, a Triton client) is one new module
plus one entry in `runtime_registry.RUNTIMES`, and no model class changes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from engines.backends.addresses import normalize_url, split_urls
from engines.errors import EngineError, ModelNotFound


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a model: its name, shape (None for a dynamic axis), type."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str


class HostAllocator(Protocol):
    """Where host buffers come from (the pipeline's allocators fit: numpy, or pinned memory)."""

    def empty(self, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray: ...


class HostBuffers:
    """Reusable host arrays by input name, from an allocator (plain numpy without one): one
    per name, kept while its shape and type stay the same (a runtime's `host_buffer`)."""

    def __init__(self, allocator: HostAllocator | None) -> None:
        self.allocator = allocator
        self._buffers: dict[str, np.ndarray] = {}

    def empty(self, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
        """A new array from the allocator (not kept)."""
        alloc = self.allocator
        return alloc.empty(tuple(shape), dtype) if alloc is not None else np.empty(shape, dtype)

    def get(self, name: str, shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> np.ndarray:
        dt = np.dtype(dtype)
        buf = self._buffers.get(name)
        if buf is None or buf.shape != tuple(shape) or buf.dtype != dt:
            buf = self._buffers[name] = self.empty(tuple(shape), dt)
        return buf

    def clear(self) -> None:
        self._buffers.clear()


def open_expecting(runtime: Any, what: str, kept: tuple[type[BaseException], ...] = ()) -> None:
    """`runtime.open()`, with a load failure saying which kind of model file was expected
    (`what`); a missing file (ModelNotFound) and the errors in `kept` (what the machine
    lacks, not the file's fault) pass unchanged. Each runtime's `open_expecting`."""
    try:
        runtime.open()
    except (ModelNotFound, *kept):
        raise
    except EngineError as exc:
        raise EngineError(f"{exc}; expected {what}") from exc


DEVICES = ("AUTO", "CPU", "GPU", "NPU")  # what `runtime.device` accepts (GPU and NPU with an index: GPU.1)
_DEVICE = re.compile(r"^(AUTO|CPU|(GPU|NPU)(\.\d+)?)$")


def normalize_device(text: str) -> str:
    """'gpu.1' -> 'GPU.1'; a ValueError quoting anything else and listing what is accepted."""
    device = str(text).strip().upper()
    if not _DEVICE.match(device):
        raise ValueError(f"runtime.device {text!r} is not an OpenVINO device; accepted: {', '.join(DEVICES)} "
                         f"(GPU and NPU may take an index, e.g. GPU.1)")
    return device



def parse_size(text: str) -> int:
    """'1.5G', '800M', '2GB', '1073741824' -> bytes; ValueError with the accepted forms."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    number = t[:-1] if t[-1:] in "KMGT" and t[-1:] else t
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"{text!r}: a size like 1.5G, 800M or a byte count") from None
    if value <= 0:
        raise ValueError(f"{text!r}: a size must be positive")
    return int(value * scale)


@dataclass
class RuntimeOptions:
    """Which runtime runs the models, and how (the `runtime:` section of a config)."""

    # a name in RUNTIMES, or auto: ONNX Runtime, with each model on the CPU runtime its INT8
    # report measured faster on this CPU (engines.quantize.choose)
    kind: str = "auto"
    providers: str | list[str] = "auto"  # ONNX Runtime: "auto", a short name ("cuda"), or a list
    intra_threads: int = 0  # CPU threads per model; 0: the machine's core count
    device_id: int = 0  # the GPU to run on
    gpu_mem_limit: int | None = None  # bytes a model may take on the device (CUDA / TensorRT)
    trt_cache_dir: str | None = None  # TensorRT engine cache folder
    trt_fp16: bool = False  # let TensorRT build fp16 engines
    trt_max_batch: int = 8  # native TensorRT: the largest batch of a model whose batch axis is dynamic
    trt_workspace: int | None = None  # native TensorRT: builder workspace bytes (None: 1 GiB)
    # native TensorRT: min, opt, max of any other dynamic input axis (SCRFD's height and width)
    trt_dim_range: tuple[int, int, int] = (32, 640, 1280)
    io_binding: bool | None = None  # None: on when the first provider is CUDA or TensorRT
    max_vram: int | str | None = None  # the most device memory a GPU run plans for (bytes, or "1.5G")
    # Triton (kind "triton"): the servers' gRPC addresses (host:port; requests spread over
    # those up), and how long a call waits for an answer, a server gone included
    triton_urls: list[str] = field(default_factory=list)
    triton_timeout: float = 30.0
    # OpenVINO (kind "openvino") only: CPU, GPU (an Intel GPU; GPU.1 the second), NPU, or AUTO:
    # OpenVINO's own pick among what it sees (an iGPU where there is one, else the CPU)
    device: str = "AUTO"
    extra: dict[str, dict[str, Any]] = field(default_factory=dict)  # per-provider options

    def __post_init__(self) -> None:
        if self.intra_threads < 0:
            raise ValueError(f"runtime.intra_threads must be >= 0, got {self.intra_threads}")
        if self.device_id < 0:
            raise ValueError(f"runtime.device_id must be >= 0, got {self.device_id}")
        if self.gpu_mem_limit is not None and self.gpu_mem_limit <= 0:
            raise ValueError(f"runtime.gpu_mem_limit must be a positive byte count, got {self.gpu_mem_limit}")
        if self.trt_max_batch < 1:
            raise ValueError(f"runtime.trt_max_batch must be >= 1, got {self.trt_max_batch}")
        if self.trt_workspace is not None and self.trt_workspace <= 0:
            raise ValueError(f"runtime.trt_workspace must be a positive byte count, got {self.trt_workspace}")
        if isinstance(self.max_vram, str):
            try:
                self.max_vram = parse_size(self.max_vram)
            except ValueError as exc:
                raise ValueError(f"runtime.max_vram {exc}") from None
        if self.max_vram is not None and (isinstance(self.max_vram, bool) or self.max_vram <= 0):
            raise ValueError(f"runtime.max_vram must be a positive size such as 1.5G, got {self.max_vram!r}")
        self.triton_urls = [normalize_url(u) for u in split_urls(self.triton_urls)]
        if self.kind == "triton" and not self.triton_urls:
            raise ValueError("runtime.kind triton needs runtime.triton_urls (--triton-url HOST:PORT: "
                             "a server's gRPC address, e.g. 127.0.0.1:8001)")
        timeout = self.triton_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"runtime.triton_timeout must be a positive number of seconds, got {timeout!r}")
        self.device = normalize_device(self.device)
        raw = self.trt_dim_range  # a YAML list arrives as a list
        dims = tuple(raw) if isinstance(raw, (list, tuple)) else ()
        if len(dims) != 3 or not all(isinstance(d, int) for d in dims) or not 1 <= dims[0] <= dims[1] <= dims[2]:
            raise ValueError(f"runtime.trt_dim_range must be [min, opt, max] with 1 <= min <= opt <= max, "
                             f"got {self.trt_dim_range}")
        self.trt_dim_range = dims  # type: ignore[assignment]


class InferenceRuntime(Protocol):
    """One model file behind one call: named inputs in, named outputs out."""

    path: Path
    calls: int  # model invocations so far (a batched call counts once)
    inputs: list[TensorSpec]  # known once open
    outputs: list[TensorSpec]

    @property
    def is_open(self) -> bool: ...

    def open(self) -> None:
        """Load the model (and build or fetch what it needs); a one-line EngineError when it cannot."""
        ...

    def open_expecting(self, what: str) -> None:
        """`open()`, with a load failure saying which kind of model file was expected."""
        ...

    def run(self, feeds: dict[str, np.ndarray], outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        """Named inputs in, named outputs out (all outputs unless `outputs` names some)."""
        ...

    def host_buffer(self, name: str, shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> np.ndarray:
        """A reusable host array for input `name`, from the runtime's allocator."""
        ...

    def close(self) -> None:
        """Release the model and its buffers (host and device)."""
        ...
