"""The live figures of a running pipeline, once a second, and the one-line status of them."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from stream.job.assembly import Pipeline


class StatusLine:
    """Once a second: fps in and out, drops, latency p50/p95 of the last second. `emit`
    gets the figures as a dict (see `figures`); `format_status` makes the line of them."""

    def __init__(self, pipeline: Pipeline, emit: Callable[[dict[str, Any]], None], period: float = 1.0) -> None:
        self.pipeline = pipeline
        self.emit = emit
        self.period = period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fs-status", daemon=True)
        self._last = (time.monotonic(), 0, 0, 0)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2.0)

    def figures(self) -> dict[str, Any]:
        """The figures since the last call: fps in/out, drops so far, latency p50/p95 (ms,
        None without frames), faces swapped so far, the detection cadence."""
        m = self.pipeline.metrics
        now = time.monotonic()
        t, fin, fout, nlat = self._last
        dt = max(now - t, 1e-6)
        lat = m.latency.values[nlat:]
        self._last = (now, m.frames_in, m.frames_out, len(m.latency.values))
        p50 = p95 = None
        if lat:
            p50, p95 = (round(float(np.percentile(np.asarray(lat) * 1000, q)), 1) for q in (50, 95))
        return {"fps_in": round((m.frames_in - fin) / dt, 2), "fps_out": round((m.frames_out - fout) / dt, 2),
                "frames_in": m.frames_in, "frames_out": m.frames_out,
                "drops": sum(r.drops for r in self.pipeline.rings), "latency_p50_ms": p50,
                "latency_p95_ms": p95, "faces": m.faces_swapped,
                "detect_every": self.pipeline.tracker.detect_every}

    def line(self) -> str:
        return format_status(self.figures())

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self.emit(self.figures())


def format_status(f: dict[str, Any]) -> str:
    """The one-line status of a live run's figures (StatusLine.figures)."""
    if f.get("latency_p50_ms") is not None:
        latency = f"latency p50 {f['latency_p50_ms']:.0f} ms p95 {f['latency_p95_ms']:.0f} ms"
    else:
        latency = "latency -"
    return (f"in {f['fps_in']:5.1f} fps  out {f['fps_out']:5.1f} fps  "
            f"drops {f['drops']}  {latency}  faces {f['faces']}")
