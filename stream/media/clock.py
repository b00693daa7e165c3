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


class StreamRate:
    """A live stream's own frame rate over a run: frame intervals over the stream time they
    span, connection by connection, so the outages between connections are left out, and
    so is each connection's first `settle_s` (the frames a server and the stream's analysis
    held back come in a burst: with it, six reconnects of a 30 fps stream read 31.4 fps).
    Frames without a timestamp count for the fallback only: frames over reading time."""

    def __init__(self, settle_s: float = 1.0) -> None:
        self.settle_s = settle_s
        self._intervals, self._seconds = 0, 0.0  # of the connections before this one
        self._start: float | None = None  # this connection's first stream time
        self._first = self._last = 0.0  # its counted span, once settled
        self._frames = 0
        self._reads, self._first_read, self._last_read = 0, 0.0, 0.0

    def new_connection(self) -> None:
        """The frames from here on come over a new connection (a new stream clock)."""
        intervals, seconds = self._span()
        self._intervals += intervals
        self._seconds += seconds
        self._start, self._frames = None, 0

    def frame(self, stream_time: float | None, now: float) -> None:
        """A frame read at `now` (time.monotonic()), of `stream_time` seconds (None: none)."""
        if self._reads == 0:
            self._first_read = now
        self._last_read = now
        self._reads += 1
        if stream_time is None:
            return
        if self._start is None:
            self._start = stream_time
        if stream_time - self._start < self.settle_s:
            return
        if self._frames == 0:
            self._first = stream_time
        self._last = stream_time
        self._frames += 1

    def _span(self) -> tuple[int, float]:
        if self._frames >= 2 and self._last > self._first:
            return self._frames - 1, self._last - self._first
        return 0, 0.0

    def fps(self, outage_s: float = 0.0) -> float | None:
        """The rate; by reading time (`outage_s` left out) for a stream without timestamps;
        None before half a second of either."""
        intervals, seconds = self._span()
        intervals += self._intervals
        seconds += self._seconds
        if seconds > 0.5:
            return intervals / seconds
        span = self._last_read - self._first_read - outage_s
        return (self._reads - 1) / span if self._reads > 1 and span > 0.5 else None
