"""Run figures: per-stage time (p50/p95), throughput, drops, ring occupancy, latency, RSS."""
from __future__ import annotations

import json
import resource
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class Samples:
    """Durations in seconds, appended by one thread."""

    values: list[float] = field(default_factory=list)

    def add(self, seconds: float) -> None:
        self.values.append(seconds)

    def summary_ms(self) -> dict[str, float]:
        if not self.values:
            return {"count": 0, "p50_ms": 0.0, "p95_ms": 0.0, "mean_ms": 0.0}
        arr = np.asarray(self.values) * 1000.0
        return {
            "count": int(arr.size),
            "p50_ms": round(float(np.percentile(arr, 50)), 3),
            "p95_ms": round(float(np.percentile(arr, 95)), 3),
            "mean_ms": round(float(arr.mean()), 3),
        }


def peak_rss_mb() -> float:
    """Peak resident set size of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Metrics:
    """Collected by the stages of one run; `report()` turns them into a plain dict."""

    def __init__(self) -> None:
        self.stages: dict[str, Samples] = {}
        self.latency = Samples()
        self.frames_in = 0  # read from the source (live: including frames dropped at once)
        self.frames_out = 0
        self.faces_swapped = 0
        self.faces_on_screen = 0  # faces swapped into the last frame delivered (live runs set it)
        self.frames_with_faces = 0
        self.swaps_made = 0  # swapper runs on a face (a run swapping at a cadence: fewer than faces_swapped)
        self.faces_carried = 0  # faces pasted from a swap made on an earlier frame
        self.swap_every: str | None = None  # a run swapping at a cadence: "auto" or N (its report's `cadence`)
        self.swapper = ""  # the swapper's name, for the cadence's line
        self.started = time.monotonic()
        self.finished: float | None = None
        self._lock = threading.Lock()

    def stage(self, name: str) -> Samples:
        with self._lock:
            return self.stages.setdefault(name, Samples())

    def count_swaps(self, made: int = 0, carried: int = 0) -> None:
        """Swapper runs made and faces pasted from an earlier swap (any thread)."""
        with self._lock:
            self.swaps_made += made
            self.faces_carried += carried

    def finish(self) -> None:
        self.finished = time.monotonic()

    @property
    def elapsed(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    def report(
        self,
        rings: list[Any] = (),  # type: ignore[assignment]
        model_calls: dict[str, int] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        elapsed = self.elapsed
        out: dict[str, Any] = {
            "frames": self.frames_out,
            "frames_in": self.frames_in,
            "elapsed_s": round(elapsed, 3),
            "fps": round(self.frames_out / elapsed, 2) if elapsed > 0 else 0.0,
            "faces_swapped": self.faces_swapped,
            "frames_with_faces": self.frames_with_faces,
            "stages": {name: s.summary_ms() for name, s in self.stages.items()},
            "latency": self.latency.summary_ms(),
            "rings": {
                r.name: {
                    "capacity": r.capacity,
                    "policy": r.policy.value,
                    "drops": r.drops,
                    "mean_occupancy": round(r.mean_occupancy, 2),
                    "max_occupancy": r.occupancy_max,
                }
                for r in rings
            },
            "drops": sum(r.drops for r in rings),
            "model_calls": dict(model_calls or {}),
            "peak_rss_mb": round(peak_rss_mb(), 1),
        }
        if self.swap_every is not None:
            out["cadence"] = {"swap_every": self.swap_every, "swapper": self.swapper, "swaps": self.swaps_made,
                              "faces_carried": self.faces_carried,
                              "swaps_per_s_a_face": swap_rate(self.swaps_made, self.faces_swapped,
                                                              self.frames_out, elapsed)}
        if extra:
            out.update(extra)
        return out


def swap_rate(swaps: int, faces: int, frames: int, seconds: float) -> float:
    """Swaps a second per face on screen: `swaps` over `seconds`, over the faces a frame
    held on average (`faces` pasted in `frames`)."""
    if seconds <= 0 or faces <= 0 or frames <= 0:
        return 0.0
    return round(swaps / seconds / (faces / frames), 2)


def format_cadence(swapper: str, rate: float) -> str:
    """"neural 6.2 swaps/s a face, carried between"."""
    return f"{swapper} {rate:.1f} swaps/s a face, carried between"


def format_report(rep: dict[str, Any]) -> str:
    """The short table printed at the end of a run."""
    lines = [
        f"frames {rep['frames']}  in {rep['elapsed_s']:.1f} s  = {rep['fps']:.1f} fps   "
        f"faces swapped {rep['faces_swapped']} in {rep['frames_with_faces']} frames",
        f"{'stage':<12}{'p50 ms':>9}{'p95 ms':>9}{'mean ms':>9}",
    ]
    for name, s in rep["stages"].items():
        lines.append(f"{name:<12}{s['p50_ms']:>9.2f}{s['p95_ms']:>9.2f}{s['mean_ms']:>9.2f}")
    lat = rep["latency"]
    lines.append(f"{'latency':<12}{lat['p50_ms']:>9.2f}{lat['p95_ms']:>9.2f}{lat['mean_ms']:>9.2f}"
                 "   (capture to sink)")
    rings = "  ".join(
        f"{n}: drops {r['drops']}, occ {r['mean_occupancy']:.1f}/{r['capacity']}"
        for n, r in rep["rings"].items()
    )
    if rings:
        lines.append(f"rings  {rings}")
    if "cadence" in rep:
        cad = rep["cadence"]
        lines.append(f"cadence  swap every {cad['swap_every']}: "
                     f"{format_cadence(cad['swapper'], cad['swaps_per_s_a_face'])} ({cad['swaps']} swaps)")
    calls = ", ".join(f"{k} {v}" for k, v in rep["model_calls"].items()) or "none"
    lines.append(f"model calls  {calls}")
    lines.append(f"peak RSS  {rep['peak_rss_mb']:.0f} MB")
    return "\n".join(lines)


def write_json(rep: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(rep, indent=2) + "\n")
