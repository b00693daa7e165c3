"""The runtimes by name, and the factory the models get their runtime from."""
from __future__ import annotations

import os
from collections.abc import Callable

from engines.ort_runtime import OrtRuntime
from engines.runtime import HostAllocator, InferenceRuntime, RuntimeOptions

# A runtime for one model file, made when the model is built (opened later by the model).
RuntimeFactory = Callable[[str | os.PathLike[str]], InferenceRuntime]


def _tensorrt(path: str | os.PathLike[str], options: RuntimeOptions,
              allocator: HostAllocator | None) -> InferenceRuntime:
    # Imported when asked for: importing engines never imports tensorrt or cupy (nor this module).
    from engines.trt_runtime import TrtRuntime

    return TrtRuntime(path, options, allocator)


RUNTIMES: dict[str, Callable[[str | os.PathLike[str], RuntimeOptions, HostAllocator | None],
                             InferenceRuntime]] = {
    "onnxruntime": OrtRuntime,
    "tensorrt": _tensorrt,  # native TensorRT 10 or 11 (engines.trt_runtime)
}


def runtime_factory(options: RuntimeOptions | None = None,
                    allocator: HostAllocator | None = None) -> RuntimeFactory:
    """Makes runtimes of `options.kind` for model files, with these options and host
    buffers from `allocator`; an unknown kind is a ValueError listing the known ones."""
    options = options or RuntimeOptions()
    try:
        make = RUNTIMES[options.kind]
    except KeyError:
        raise ValueError(f"unknown runtime {options.kind!r}; known: {', '.join(sorted(RUNTIMES))}") from None

    def factory(path: str | os.PathLike[str]) -> InferenceRuntime:
        return make(path, options, allocator)

    return factory
