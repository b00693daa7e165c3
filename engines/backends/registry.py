"""The runtimes by name, and the factory the models get their runtime from."""
from __future__ import annotations

import os
from collections.abc import Callable

from engines.backends.base import HostAllocator, InferenceRuntime, RuntimeOptions
from engines.backends.ort import OrtRuntime

# A runtime for one model file, made when the model is built (opened later by the model).
RuntimeFactory = Callable[[str | os.PathLike[str]], InferenceRuntime]


def _tensorrt(path: str | os.PathLike[str], options: RuntimeOptions,
              allocator: HostAllocator | None) -> InferenceRuntime:
    # Imported when asked for: importing engines never imports tensorrt or cupy (nor this module).
    from engines.backends.trt.runtime import TrtRuntime

    return TrtRuntime(path, options, allocator)


def _triton(path: str | os.PathLike[str], options: RuntimeOptions,
            allocator: HostAllocator | None) -> InferenceRuntime:
    # Imported when asked for: importing engines never imports tritonclient.
    from engines.backends.triton.runtime import TritonRuntime

    return TritonRuntime(path, options, allocator)


def _openvino(path: str | os.PathLike[str], options: RuntimeOptions,
              allocator: HostAllocator | None) -> InferenceRuntime:
    # The module is light; it imports the openvino package itself only when a model opens.
    from engines.backends.openvino import OpenVinoRuntime

    return OpenVinoRuntime(path, options, allocator)


def _triton_factory(options: RuntimeOptions, allocator: HostAllocator | None) -> RuntimeFactory:
    from engines.backends.triton.factory import TritonFactory

    return TritonFactory(options, allocator)


RUNTIMES: dict[str, Callable[[str | os.PathLike[str], RuntimeOptions, HostAllocator | None],
                             InferenceRuntime]] = {
    "onnxruntime": OrtRuntime,
    "tensorrt": _tensorrt,  # native TensorRT 10 or 11 (engines.backends.trt.runtime)
    "triton": _triton,  # a Triton Inference Server over gRPC (engines.backends.triton.runtime)
    "openvino": _openvino,  # Intel's OpenVINO on runtime.device: CPU, Intel GPU, NPU (engines.backends.openvino)
}
AUTO = "auto"  # the default: ONNX Runtime, or per model the CPU runtime measured faster here
RUNTIME_NAMES = (AUTO, *sorted(RUNTIMES))  # what runtime.kind and --runtime take
# Kinds whose runtimes share something (a server connection, the server's model index):
# their factory is made once per run. Triton's serves what the server has and runs the
# rest on the local ONNX Runtime.
FACTORIES: dict[str, Callable[[RuntimeOptions, HostAllocator | None], RuntimeFactory]] = {
    "triton": _triton_factory,
}


def runtime_factory(options: RuntimeOptions | None = None,
                    allocator: HostAllocator | None = None) -> RuntimeFactory:
    """Makes runtimes of `options.kind` for model files, with these options and host
    buffers from `allocator`; an unknown kind is a ValueError listing the known ones."""
    options = options or RuntimeOptions()
    # `auto` picks a runtime per model file from its INT8 report (engines.quantize.choose,
    # which a run's SwapJob uses); a factory asked for directly makes ONNX Runtime's.
    kind = "onnxruntime" if options.kind == AUTO else options.kind
    try:
        make = RUNTIMES[kind]
    except KeyError:
        raise ValueError(f"unknown runtime {options.kind!r}; known: {', '.join(RUNTIME_NAMES)}") from None
    if kind in FACTORIES:
        return FACTORIES[kind](options, allocator)

    def factory(path: str | os.PathLike[str]) -> InferenceRuntime:
        return make(path, options, allocator)

    return factory
