"""Where slot buffers come from: plain numpy on the CPU, page-locked host memory with CUDA.

Pinned (page-locked) host memory lets the swap stage copy a slot to the GPU with DMA,
asynchronously; pageable memory forces a staging copy. The pinned allocator is chosen
only when cupy is importable and sees a CUDA device.
"""
from __future__ import annotations

import logging
from math import prod
from typing import Protocol

import numpy as np

log = logging.getLogger(__name__)


class Allocator(Protocol):
    name: str

    def empty(self, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
        """A new host array of `shape` and `dtype` (contents undefined), allocated once."""
        ...


class NumpyAllocator:
    """Ordinary pageable host memory."""

    name = "numpy"

    def empty(self, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
        return np.empty(shape, dtype=dtype)


class PinnedAllocator:
    """Page-locked host memory through cupy's pinned memory pool (CUDA only)."""

    name = "cuda-pinned"

    def __init__(self) -> None:
        import cupy  # noqa: F401  (imported here: optional dependency)

        self._cupy = cupy

    def empty(self, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
        dt = np.dtype(dtype)
        nbytes = max(1, prod(shape) * dt.itemsize)
        block = self._cupy.cuda.alloc_pinned_memory(nbytes)
        # The array holds the block (numpy keeps the buffer's owner), so the block goes back
        # to cupy's pinned pool with the last array on it: a server's pipelines come and go,
        # and the allocator must not keep every ring they ever had.
        return np.frombuffer(block, dtype=dt, count=prod(shape)).reshape(shape)


def cuda_available() -> bool:
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount()) > 0
    except Exception:  # no cupy, no driver, no device: all mean "CPU only"
        return False


def default_allocator(prefer_pinned: bool = True) -> Allocator:
    """Pinned memory when CUDA is present, numpy otherwise."""
    if prefer_pinned and cuda_available():
        try:
            return PinnedAllocator()
        except Exception as exc:  # a broken CUDA install must not stop a CPU run
            log.warning("pinned memory unavailable (%s); using numpy", exc)
    return NumpyAllocator()
