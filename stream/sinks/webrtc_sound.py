"""A peer's sound sent back beside its swapped pictures (aiortc), held back by the pictures'
measured latency so the two leave together.

aiortc's audio sender pulls (`recv()`) and sends each frame at once; this track answers
with the sound captured at t once it is t + L, L being the latency (capture to the video
sender taking it) of the last picture sent (`latency()`). Sound and pictures share
nothing else: the pictures never wait for sound, and sound nobody pulls is let go by its
delay line after `max_hold_s` (bounded memory).
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import av
import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from stream.media.audio_delay import AudioBus, AudioDelay

RATE = 48000
TICK_S = 0.005  # how often a waiting recv() looks for sound that has come due
GAP_S = 0.02  # sound this close to where the last ended continues it
# Opus (what aiortc and browsers negotiate first) delays what it encodes by its look-ahead,
# 312 samples at 48 kHz (RFC 6716's pre-skip, libopus's OPUS_GET_LOOKAHEAD): the sound is
# handed to the encoder that much early, so it comes out of the decoder with its picture.
ENCODER_AHEAD_S = 312 / RATE


@dataclass(frozen=True)
class SoundFeed:
    """A session's sound for its viewers: the bus its peer's sound is put on, and the
    latency of the session's pictures (what each viewer's sound is held back by)."""

    bus: AudioBus
    latency: Callable[[], float]

    def track(self) -> DelayedSoundTrack:
        """A viewer's own sound track (its own delay line; `stop()` lets it go)."""
        return DelayedSoundTrack(self.bus.subscribe(), self.latency, self.bus)


class DelayedSoundTrack(MediaStreamTrack):
    """The audio track sent to a peer (or a viewer): frames of 48 kHz stereo s16 from
    `delay`, each released at its capture time + `latency()` seconds (less the encoder's
    look-ahead)."""

    kind = "audio"

    def __init__(self, delay: AudioDelay, latency: Callable[[], float], bus: AudioBus | None = None) -> None:
        """`bus`: where `delay` is subscribed, to unsubscribe it when the track stops."""
        super().__init__()
        self.delay = delay
        self.latency = latency
        self.bus = bus
        self._due: deque[tuple[float, Any]] = deque()
        self._t0: float | None = None  # the capture time of pts 0
        self._next: int | None = None  # pts where the sound sent so far ends
        self.frames_sent = 0

    async def recv(self) -> av.AudioFrame:
        while True:
            if self.readyState != "live":
                raise MediaStreamError
            if not self._due:
                held = max(0.0, self.latency() - ENCODER_AHEAD_S)
                self._due.extend(self.delay.release_due(time.monotonic(), held))
            if self._due:
                when, samples = self._due.popleft()
                self.frames_sent += 1
                return self._frame(when, samples)
            await asyncio.sleep(TICK_S)

    def stop(self) -> None:
        super().stop()
        if self.bus is not None:
            self.bus.unsubscribe(self.delay)

    def _frame(self, when: float, samples: np.ndarray) -> av.AudioFrame:
        """Timed by its capture: a receiver's jitter buffer sees real time pass between
        frames, and sound let go unsent (a stall) as a gap, not as sound played early."""
        if self._t0 is None:
            self._t0 = when
        pts = round((when - self._t0) * RATE)
        if self._next is not None and (abs(pts - self._next) <= GAP_S * RATE or pts < self._next):
            pts = self._next  # continuous: the stamps' jitter must not cut or overlap it
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples), format="s16", layout="stereo")
        frame.sample_rate = RATE
        frame.pts = pts
        frame.time_base = Fraction(1, RATE)
        self._next = pts + samples.shape[1] // 2
        return frame
