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

import av
import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from stream.media.audio_delay import AudioBus, AudioDelay

RATE = 48000
TICK_S = 0.005  # how often a waiting recv() looks for sound that has come due
GAP_S = 0.02  # sound this close to where the last ended continues it
PACKET = 960  # samples in one Opus packet as aiortc sends it (20 ms)
PACKET_S = PACKET / RATE
MAX_SILENCE_S = 1.0  # a hole longer than this is not filled: the timeline starts again
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
    """The audio track sent to a peer (or a viewer): 48 kHz stereo s16 from `delay`, in
    frames of exactly one Opus packet (20 ms) on a continuous timeline, each sent when its
    first sample is due: at its capture time + `latency()` seconds, less the encoder's
    look-ahead.

    Why whole packets, timed by their first sample: a receiver plays a packet from the
    moment it arrives (its RTP timestamp is its first sample's), so a packet must leave
    when its start is due, not when its last piece came due (aiortc's encoder waits for
    20 ms before it sends anything: handed 10 ms pieces, the sound went out up to 10 ms
    late, and later still when the pieces came unevenly). Sound that is not all there when
    its packet is due (a source whose sound reaches us after its pictures) leaves as soon as
    it is, and how late it was is kept (`late_s`). Holes in the sound are sent as silence
    (the timing after them holds); sound whose stamps go back over what was sent is cut."""

    kind = "audio"

    def __init__(self, delay: AudioDelay, latency: Callable[[], float], bus: AudioBus | None = None) -> None:
        """`bus`: where `delay` is subscribed, to unsubscribe it when the track stops."""
        super().__init__()
        self.delay = delay
        self.latency = latency
        self.bus = bus
        self._pieces: deque[np.ndarray] = deque()  # interleaved (1, 2n) s16, continuous
        self._count = 0  # samples (per channel) in _pieces
        self._start: float | None = None  # the capture time of the first sample in _pieces
        self._end: float | None = None  # ... and of the sample after the last
        self._t0: float | None = None  # the capture time of pts 0
        self._pts = 0  # pts of the first sample in _pieces
        self.frames_sent = 0
        self.late_s = 0.0  # how late the last packet's sound was all there (0: on time)
        self.held_s = 0.0  # from the last packet's capture to its sending: the delay applied
        self.silence_s = 0.0  # holes in the sound, sent as silence

    async def recv(self) -> av.AudioFrame:
        while True:
            if self.readyState != "live":
                raise MediaStreamError
            now = time.monotonic()
            held = max(0.0, self.latency() - ENCODER_AHEAD_S)
            # Take what will be needed for the next packet (one packet ahead of its due).
            for when, samples in self.delay.release_due(now, held - PACKET_S - TICK_S):
                self._add(when, samples)
            if self._start is not None:
                due = self._start + held
                if self._count >= PACKET and now >= due:
                    self.late_s = max(0.0, now - due - TICK_S)
                    self.held_s = now - self._start
                    return self._packet()
                wait = min(TICK_S, due - now) if self._count >= PACKET else TICK_S
            else:
                wait = TICK_S
            await asyncio.sleep(max(wait, 0.001))

    def stop(self) -> None:
        super().stop()
        if self.bus is not None:
            self.bus.unsubscribe(self.delay)

    def _add(self, when: float, samples: np.ndarray) -> None:
        """Append a piece captured at `when` to the timeline. The timeline runs on the
        sound's own samples: a piece stamped within `GAP_S` of where the sound so far ends
        continues it (stamps jitter), a hole is filled with silence, an overlap is cut."""
        n = samples.shape[1] // 2
        end = self._end
        if end is None or when - end > MAX_SILENCE_S:  # the first sound, or after a long stop
            self._pts += self._count  # what is left (stale) is let go
            self._pieces.clear()
            self._count = 0
            if self._t0 is None:
                self._t0 = when
            self._pts = max(self._pts, round((when - self._t0) * RATE))
            self._start = end = when
        else:
            gap = round((when - end) * RATE)
            if gap > GAP_S * RATE:  # a hole: silence up to this piece
                self._pieces.append(np.zeros((1, 2 * gap), np.int16))
                self._count += gap
                self.silence_s += gap / RATE
            elif gap < -GAP_S * RATE:  # stamped over what is already there: cut that much
                cut = min(-gap, n)
                samples, n = samples[:, 2 * cut:], n - cut
                if n == 0:
                    return
        self._pieces.append(samples)
        self._count += n
        assert self._start is not None
        self._end = self._start + self._count / RATE

    def _packet(self) -> av.AudioFrame:
        """The next PACKET samples as a frame, timed by their first sample's capture."""
        assert self._start is not None
        parts: list[np.ndarray] = []
        need = PACKET
        while need:
            piece = self._pieces[0]
            n = piece.shape[1] // 2
            if n <= need:
                parts.append(self._pieces.popleft())
                need -= n
            else:
                parts.append(piece[:, :2 * need])
                self._pieces[0] = piece[:, 2 * need:]
                need = 0
        samples = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples), format="s16", layout="stereo")
        frame.sample_rate = RATE
        frame.pts = self._pts
        frame.time_base = Fraction(1, RATE)
        self._pts += PACKET
        self._count -= PACKET
        self._start += PACKET / RATE
        self.frames_sent += 1
        return frame
