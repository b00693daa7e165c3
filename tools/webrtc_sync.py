"""Audio-video sync over WebRTC, measured where the media arrives: the flash-and-beep clip
(tools/av_sync) as a WebRTC camera and microphone, and a reader of the tracks a peer
receives.

An aiortc receiver plays nothing and aligns nothing (no lip sync from RTCP sender
reports), and it hands frames on after holding them back by different amounts: a picture
until the next one's first packet arrives, a sound until four more packets are buffered
(80 ms). So the reader times each frame by the arrival of its first RTP packet
(stream.sources.rtp_arrivals), which is when a receiver could play it: the offset is beep
onset minus flash in those arrival times, i.e. how far apart the server sent them. The
publisher's two tracks run on one clock: frame n of the picture and the sound of frame n
are both due at start + n/30 s.
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from fractions import Fraction
from typing import Any

import av
import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from stream.sources.rtp_arrivals import RtpArrivals
from tools.av_sync import FPS, PERIOD, RATE, SIZE, SyncDetector, SyncReading, beep_samples, flash_frame

PTIME = 0.02  # seconds of sound per frame sent, as aiortc's and browsers' Opus


class Start:
    """The moment both tracks start from: the first time either is pulled."""

    def __init__(self) -> None:
        self.t0: float | None = None

    def at(self) -> float:
        if self.t0 is None:
            self.t0 = time.monotonic()
        return self.t0


async def _until(when: float) -> None:
    delay = when - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


class FlashTrack(MediaStreamTrack):
    """The clip's pictures (320x240, a white flash once a second), in real time."""

    kind = "video"

    def __init__(self, start: Start) -> None:
        super().__init__()
        self.start = start
        self.sent = 0
        # One second of the clip's pictures, converted once.
        self._pictures = [av.VideoFrame.from_ndarray(flash_frame(n), format="bgr24").reformat(format="yuv420p")
                          for n in range(PERIOD)]

    async def recv(self) -> av.VideoFrame:
        if self.readyState != "live":
            raise MediaStreamError
        await _until(self.start.at() + self.sent / FPS)
        frame = self._pictures[self.sent % PERIOD]
        frame.pts, frame.time_base = self.sent * 3000, Fraction(1, 90000)
        self.sent += 1
        return frame


class BeepTrack(MediaStreamTrack):
    """The clip's sound (a 1 kHz beep starting with each flash), 20 ms a frame, in real time."""

    kind = "audio"

    def __init__(self, start: Start) -> None:
        super().__init__()
        self.start = start
        self.at = 0  # samples sent

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        await _until(self.start.at() + self.at / RATE)
        n = round(PTIME * RATE)
        samples = (beep_samples(self.at, n) * 32767).astype(np.int16).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = RATE, self.at, Fraction(1, RATE)
        self.at += n
        return frame


def flash_beep_tracks() -> tuple[FlashTrack, BeepTrack]:
    """A camera and a microphone playing the flash-and-beep clip on one clock."""
    start = Start()
    return FlashTrack(start), BeepTrack(start)


def receiver_of(pc: Any, track: MediaStreamTrack) -> Any:
    return next((r for r in pc.getReceivers() if r.track is track), None)


class SyncTimer:
    """Finds flashes and beep onsets in the frames a peer receives (`pc`'s `video` and
    `audio` tracks, each frame fed as read), timed by their first packets' arrival."""

    def __init__(self, pc: Any, video: MediaStreamTrack, audio: MediaStreamTrack) -> None:
        self.detector = SyncDetector()
        self.video_arrivals = RtpArrivals().install(receiver_of(pc, video))
        self.audio_arrivals = RtpArrivals().install(receiver_of(pc, audio))

    @property
    def reading(self) -> SyncReading:
        return self.detector.reading

    def video(self, frame: Any) -> None:
        when = self.video_arrivals.arrival(frame)
        if when is not None:  # None: arrived before the timer was installed
            self.detector.video(when, frame.to_ndarray(format="gray"))

    def audio(self, frame: Any) -> None:
        when = self.audio_arrivals.arrival(frame)
        if when is not None:
            samples = frame.to_ndarray()
            if frame.format.is_packed:
                samples = samples.reshape(-1, len(frame.layout.channels)).T
            self.detector.audio(when, samples, frame.sample_rate)


async def read_webrtc_sync(pc: Any, video: MediaStreamTrack, audio: MediaStreamTrack,
                           seconds: float) -> SyncReading:
    """Read `video` and `audio` (tracks `pc` receives) for `seconds`, timing each frame by
    its first packet's arrival, and find the flashes and beep onsets."""
    timer = SyncTimer(pc, video, audio)

    async def read(kind: str, track: MediaStreamTrack) -> None:
        while True:
            frame = await track.recv()
            if kind == "video":
                timer.video(frame)
            else:
                timer.audio(frame)

    tasks = [asyncio.ensure_future(read(kind, track)) for kind, track in (("video", video), ("audio", audio))]
    try:
        done, _ = await asyncio.wait(tasks, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if isinstance(task.exception(), MediaStreamError):
                continue
            task.result()
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, MediaStreamError):
                await task
    return timer.reading


async def read_audio(track: MediaStreamTrack, timer: SyncTimer) -> None:
    """Feed `track`'s frames to `timer` until the track ends."""
    with contextlib.suppress(MediaStreamError):
        while True:
            timer.audio(await track.recv())


__all__ = ["SIZE", "BeepTrack", "FlashTrack", "SyncTimer", "flash_beep_tracks", "read_audio", "read_webrtc_sync"]
