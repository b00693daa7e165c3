"""Section a: host<->device copy bandwidth from pinned and from pageable host memory.

Host buffers come from our allocators (stream.runtime.allocator: PinnedAllocator, the
page-locked memory the rings use with CUDA, against NumpyAllocator's pageable memory).
Each copy is queued on a stream and timed to the stream's end (median of `repeats`);
every size is also copied up and back once and compared, so a figure always comes with
proof that the bytes arrived.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from stream.runtime.allocator import NumpyAllocator
from tools.gpu_check.device import Backend


def median_s(step: Callable[[], None], repeats: int) -> float:
    """The median time of `step` over `repeats` runs, after one warm-up run."""
    step()  # warm-up: first-touch of the pages, the driver's staging buffers
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def measure_copies(backend: Backend, sizes_mib: Sequence[float], repeats: int) -> dict[str, Any]:
    """Bandwidth (GB/s, 1e9 bytes) of each direction, per size and kind of host memory."""
    stream = backend.stream()
    allocators = {"pinned": backend.pinned_allocator(), "pageable": NumpyAllocator()}
    rows: list[dict[str, Any]] = []
    for size in sizes_mib:
        n = max(1, int(size * 2**20))
        device = backend.empty((n,), np.uint8)
        for memory, alloc in allocators.items():
            host = alloc.empty((n,), np.uint8)
            host[:] = (np.arange(n) % 251).astype(np.uint8)
            back = alloc.empty((n,), np.uint8)

            def up(host: np.ndarray = host, device: Any = device) -> None:
                backend.upload(device, host, stream)
                stream.synchronize()

            def down(back: np.ndarray = back, device: Any = device) -> None:
                backend.download(back, device, stream)
                stream.synchronize()

            up_s = median_s(up, repeats)
            down_s = median_s(down, repeats)
            rows.append({
                "size_mib": size, "memory": memory, "allocator": alloc.name,
                "h2d_ms_p50": round(up_s * 1e3, 4), "d2h_ms_p50": round(down_s * 1e3, 4),
                "h2d_gbps": round(n / up_s / 1e9, 2), "d2h_gbps": round(n / down_s / 1e9, 2),
                "round_trip_exact": bool(np.array_equal(back, host)),
            })
        del device
    largest = max(sizes_mib)
    at = {r["memory"]: r for r in rows if r["size_mib"] == largest}
    return {
        "sizes_mib": list(sizes_mib), "repeats": repeats, "rows": rows,
        "pinned_over_pageable": {  # speed-up of pinned memory, at the largest size
            "size_mib": largest,
            "h2d": _ratio(at["pageable"]["h2d_ms_p50"], at["pinned"]["h2d_ms_p50"]),
            "d2h": _ratio(at["pageable"]["d2h_ms_p50"], at["pinned"]["d2h_ms_p50"]),
        },
        "all_exact": all(r["round_trip_exact"] for r in rows),
    }


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b > 0 else None
