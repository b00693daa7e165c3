"""A WebRTC peer's microphone as a live source's sound: its decoded frames, stamped on the
clock its camera's frames are stamped on, put on an `AudioBus` for the sinks to delay.

A picture is stamped when `WebRtcSource` is offered it: its first packet's arrival plus
aiortc's hold and decode (the picture's lag, measured frame by frame, see
`VideoLag`). A sound is stamped with its own first packet's arrival plus that same lag, so
a sound and a picture that arrived together carry the same capture time, whatever aiortc
held each of them back by (see stream.sources.rtp_arrivals).

The sound must be here before it is due, at that stamp plus the pictures' processing
latency, which can be a few ms (no face to swap). aiortc holds received sound until four
more packets came (80 ms), longer than a picture's lag (a frame interval and decoding), so
the sound would leave late by the difference; the receiver's hold is cut to one packet
(20 ms), within any picture's lag at up to 50 fps.
"""
from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections import deque
from typing import Any

import av
import numpy as np
from aiortc import MediaStreamTrack
from aiortc.jitterbuffer import JitterBuffer
from aiortc.mediastreams import MediaStreamError

from stream.media.audio_delay import AudioBus, AudioFormat
from stream.media.close import cancel_and_wait
from stream.sources.rtp_arrivals import RtpArrivals

log = logging.getLogger(__name__)

RATE = 48000  # what live sources hand their sound on in (stereo s16, interleaved)
LAG_FRAMES = 15  # pictures the lag is the median of (half a second at 30 fps)


class VideoLag:
    """How long a picture takes from its first packet's arrival to being offered to the
    pipeline (aiortc's hold for the next frame, and decoding): the median of the last few."""

    def __init__(self, arrivals: RtpArrivals) -> None:
        self.arrivals = arrivals
        self._recent: deque[float] = deque(maxlen=LAG_FRAMES)
        self.seconds = 0.0

    def offered(self, frame: Any, when: float) -> None:
        arrived = self.arrivals.arrival(frame)
        if arrived is not None:
            self._recent.append(max(0.0, when - arrived))
            self.seconds = statistics.median(self._recent)


def _hold_one_packet(receiver: Any) -> None:
    """Let aiortc's receiver hand a sound on as soon as the next packet arrives (its
    default: four packets later); before packets flow, at the track event."""
    name = "_RTCRtpReceiver__jitter_buffer"
    held = getattr(receiver, name, None)
    if isinstance(held, JitterBuffer):
        setattr(receiver, name, JitterBuffer(capacity=held.capacity, prefetch=1))


class SoundReader:
    """Reads a peer's audio track as frames arrive (a task on the event loop) and puts them
    on `bus`, stamped as described above; never waits for anything but the track."""

    def __init__(self, track: MediaStreamTrack, receiver: Any, bus: AudioBus, lag: VideoLag | None,
                 name: str = "webrtc peer") -> None:
        self.track = track
        self.bus = bus
        self.lag = lag
        self.name = name
        self.arrivals = RtpArrivals().install(receiver) if receiver is not None else None
        if receiver is not None:
            _hold_one_packet(receiver)
        self.frames = 0
        self._resampler: av.AudioResampler | None = None
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.bus.format = AudioFormat(RATE, 2)
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        try:
            while True:
                frame = await self.track.recv()
                now = time.monotonic()
                arrived = self.arrivals.arrival(frame) if self.arrivals is not None else None
                captured = (now if arrived is None else arrived) + (self.lag.seconds if self.lag else 0.0)
                for samples in self._stereo(frame):
                    self.bus.push(captured, samples)
                    captured += samples.shape[1] // 2 / RATE
                self.frames += 1
        except MediaStreamError:  # the peer's track ended
            pass

    def _stereo(self, frame: Any) -> list[np.ndarray]:
        """48 kHz stereo s16, interleaved (1, 2n): what aiortc's Opus decoder gives already."""
        if frame.format.name == "s16" and frame.layout.name == "stereo" and frame.sample_rate == RATE:
            return [frame.to_ndarray()]
        if self._resampler is None:
            self._resampler = av.AudioResampler(format="s16", layout="stereo", rate=RATE)
        return [f.to_ndarray() for f in self._resampler.resample(frame)]

    async def stop(self) -> None:
        await cancel_and_wait(self.task)
