"""The device the check measures: CUDA through cupy, or a numpy stand-in for the dry run.

Both give the same calls (device arrays, streams, events, copies both ways, one tunable
kernel), so every section runs the same measuring code on a GPU and on a CPU-only
machine; the stand-in's figures are host memcpy figures and say so (`stand_in`).
"""
from __future__ import annotations

import platform
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

import numpy as np

from stream.runtime.allocator import Allocator, NumpyAllocator, PinnedAllocator

# The tunable work the ring section overlaps with copies: n rounds of a multiply-add per
# byte, clamped back to uint8 (memory-light, so its time is set by n, not by bandwidth).
WORK_SCALE, WORK_BIAS = np.float32(0.999), np.float32(0.1)
_WORK_KERNEL = """
float v = (float)x;
for (int k = 0; k < rounds; ++k) { v = v * 0.999f + 0.1f; }
y = (unsigned char)fminf(fmaxf(v, 0.0f), 255.0f);
"""


class Backend(Protocol):
    name: str
    stand_in: bool

    def describe(self) -> dict[str, Any]: ...
    def pinned_allocator(self) -> Allocator: ...
    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any: ...
    def stream(self) -> Any: ...
    def event(self) -> Any: ...
    def use(self, stream: Any) -> AbstractContextManager[Any]: ...
    def upload(self, dst: Any, src: np.ndarray, stream: Any) -> None: ...
    def download(self, dst: np.ndarray, src: Any, stream: Any) -> None: ...
    def work(self, src: Any, dst: Any, rounds: int, stream: Any) -> None: ...
    def synchronize(self) -> None: ...
    def memory(self) -> dict[str, Any]: ...


def work_reference(src: np.ndarray, rounds: int) -> np.ndarray:
    """What `work` computes, on the host (float32, unfused: may differ from a GPU's fused
    multiply-add by one level after the truncation to uint8)."""
    v = src.astype(np.float32)
    for _ in range(rounds):
        v *= WORK_SCALE
        v += WORK_BIAS
    return np.clip(v, 0, 255).astype(np.uint8)


class CupyBackend:
    """CUDA through cupy: async copies on streams, events, an elementwise kernel."""

    name = "cupy"
    stand_in = False

    def __init__(self, device_id: int = 0) -> None:
        import cupy

        self.cp = cupy
        self.device_id = device_id
        cupy.cuda.Device(device_id).use()
        self._kernel = cupy.ElementwiseKernel("uint8 x, int32 rounds", "uint8 y", _WORK_KERNEL, "gpu_check_work")

    def describe(self) -> dict[str, Any]:
        cp = self.cp
        props = cp.cuda.runtime.getDeviceProperties(self.device_id)
        free, total = cp.cuda.runtime.memGetInfo()
        name = props["name"]
        return {
            "backend": self.name, "stand_in": False,
            "gpu": name.decode() if isinstance(name, bytes) else str(name),
            "compute_capability": f"{props['major']}.{props['minor']}",
            "memory_total_mib": round(total / 2**20), "memory_free_mib": round(free / 2**20),
            "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(), "cuda_driver": cp.cuda.runtime.driverGetVersion(),
            "cupy": cp.__version__,
        }

    def pinned_allocator(self) -> Allocator:
        return PinnedAllocator()

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return self.cp.empty(shape, dtype=dtype)

    def stream(self) -> Any:
        return self.cp.cuda.Stream(non_blocking=True)

    def event(self) -> Any:
        return self.cp.cuda.Event(disable_timing=True)

    def use(self, stream: Any) -> AbstractContextManager[Any]:
        return stream  # a cupy Stream is a context manager that makes it current

    def upload(self, dst: Any, src: np.ndarray, stream: Any) -> None:
        dst.set(src, stream=stream)  # async on `stream`: the DMA reads `src` later when it is pinned

    def download(self, dst: np.ndarray, src: Any, stream: Any) -> None:
        src.get(stream=stream, out=dst, blocking=False)

    def work(self, src: Any, dst: Any, rounds: int, stream: Any) -> None:
        with stream:
            self._kernel(src, np.int32(rounds), dst)

    def synchronize(self) -> None:
        self.cp.cuda.Device(self.device_id).synchronize()

    def memory(self) -> dict[str, Any]:
        free, total = self.cp.cuda.runtime.memGetInfo()
        pool = self.cp.get_default_memory_pool()
        return {"device_used_mib": round((total - free) / 2**20, 1),
                "cupy_pool_used_mib": round(pool.used_bytes() / 2**20, 1),
                "cupy_pool_total_mib": round(pool.total_bytes() / 2**20, 1)}


class _NullStream:
    """A stream stand-in: everything it is given has already happened."""

    def synchronize(self) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def __enter__(self) -> _NullStream:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class _NullEvent:
    done = True

    def record(self, stream: Any = None) -> None:
        pass

    def synchronize(self) -> None:
        pass


class NumpyBackend:
    """The dry run's device: host arrays, synchronous copies, the work in numpy."""

    name = "numpy"
    stand_in = True

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "stand_in": True, "gpu": None,
                "note": "dry run: a numpy stand-in for the device; figures are host memcpy and numpy, not CUDA",
                "cpu": platform.processor() or platform.machine()}

    def pinned_allocator(self) -> Allocator:
        return NumpyAllocator()  # no page-locked memory without CUDA: the same code path on numpy

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        return np.empty(shape, dtype=dtype)

    def stream(self) -> _NullStream:
        return _NullStream()

    def event(self) -> _NullEvent:
        return _NullEvent()

    def use(self, stream: Any) -> AbstractContextManager[Any]:
        return nullcontext(stream)

    def upload(self, dst: np.ndarray, src: np.ndarray, stream: Any) -> None:
        np.copyto(dst, src)

    def download(self, dst: np.ndarray, src: np.ndarray, stream: Any) -> None:
        np.copyto(dst, src)

    def work(self, src: np.ndarray, dst: np.ndarray, rounds: int, stream: Any) -> None:
        np.copyto(dst, work_reference(src, rounds))

    def synchronize(self) -> None:
        pass

    def memory(self) -> dict[str, Any]:
        return {"device_used_mib": None, "cupy_pool_used_mib": None, "cupy_pool_total_mib": None}


def open_backend(dry_run: bool, device_id: int = 0) -> Backend:
    """cupy on a CUDA machine; the numpy stand-in for a dry run (a RuntimeError naming what
    is missing when a real run finds no GPU)."""
    if dry_run:
        return NumpyBackend()
    try:
        import cupy
    except ImportError as exc:
        raise RuntimeError(f"cupy is not installed ({exc}); run with --dry-run on a machine without CUDA") from exc
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # no driver, or a driver older than cupy's CUDA
        raise RuntimeError(f"CUDA is not usable ({str(exc).strip()}); run with --dry-run on a machine without "
                           "CUDA") from exc
    if count <= device_id:
        raise RuntimeError(f"no CUDA device {device_id} (found {count})")
    return CupyBackend(device_id)
