"""The live figures of a running pipeline, once a second, the one-line status of them, and
the line that sums up a live run at its end."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from stream.job.assembly import Pipeline
from stream.job.cadence import SHED_ORDER
from stream.runtime.metrics import format_cadence, swap_rate
from stream.sinks.protocol import SinkStats, stats_of


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
        self._shed: frozenset[str] = frozenset()
        self._swaps = (0, 0, 0)  # swaps made, faces pasted, frames out at the last call

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2.0)

    def figures(self) -> dict[str, Any]:
        """The figures since the last call: fps in/out, frames in/out so far, ring drops so
        far, latency p50/p95 (ms, None without frames), faces swapped so far (`faces`) and
        in the last frame shown (`faces_on_screen`), the detection cadence, the optional
        steps shed now (`shed`, and `shed_changed` when that differs from the last call), and
        the sink's delivery figures (`sink_dropped`, `sink_reconnects`, `sink_outage_s`).

        "Out" counts the frames the sink delivered: frames it was given but dropped (an
        RTSP output while its server is away) are not in it."""
        m = self.pipeline.metrics
        sink = stats_of(self.pipeline.runner.sink)
        delivered = max(0, m.frames_out - sink["dropped"])
        now = time.monotonic()
        t, fin, fout, nlat = self._last
        dt = max(now - t, 1e-6)
        lat = m.latency.values[nlat:]
        self._last = (now, m.frames_in, delivered, len(m.latency.values))
        swaps, pasted, frames = self._swaps
        self._swaps = (m.swaps_made, m.faces_swapped, m.frames_out)
        skip = self.pipeline.analyse.skip
        shed_changed, self._shed = skip != self._shed, skip
        p50 = p95 = None
        if lat:
            p50, p95 = (round(float(np.percentile(np.asarray(lat) * 1000, q)), 1) for q in (50, 95))
        return {"fps_in": round((m.frames_in - fin) / dt, 2), "fps_out": round(max(0, delivered - fout) / dt, 2),
                "frames_in": m.frames_in, "frames_out": delivered,
                "drops": sum(r.drops for r in self.pipeline.rings), "latency_p50_ms": p50,
                "latency_p95_ms": p95, "faces": m.faces_swapped, "faces_on_screen": m.faces_on_screen,
                "detect_every": self.pipeline.tracker.detect_every,
                "shed": [s for s in SHED_ORDER if s in skip], "shed_changed": shed_changed,
                "sink_dropped": sink["dropped"], "sink_reconnects": sink["reconnects"],
                "sink_outage_s": round(sink["outage_s"], 1),
                **({"swapper": m.swapper, "swap_rate": swap_rate(m.swaps_made - swaps, m.faces_swapped - pasted,
                                                                 m.frames_out - frames, dt)}
                   if m.swap_every is not None else {})}

    def line(self) -> str:
        return format_status(self.figures())

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self.emit(self.figures())


def format_sink(dropped: int, reconnects: int, outage_s: float) -> str:
    """What the output lost, for a status or summary line ("" when it lost nothing)."""
    parts = []
    if dropped:
        parts.append(f"output dropped {dropped}")
    if reconnects:
        parts.append(f"reconnected {reconnects}x")
    if outage_s >= 0.05:
        parts.append(f"{outage_s:.1f} s without connection")
    return ", ".join(parts)


def format_status(f: dict[str, Any]) -> str:
    """The one-line status of a live run's figures (StatusLine.figures)."""
    if f.get("latency_p50_ms") is not None:
        latency = f"latency p50 {f['latency_p50_ms']:.0f} ms p95 {f['latency_p95_ms']:.0f} ms"
    else:
        latency = "latency -"
    sink = format_sink(f.get("sink_dropped", 0), f.get("sink_reconnects", 0), f.get("sink_outage_s", 0.0))
    shed = ""
    if f.get("shed_changed"):  # said once, when it changes
        shed = f"  shedding {', '.join(f['shed'])} to keep up" if f.get("shed") else "  every quality step back"
    return (f"in {f['fps_in']:5.1f} fps  out {f['fps_out']:5.1f} fps  "
            f"drops {f['drops']}  {latency}  faces on screen {f.get('faces_on_screen', 0)}, "
            f"swapped {f['faces']}"
            + (f"  {format_cadence(f['swapper'], f['swap_rate'])}" if "swap_rate" in f else "")
            + (f"  {sink}" if sink else "") + shed)


def sink_report(stats: SinkStats) -> dict[str, Any]:
    """A sink's delivery figures as the report keeps them."""
    rep: dict[str, Any] = {"dropped": stats["dropped"], "reconnects": stats["reconnects"],
                           "outage_s": round(stats["outage_s"], 3)}
    if "sinks" in stats:
        rep["sinks"] = {name: sink_report(s) for name, s in stats["sinks"].items()}
    return rep


def format_live_summary(rep: dict[str, Any]) -> str:
    """The line that sums up a live run (the report of `run_live`)."""
    live, inp, sink = rep["live"], rep["input"], rep.get("sink", {})
    lost = format_sink(sink.get("dropped", 0), sink.get("reconnects", 0), sink.get("outage_s", 0.0))
    return (f"live: {rep['frames_in']} frames in, {rep['frames']} out, {rep['drops']} dropped"
            + (f"; {lost}" if lost else "")
            + f"; input measured at {inp.get('measured_fps', 0):.1f} fps"
            + (f" ({inp['skipped']} frames of the clip skipped: read too late)" if inp.get("skipped") else "")
            + "; "
            f"detection every {live['detect_every_base']}-{live['detect_every_max']} frames"
            + (f"; shed to keep up: {', '.join(live['shed'])}" if live.get("shed") else "")
            + (f"; {format_cadence(rep['cadence']['swapper'], rep['cadence']['swaps_per_s_a_face'])}"
               if "cadence" in rep else "")
            + (f"; {live['stopped']}" if live["stopped"] else ""))
