"""A live source's sound, held back by exactly as long as its video takes to get through
the pipeline: an audio delay line keyed on capture timestamps.

The source stamps each audio frame on the same capture clock as its video frames
(`AudioBus.push`). Each sink that carries the sound has its own `AudioDelay`. A file
takes, as it writes a video frame captured at t, the audio captured up to t
(`release_until(t)`) and places both by their capture times. A network output sends
sound captured at t at t + L (`release_due`), L being the latency the last video frame
took from capture to that sink, so the sound leaves at the moment its picture does.
Nothing ever waits: pushing never blocks the source, a sink never waits for audio, and
audio older than `max_hold_s` (video stopped coming, every frame dropped) is let go and
counted rather than held, so memory stays bounded and a stalled picture never stops the
sound for long.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import av
import numpy as np

MAX_HOLD_S = 1.0  # beyond any latency a live run keeps; a picture later than this is a stall
PLAYOUT_FRAMES = 30  # pictures (a second at 30 fps) the playout delay is taken over
PLAYOUT_QUANTILE = 0.9
LATE_PIECES = 100  # how many of the latest pieces `AudioBus.lateness` looks at (a second of 10 ms)


@dataclass(frozen=True)
class AudioFormat:
    """What the source's sound is once decoded: sample rate and channel count."""

    rate: int
    channels: int


LIVE_RATE = 48000  # what live sources hand their sound on in: 48 kHz stereo s16
LIVE_PIECE = LIVE_RATE // 100  # in 10 ms pieces (as WebRTC does): fine-grained delays


def live_resampler() -> av.AudioResampler:
    """A resampler to the live sound format (LIVE_RATE, stereo, s16)."""
    return av.AudioResampler(format="s16", layout="stereo", rate=LIVE_RATE)


def live_pieces(resampler: av.AudioResampler, frame: av.AudioFrame) -> Iterator[np.ndarray]:
    """A decoded audio frame in the live format, as interleaved (1, 2 * n) s16 pieces of at
    most LIVE_PIECE samples, in order."""
    for out in resampler.resample(frame):
        samples = out.to_ndarray()
        for start in range(0, out.samples, LIVE_PIECE):
            yield samples[:, 2 * start:2 * (start + LIVE_PIECE)]


class AudioDelay:
    """One sink's view of a source's sound: frames (av.AudioFrame, any object) with their
    capture times, released in order up to a video frame's capture time."""

    def __init__(self, max_hold_s: float = MAX_HOLD_S) -> None:
        self.max_hold_s = max_hold_s
        self._items: deque[tuple[float, Any]] = deque()
        self._lock = threading.Lock()
        self.expired = 0  # frames let go unsent: no video came within max_hold_s of them
        self.released = 0
        self.hold_s = 0.0  # how long the last frame released was held: the delay applied

    def push(self, captured: float, frame: Any) -> None:
        """From the source's thread: a frame captured at `captured` (time.monotonic())."""
        with self._lock:
            self._items.append((captured, frame))
            newest = captured
            while self._items and newest - self._items[0][0] > self.max_hold_s:
                self._items.popleft()
                self.expired += 1

    def release_until(self, captured: float, now: float) -> list[tuple[float, Any]]:
        """From the sink's thread, as it writes the video frame captured at `captured`:
        the audio captured up to then, oldest first (with their capture times). `now`
        (time.monotonic()) lets audio go that waited `max_hold_s` for a picture."""
        out: list[tuple[float, Any]] = []
        with self._lock:
            while self._items and (self._items[0][0] <= captured or now - self._items[0][0] > self.max_hold_s):
                out.append(self._items.popleft())
        if out:
            self.released += len(out)
            self.hold_s = now - out[-1][0]
        return out

    def release_due(self, now: float, latency: float) -> list[tuple[float, Any]]:
        """For a sink that sends as time passes (a network output): the audio due by
        `now`, sound captured at t being due at t + `latency`, the processing latency of
        the last video frame written, so each sound leaves when its picture would."""
        return self.release_until(now - latency, now)

    def drop_all(self) -> int:
        with self._lock:
            n = len(self._items)
            self._items.clear()
        return n


class AudioBus:
    """A live source's sound, fanned out to each sink's `AudioDelay` (a sink subscribes
    before the run; a bus nobody subscribed to holds nothing)."""

    def __init__(self) -> None:
        self.format: AudioFormat | None = None  # known once the source opened with sound
        self.frames = 0
        self._delays: list[AudioDelay] = []
        self._lock = threading.Lock()
        self._late: deque[float] = deque(maxlen=LATE_PIECES)

    @property
    def listeners(self) -> int:
        """The delay lines subscribed (sinks, viewers) now."""
        with self._lock:
            return len(self._delays)

    def lateness(self) -> float | None:
        """How long after its end (its capture time + its duration) the latest sound reached
        us, at worst over the last `LATE_PIECES` pieces (negative: before it ended, as sound
        a source had buffered); None before any piece of known length came."""
        late = list(self._late)
        return max(late) if late else None

    def subscribe(self, max_hold_s: float = MAX_HOLD_S) -> AudioDelay:
        delay = AudioDelay(max_hold_s)
        with self._lock:
            self._delays.append(delay)
        return delay

    def unsubscribe(self, delay: AudioDelay) -> None:
        """A sink that left (a WebRTC viewer): its delay line gets nothing more."""
        with self._lock:
            if delay in self._delays:
                self._delays.remove(delay)
        delay.drop_all()

    def push(self, captured: float, frame: Any) -> None:
        """A piece of sound captured at `captured` (time.monotonic()); an interleaved
        (1, channels * n) array on `format` counts towards `lateness`."""
        self.frames += 1
        fmt = self.format
        if fmt is not None and isinstance(frame, np.ndarray) and frame.ndim == 2:
            self._late.append(time.monotonic() - captured - frame.shape[1] / fmt.channels / fmt.rate)
        with self._lock:
            delays = list(self._delays)
        for delay in delays:
            delay.push(captured, frame)


class PlayoutDelay:
    """D, the one delay from capture to leaving that a network output with sound gives its
    pictures and its sound alike: the 90th percentile of the pictures' latency (capture to
    ready to send) over the last `PLAYOUT_FRAMES`, or more when the sound needs it
    (`at_least`), at most `max_s`.

    Holding the sound by the last picture's latency instead sends it early whenever a
    picture takes longer than the one before it (a detection, a busy core): the sound
    cannot know. With D, a picture ready sooner waits until capture + D (a few ms: the
    spread of the latency), and only a picture later than D leaves late."""

    def __init__(self, max_s: float = 0.5) -> None:
        self.max_s = max_s
        self._recent: deque[float] = deque(maxlen=PLAYOUT_FRAMES)
        self._lock = threading.Lock()
        self.at_least = 0.0  # what the sound needs (see AudioBus.lateness)

    def frame(self, latency: float) -> None:
        """A picture was ready `latency` seconds after its capture."""
        with self._lock:
            self._recent.append(latency)

    def seconds(self) -> float:
        with self._lock:
            recent = sorted(self._recent)
        q = recent[min(len(recent) - 1, int(PLAYOUT_QUANTILE * len(recent)))] if recent else 0.0
        return min(max(q, self.at_least), self.max_s)
