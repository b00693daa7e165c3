"""Live runs: a live source through the pipeline to live sinks, latest-frame semantics.

- The entry ring drops: a slow stage never makes the source wait; the newest frame
  replaces an unread one (dropped and counted), so latency stays bounded instead of
  growing. Later rings hold one frame and block: a frame once let in is not thrown away
  after the models worked on it.
- Detection cadence adapts to load: while frames are being dropped the tracker detects
  less often (up to 4x `detect.every`), and returns to `detect.every` once it keeps up.
- Capture-to-sink latency is measured per frame; a status line shows fps in and out,
  drops and latency p50/p95 over the last second.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from stream.config import Config
from stream.errors import SourceError
from stream.runner import Runner
from stream.slot import Slot
from stream.video_info import VideoInfo

log = logging.getLogger(__name__)

CADENCE_WINDOW_S = 1.0  # seconds between cadence decisions
CADENCE_MAX_FACTOR = 4


class AdaptiveCadence:
    """Raises the tracker's detection interval while the pipeline drops frames, lowers it
    back when it keeps up (three calm seconds halve it). Called for every frame delivered."""

    def __init__(self, runner: Runner, base_every: int) -> None:
        self.runner = runner
        self.base = base_every
        self.max_every = base_every * CADENCE_MAX_FACTOR
        self.changes = 0
        self.highest = base_every
        self._since: float | None = None
        self._drops_seen = 0
        self._calm = 0

    @property
    def tracker(self) -> Any:
        return self.runner.workers[0].tracker  # type: ignore[attr-defined]

    def on_frame(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self._since is None:
            self._since = now
        if now - self._since < CADENCE_WINDOW_S:
            return
        self._since = now
        drops = sum(r.drops for r in self.runner.rings)
        new_drops, self._drops_seen = drops - self._drops_seen, drops
        every = self.tracker.detect_every
        if new_drops > 0:
            self._calm = 0
            if every < self.max_every:
                self._set(min(every * 2, self.max_every), f"{new_drops} frames dropped")
        else:
            self._calm += 1
            if self._calm >= 3 and every > self.base:
                self._calm = 0
                self._set(max(every // 2, self.base), "keeping up")

    def _set(self, every: int, why: str) -> None:
        log.info("detection every %d frames (%s)", every, why)
        self.tracker.detect_every = every
        self.changes += 1
        self.highest = max(self.highest, every)


class StatusLine:
    """Once a second: fps in and out, drops, latency p50/p95 of the last second. `emit`
    gets the figures as a dict (see `figures`); `format_status` makes the line of them."""

    def __init__(self, runner: Runner, emit: Callable[[dict[str, Any]], None], period: float = 1.0) -> None:
        self.runner = runner
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
        m = self.runner.metrics
        now = time.monotonic()
        t, fin, fout, nlat = self._last
        dt = max(now - t, 1e-6)
        lat = m.latency.values[nlat:]
        self._last = (now, m.frames_in, m.frames_out, len(m.latency.values))
        p50 = p95 = None
        if lat:
            p50, p95 = (round(float(np.percentile(np.asarray(lat) * 1000, q)), 1) for q in (50, 95))
        tracker = getattr(self.runner.workers[0], "tracker", None) if self.runner.workers else None
        return {"fps_in": round((m.frames_in - fin) / dt, 2), "fps_out": round((m.frames_out - fout) / dt, 2),
                "frames_in": m.frames_in, "frames_out": m.frames_out,
                "drops": sum(r.drops for r in self.runner.rings), "latency_p50_ms": p50,
                "latency_p95_ms": p95, "faces": m.faces_swapped,
                "detect_every": getattr(tracker, "detect_every", None)}

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


def open_source(spec: str, width: int | None = None, height: int | None = None,
                fps: float | None = None, open_timeout: float = 10.0) -> Any:
    """`webcam:N`, `webcam:/dev/videoN`, `rtsp://...`, or a video file (played in real time)."""
    from stream.sources.live import RtspSource, WebcamSource, parse_webcam

    if spec.startswith(("rtsp://", "rtsps://")):
        return RtspSource(spec, open_timeout=open_timeout)
    if spec.startswith("webcam:") or spec.startswith("/dev/video") or spec.isdigit():
        return WebcamSource(parse_webcam(spec), width, height, fps)
    if Path(spec).is_file():
        return WebcamSource(spec)  # a clip standing in for a camera, at its own rate
    raise SourceError(f"input {spec!r}: not webcam:N, rtsp://..., or an existing video file")


def open_sink(spec: str, info: VideoInfo, cfg: Config, vcam_backend: str | None = None,
              vcam_device: str | None = None) -> Any:
    """`vcam`, `preview`, `rtsp://...`, or a file to write (as --record does)."""
    from stream.sinks.live import PreviewSink, RtspSink, VirtualCameraSink

    fps = float(info.rate) if info.rate > 0 else 30.0
    if spec == "vcam":
        return VirtualCameraSink(info.width, info.height, fps, device=vcam_device, backend=vcam_backend)
    if spec == "preview":
        return PreviewSink()
    if spec.startswith(("rtsp://", "rtsps://")):
        return RtspSink(spec, info.width, info.height, fps, cfg.encode, preset=_live_preset(cfg))
    return record_sink(spec, info, cfg)


def record_sink(path: str, info: VideoInfo, cfg: Config) -> Any:
    from stream.sinks.file import FileSink

    return FileSink(path, info, cfg.encode)


def _live_preset(cfg: Config) -> str:
    # Live encoding must keep up on the CPU next to the models: never slower than veryfast.
    fast = ["ultrafast", "superfast", "veryfast"]
    return cfg.encode.preset if cfg.encode.preset in fast else "veryfast"


class LiveSink:
    """The sinks of a live run, plus the per-frame hooks (cadence) the run needs."""

    def __init__(self, sinks: list[Any]) -> None:
        self.sinks = sinks
        self.cadence: AdaptiveCadence | None = None
        self.opened = False

    def open(self) -> None:
        """Open every sink (once; a failure closes those already opened)."""
        if self.opened:
            return
        opened: list[Any] = []
        try:
            for sink in self.sinks:
                sink.open()
                opened.append(sink)
        except BaseException:
            for sink in opened:
                _close_quietly(sink)
            raise
        self.opened = True

    def write(self, slot: Slot) -> None:
        for sink in self.sinks:
            sink.write(slot)
        if self.cadence is not None:
            self.cadence.on_frame()

    def close(self) -> None:
        error: BaseException | None = None
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:  # noqa: BLE001 - the first one is reported
                error = error or exc
        if error is not None:
            raise error


def _close_quietly(part: Any) -> None:
    try:
        part.close()
    except Exception as exc:  # noqa: BLE001
        log.debug("closing %r failed", part, exc_info=exc)
