"""A WebRTC peer as a live sink (aiortc): the swapped frames sent back on a pulled track.

The sending side pulls (`SwappedTrack.recv`): it gets the newest finished frame, never a
queue of them. No MediaRelay is used (it buffers by default).
"""
from __future__ import annotations

import asyncio
import threading
import time

import av
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from stream.media.clock import VIDEO_TIME_BASE
from stream.media.convert import YuvFramer
from stream.runtime.slot import Slot
from stream.sinks.relay import FrameRelay


class SwappedTrack(MediaStreamTrack):
    """The video track sent back to the peer: `recv()` (aiortc's sender) returns the newest
    finished frame and waits when there is none; a frame finished before the sender took
    the previous one replaces it (counted), so no queue forms.

    Frames come from a small pool the sink writes into (`claim`/`push`): never the frame
    waiting to be sent, nor the one the encoder is working on.
    """

    kind = "video"
    POOL = 3

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__()
        self._loop = loop or asyncio.get_event_loop()
        self._lock = threading.Lock()
        self._pending: av.VideoFrame | None = None
        self._pending_captured: float | None = None
        self._in_flight: av.VideoFrame | None = None
        self._pool: list[av.VideoFrame] = []
        self._wakeup = asyncio.Event()
        self.frames_sent = 0
        self.frames_replaced = 0
        self.latency_s = 0.0  # of the last frame the sender took: from its capture to then

    def claim(self, framer: YuvFramer) -> av.VideoFrame:
        """A frame of the pool free for writing (from the sink's thread)."""
        with self._lock:
            if not self._pool or (self._pool[0].width, self._pool[0].height) != (framer.width, framer.height):
                self._pool = [framer.new_frame() for _ in range(self.POOL)]
            for frame in self._pool:
                if frame is not self._pending and frame is not self._in_flight:
                    return frame
        raise AssertionError("frame pool exhausted")  # cannot happen: 3 frames, 2 held at most

    def push(self, frame: av.VideoFrame, captured: float | None = None) -> None:
        """Hand a finished frame to the sender (from any thread); `captured`: its capture
        time (time.monotonic()), for `latency_s`."""
        with self._lock:
            if self._pending is not None:
                self.frames_replaced += 1
            self._pending = frame
            self._pending_captured = captured
        try:
            self._loop.call_soon_threadsafe(self._wakeup.set)
        except RuntimeError:  # the loop is closed: the peer is gone
            pass

    async def recv(self) -> av.VideoFrame:
        while True:
            if self.readyState != "live":
                raise MediaStreamError
            with self._lock:
                frame = self._pending
                if frame is not None:
                    self._pending = None
                    self._in_flight = frame
                    self.frames_sent += 1
                    if self._pending_captured is not None:
                        self.latency_s = max(0.0, time.monotonic() - self._pending_captured)
                    return frame
                self._wakeup.clear()
            await self._wakeup.wait()

    def stop(self) -> None:
        super().stop()
        try:
            self._loop.call_soon_threadsafe(self._wakeup.set)
        except RuntimeError:
            pass


class WebRtcSink:
    """The pipeline's sink for one peer: each finished frame into `SwappedTrack`'s pool, as
    yuv420p (what the VP8 and H.264 encoders take), stamped with its capture time; and,
    with a `relay`, shared with the session's viewers (WHEP)."""

    def __init__(self, track: SwappedTrack, width: int, height: int, relay: FrameRelay | None = None) -> None:
        self.track = track
        self.relay = relay
        self.framer = YuvFramer(width, height)
        self.frames_written = 0
        self.latency_s = 0.0  # of the last frame written: from its capture to here
        self.name = "webrtc peer"

    def open(self) -> None:
        pass

    def write(self, slot: Slot) -> None:
        frame = self.framer.fill(slot.image, self.track.claim(self.framer))
        frame.pts = slot.pts
        frame.time_base = slot.time_base or VIDEO_TIME_BASE
        if self.relay is not None:  # before the push: once pushed, the sender may take it
            self.relay.publish(frame)
        self.latency_s = max(0.0, time.monotonic() - slot.capture_time)
        self.track.push(frame, slot.capture_time)
        self.frames_written += 1

    def close(self) -> None:
        pass

