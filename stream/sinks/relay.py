"""One session's swapped video fanned out to its viewers (WHEP), each through a one-frame
mailbox, so a slow or stalled viewer never holds back the pipeline or the other viewers.

The pipeline's sink thread `publish`es each finished frame: when anyone watches, the
frame is copied once into an immutable I420 array, shared by every viewer. Each viewer's
track (`RelayTrack`, pulled by its own aiortc sender and encoder) keeps only the newest
such picture; one it did not take in time is replaced and counted, never queued. A viewer
gets its own VideoFrame made from the shared picture on `recv()`, because aiortc's
encoders mark the frame they encode (a forced keyframe), which must not leak to others.

aiortc encodes per RTCRtpSender, so each viewer is one encode of the shared picture; the
conversion, the copy and the swap itself happen once.
"""
from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from stream.media.clock import VIDEO_TIME_BASE
from stream.sinks.webrtc_sound import SoundFeed


@dataclass(frozen=True)
class RelayedPicture:
    """A finished frame as the relay shares it: yuv420p planes in one array, read-only."""

    i420: np.ndarray  # (H * 3 // 2, W) uint8
    pts: int
    time_base: Fraction
    seq: int  # the relay's count of published frames, from 1


class RelayTrack(MediaStreamTrack):
    """One viewer's video track: `recv()` returns the newest published picture (waiting for
    one when it has had them all); pictures published while an older one waited replace it."""

    kind = "video"

    def __init__(self, relay: FrameRelay, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.relay = relay
        self._event_loop = loop
        self._lock = threading.Lock()
        self._pending: RelayedPicture | None = None
        self._wakeup = asyncio.Event()
        self.frames_sent = 0
        self.frames_replaced = 0  # published while an older one waited: this viewer skipped it
        self.last_seq = 0

    def offer(self, picture: RelayedPicture) -> None:
        """The newest picture (from the publishing thread); never waits."""
        with self._lock:
            if self._pending is not None:
                self.frames_replaced += 1
            self._pending = picture
        self._wake()

    async def recv(self) -> av.VideoFrame:
        while True:
            if self.readyState != "live":
                raise MediaStreamError
            with self._lock:
                picture = self._pending
                self._pending = None
                if picture is None:
                    self._wakeup.clear()
            if picture is not None:
                frame = av.VideoFrame.from_ndarray(picture.i420, format="yuv420p")
                frame.pts, frame.time_base = picture.pts, picture.time_base
                self.frames_sent += 1
                self.last_seq = picture.seq
                return frame
            await self._wakeup.wait()

    def stop(self) -> None:
        super().stop()
        self.relay.remove(self)
        self._wake()

    def _wake(self) -> None:
        try:
            self._event_loop.call_soon_threadsafe(self._wakeup.set)
        except RuntimeError:  # the loop is closed: the viewer is gone
            pass


class FrameRelay:
    """A session's viewers and the newest frame each is due. Thread-safe: `publish` runs on
    the pipeline's thread, tracks are added and removed on the event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tracks: list[RelayTrack] = []
        self._closed = False
        self.published = 0  # frames offered to at least one viewer
        self.sound: SoundFeed | None = None  # the session's sound, when its peer sends some
        self.last: RelayedPicture | None = None

    @property
    def viewers(self) -> int:
        with self._lock:
            return len(self._tracks)

    def track(self, loop: asyncio.AbstractEventLoop | None = None) -> RelayTrack:
        """A new viewer's track; it starts on the newest picture when there is one (a
        viewer joining sees the stream at once, not at the next frame)."""
        track = RelayTrack(self, loop or asyncio.get_running_loop())
        with self._lock:
            if self._closed:
                track.stop()
                return track
            self._tracks.append(track)
            if self.last is not None:
                track.offer(self.last)
        return track

    def remove(self, track: RelayTrack) -> None:
        with self._lock:
            if track in self._tracks:
                self._tracks.remove(track)
            if not self._tracks:
                self.last = None  # nobody watches: hold no frame

    def publish(self, frame: av.VideoFrame) -> None:
        """Share a finished yuv420p frame with every viewer (copied once; nothing is done
        when nobody watches). The caller may reuse `frame` as soon as this returns."""
        picture = self.prepare(frame)
        if picture is not None:
            self.deliver(picture)

    def prepare(self, frame: av.VideoFrame) -> RelayedPicture | None:
        """`frame` copied as the viewers will share it, to `deliver` now or later (None when
        nobody watches)."""
        with self._lock:
            if not self._tracks:
                return None
        i420 = frame.to_ndarray(format="yuv420p")  # a copy: the sink reuses its frames
        i420.flags.writeable = False
        with self._lock:
            self.published += 1
            return RelayedPicture(i420, int(frame.pts or 0), frame.time_base or VIDEO_TIME_BASE, self.published)

    def deliver(self, picture: RelayedPicture) -> None:
        """Offer a prepared picture to every viewer; one older than a picture already
        delivered is let go (pictures held back by a changing delay must not go back)."""
        with self._lock:
            if self.last is not None and picture.seq <= self.last.seq:
                return
            self.last = picture
            tracks = list(self._tracks)
        for track in tracks:
            track.offer(picture)

    def close(self) -> None:
        """The session ended: every viewer's track ends (their senders stop)."""
        with self._lock:
            self._closed = True
            tracks, self._tracks = self._tracks, []
            self.last = None
        for track in tracks:
            track.stop()
