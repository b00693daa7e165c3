"""A live source's sound in a live recording: taken from its delay line as the pictures are
written, timed on the same capture clock as they are, and encoded for the container."""
from __future__ import annotations

from fractions import Fraction

import av
import numpy as np

from stream.media.audio_delay import AudioDelay
from stream.sinks.carried_streams import AUDIO_TRANSCODE

RATE = 48000  # what live sources hand their sound on in (stereo s16)
GAP_S = 0.02  # sound this close to where the last ended continues it


class LiveSound:
    """The recording's audio stream: sound captured at time t (time.monotonic()) is placed
    at t - `origin` seconds, `origin` being where the recording's video starts (the capture
    time of its pts 0), so sound and pictures keep the timing they were captured with."""

    def __init__(self, delay: AudioDelay, output: av.container.OutputContainer, suffix: str) -> None:
        self.delay = delay
        codec = AUDIO_TRANSCODE.get(suffix.lower(), "aac")
        self.stream = output.add_stream(codec, rate=RATE)
        self.stream.layout = "stereo"
        self.codec = codec.removeprefix("lib")
        self.origin: float | None = None
        self._next: int | None = None
        self.frames = 0

    def write_until(self, output: av.container.OutputContainer, captured: float, now: float) -> None:
        """Encode the sound captured up to `captured` (the frame just written)."""
        if self.origin is None:
            return
        for when, samples in self.delay.release_until(captured, now):
            pts = round((when - self.origin) * RATE)
            if self._next is not None and abs(pts - self._next) <= GAP_S * RATE:
                pts = self._next
            if pts < 0 or (self._next is not None and pts < self._next):
                continue  # before the first picture, or overlapping what was written
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples), format="s16", layout="stereo")
            frame.sample_rate = RATE
            frame.pts = pts
            frame.time_base = Fraction(1, RATE)
            for packet in self.stream.encode(frame):
                output.mux(packet)
            self._next = pts + samples.shape[1] // 2
            self.frames += 1

    def finish(self, output: av.container.OutputContainer) -> None:
        """Flush the encoder (before the trailer)."""
        for packet in self.stream.encode(None):
            output.mux(packet)
