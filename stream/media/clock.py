"""Clocks and time bases of live media: the 90 kHz time base, defined once, and the
capture clock that stamps each live frame with its arrival."""
from __future__ import annotations

import time
from fractions import Fraction

from stream.runtime.slot import Slot

# RTP's video clock, which live sources stamp their frames in and live sinks encode in.
VIDEO_TIME_BASE = Fraction(1, 90000)


class CaptureClock:
    """pts and capture times for a live source, plus its measured frame rate.

    `pts` counts 90 kHz ticks of the capture clock from the first frame, so sinks that
    record keep the real timing of a live stream (frames dropped by the pipeline leave
    gaps, not a faster clip)."""

    def __init__(self) -> None:
        self.t0: float | None = None
        self.last_pts = -1
        self.frames = 0
        self._rate_since = 0.0
        self._rate_frames = 0
        self.measured_fps = 0.0

    def stamp(self, slot: Slot, now: float | None = None) -> None:
        """Stamp `slot` as captured at `now` (time.monotonic(); default: this moment)."""
        now = time.monotonic() if now is None else now
        if self.t0 is None:
            self.t0 = self._rate_since = now
        pts = round((now - self.t0) / VIDEO_TIME_BASE)
        pts = max(pts, self.last_pts + 1)  # strictly increasing even for two reads in one tick
        self.last_pts = pts
        slot.seq = self.frames
        slot.pts = pts
        slot.time_base = VIDEO_TIME_BASE
        slot.capture_time = now
        self.frames += 1
        self._rate_frames += 1
        if now - self._rate_since >= 1.0:  # the rate over the last second or so
            self.measured_fps = self._rate_frames / (now - self._rate_since)
            self._rate_since, self._rate_frames = now, 0
