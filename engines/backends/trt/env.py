"""What the native TensorRT runtime needs from the machine: the `tensorrt` and `cupy`
packages and a CUDA device TensorRT supports. Each lack is a one-line EngineError that
says what to install or use instead.

Nothing here imports tensorrt or cupy at import time: `engines` must import on any machine.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from types import ModuleType

from engines.errors import EngineError

log = logging.getLogger(__name__)

SUPPORTED_MAJORS = (10, 11)
# TensorRT 10 and 11 run on Turing (compute capability 7.5) and newer GPUs.
MIN_COMPUTE = (7, 5)

# Every TensorRT name the runtime touches (module attributes, enum members, methods and
# properties of the builder, network, parser, config, profile, engine and context), so a
# test can check them against the names in the 10.x and 11.x bindings
# (tests/fixtures/trt_names.json, made by tools/trt_names.py) and against the source.
TRT_NAMES = frozenset({
    "__version__", "ILogger", "Severity", "INTERNAL_ERROR", "ERROR", "WARNING", "log",
    "Builder", "create_network", "create_builder_config", "create_optimization_profile",
    "build_serialized_network", "OnnxParser", "parse_from_file", "num_errors", "get_error", "desc",
    "MemoryPoolType", "WORKSPACE", "set_memory_pool_limit", "set_shape", "add_optimization_profile",
    "create_timing_cache", "set_timing_cache", "get_timing_cache", "serialize",
    "Runtime", "deserialize_cuda_engine", "num_io_tensors", "get_tensor_name", "get_tensor_mode",
    "get_tensor_shape", "get_tensor_dtype", "get_tensor_profile_shape", "TensorIOMode", "INPUT",
    "create_execution_context", "set_input_shape", "set_tensor_address", "execute_async_v3",
    "DataType", "FLOAT", "HALF", "INT8", "INT32", "INT64", "UINT8", "BOOL", "BuilderFlag", "set_flag",
})
# Names only TensorRT 10 has (11 builds strongly typed networks: fp16 comes from an fp16 ONNX).
TRT_NAMES_10 = frozenset({"FP16"})

INSTALL_TRT = ("pip install tensorrt-cu12 (tensorrt-cu13 for CUDA 13), whose libraries come from NVIDIA's "
               "package index (pypi.nvidia.com); or use runtime.kind=onnxruntime")
INSTALL_CUPY = "pip install cupy-cuda12x (cupy-cuda13x for CUDA 13); or use runtime.kind=onnxruntime"


class TrtUnavailable(EngineError):
    """This machine cannot run TensorRT (a library, the GPU, the cache folder): nothing to do with the model file."""


@dataclass(frozen=True)
class GpuInfo:
    """One CUDA device, as the engine cache keys it."""

    index: int
    name: str
    compute: tuple[int, int]  # compute capability (major, minor)
    total_bytes: int


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def load_tensorrt() -> tuple[ModuleType, int]:
    """The installed `tensorrt` module and its major version (10 or 11)."""
    try:
        import tensorrt as trt
    except (ImportError, OSError) as exc:  # no package, or bindings without their libraries
        raise TrtUnavailable(f"TensorRT is not installed ({_first_line(exc)}): {INSTALL_TRT}") from exc
    version = str(getattr(trt, "__version__", "unknown"))
    head = version.split(".")[0]
    major = int(head) if head.isdigit() else 0
    if major not in SUPPORTED_MAJORS:
        raise TrtUnavailable(f"TensorRT {version} is not supported: facestream runs TensorRT "
                          f"{' or '.join(map(str, SUPPORTED_MAJORS))}; {INSTALL_TRT}")
    return trt, major


def load_cupy() -> ModuleType:
    """The installed `cupy` module (CUDA streams, events and memory for the TensorRT runtime)."""
    try:
        import cupy
    except (ImportError, OSError) as exc:
        raise TrtUnavailable(f"cupy is not installed ({_first_line(exc)}); the TensorRT runtime needs it for "
                          f"CUDA streams and memory: {INSTALL_CUPY}") from exc
    return cupy


def gpu_info(cupy: ModuleType, device_id: int) -> GpuInfo:
    """Name, compute capability and memory of CUDA device `device_id`."""
    cuda_rt = cupy.cuda.runtime
    try:
        count = int(cuda_rt.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError: no driver, or no device
        raise TrtUnavailable(f"no CUDA device found ({_first_line(exc)}); the TensorRT runtime needs an NVIDIA GPU: "
                          f"use runtime.kind=onnxruntime") from exc
    if count == 0:
        raise TrtUnavailable("no CUDA device found; the TensorRT runtime needs an NVIDIA GPU: "
                          "use runtime.kind=onnxruntime")
    if device_id >= count:
        raise TrtUnavailable(f"runtime.device_id is {device_id}, but this machine has {count} CUDA "
                          f"device{'s' if count > 1 else ''} (0 to {count - 1})")
    props = cuda_rt.getDeviceProperties(device_id)
    name = props["name"]
    name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
    return GpuInfo(device_id, name.strip("\0 "), (int(props["major"]), int(props["minor"])),
                   int(props.get("totalGlobalMem", 0)))


def check_supported(gpu: GpuInfo, trt_version: str) -> None:
    """A one-line EngineError when TensorRT cannot run on this GPU."""
    if gpu.compute < MIN_COMPUTE:
        have = ".".join(map(str, gpu.compute))
        need = ".".join(map(str, MIN_COMPUTE))
        raise TrtUnavailable(f"GPU {gpu.name!r} (compute capability {have}) is not supported by TensorRT "
                          f"{trt_version}, which needs compute capability {need} (Turing) or newer: "
                          f"use runtime.kind=onnxruntime")
