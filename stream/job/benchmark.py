"""How fast a job runs here: a clip through the staged pipeline and through one thread
doing every stage in turn, alternating, with each run's figures and a plain verdict.

`facestream benchmark` prints what `measure` returns; `tools/bench.py` is the developers'
same-run entry point on the same clips. A run writes its output to a temporary file (the
encode stage is part of the work a user's run does) and is measured from its report: fps,
per-stage p50/p95, capture-to-sink latency, and the peak resident memory of that run
(Linux: the process's high-water mark is reset before each run; elsewhere the process's
peak so far).
"""
from __future__ import annotations

import ctypes
import gc
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stream.job.runs import run_video
from stream.job.swap_job import SwapJob
from stream.runtime.metrics import peak_rss_mb
from stream.sources.file import FileSource

_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")


def reset_peak_rss() -> bool:
    """Reset this process's peak resident memory (Linux's VmHWM) to what it holds now, after
    handing freed memory back to the system (glibc's malloc_trim: what earlier runs and the
    clips' making freed would otherwise count in this run's peak); False where it cannot be."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def run_peak_rss_mb(reset: bool) -> float:
    """The peak resident memory since `reset_peak_rss` (or of the process, without one)."""
    if reset:
        try:
            for line in _STATUS.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
        except (OSError, ValueError, IndexError):
            pass
    return peak_rss_mb()


@dataclass
class ClipResult:
    """One clip's runs: each mode's reports in the order they ran, and the verdict's inputs."""

    label: str
    path: str
    size: tuple[int, int]
    frames: int
    target_fps: float
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {"staged": [], "serial": []})

    def median(self, mode: str) -> dict[str, Any]:
        """The run of `mode` with the median fps."""
        runs = sorted(self.runs[mode], key=lambda r: r["fps"])
        return runs[len(runs) // 2]

    def fps(self, mode: str) -> float:
        return statistics.median(r["fps"] for r in self.runs[mode])

    def summary(self) -> dict[str, Any]:
        staged, serial = self.fps("staged"), self.fps("serial")
        rep = self.median("staged")
        budget = 1000.0 / self.target_fps
        frame_ms = 1000.0 / staged if staged > 0 else float("inf")
        spare = budget - frame_ms
        cadence = {"cadence": rep["cadence"]} if "cadence" in rep else {}
        return {
            "clip": self.label,
            "path": self.path,
            "size": list(self.size),
            "frames": self.frames,
            "faces_swapped": rep["faces_swapped"],
            "fps": {"staged": round(staged, 2), "serial": round(serial, 2),
                    "ratio": round(staged / serial, 3) if serial > 0 else None,
                    "runs": {m: [r["fps"] for r in rs] for m, rs in self.runs.items()}},
            "stages": rep["stages"],
            "latency": rep["latency"],
            "drops": rep["drops"],
            "peak_rss_mb": max(r["run_peak_rss_mb"] for rs in self.runs.values() for r in rs),
            "target_fps": self.target_fps,
            "frame_ms": round(frame_ms, 2),
            "real_time": staged >= self.target_fps,
            "spare_ms": round(spare, 2),
            **cadence,  # a run swapping at a cadence (--swap-every): its swap rate
        }


def verdict(summary: dict[str, Any]) -> str:
    """"real time at 30 fps: yes, with 4.1 ms to spare" (or "no, 12.0 ms a frame over")."""
    target = f"{summary['target_fps']:g}"
    if summary["real_time"]:
        return f"real time at {target} fps: yes, with {summary['spare_ms']:.1f} ms a frame to spare"
    return f"real time at {target} fps: no, {-summary['spare_ms']:.1f} ms a frame over"


def clip_info(clip: str) -> tuple[tuple[int, int], int, float]:
    """The clip's (width, height), frame count (0 when unknown) and frame rate (0 when unknown):
    a SourceError naming it when it cannot be read as a video."""
    source = FileSource(clip)
    info = source.open()
    source.close()
    return (info.width, info.height), info.frames, float(info.rate)


def measure(job: SwapJob, label: str, clip: str, repeat: int = 1, target_fps: float | None = None,
            on_run: Callable[[str, dict[str, Any]], None] | None = None) -> ClipResult:
    """Run `clip` through `job` (opened) `repeat` times in each mode, staged then serial,
    alternating (the machine's load drifts; neighbouring runs see the same). `target_fps`:
    the clip's own rate when None (30 when it has none). `on_run(mode, report)` after each."""
    size, frames, rate = clip_info(clip)
    result = ClipResult(label, clip, size, frames, float(target_fps or rate or 30.0))
    pipeline = job.config.pipeline
    was = pipeline.staged
    try:
        with tempfile.TemporaryDirectory(prefix="facestream-bench-") as tmp:
            out = str(Path(tmp) / "out.mp4")
            for _ in range(max(repeat, 1)):
                for mode in ("staged", "serial"):
                    pipeline.staged = mode == "staged"  # read when each run is assembled
                    gc.collect()
                    reset = reset_peak_rss()
                    report = dict(run_video(job, clip, out).report)
                    report["run_peak_rss_mb"] = round(run_peak_rss_mb(reset), 1)
                    result.runs[mode].append(report)
                    if on_run is not None:
                        on_run(mode, report)
    finally:
        pipeline.staged = was
    return result
