"""A WebRTC peer's camera as a live source (aiortc), with latest-frame semantics.

Where aiortc would queue on the receiving side:
- the remote track's own queue (decoded frames, unbounded) is drained as frames arrive by
  `TrackReader`; the pipeline reads the newest frame from a one-frame mailbox
  (`WebRtcSource`), frames it did not get to are counted as replaced;
- the receiver's decoder input (encoded frames, unbounded) only grows when decoding falls
  behind; `TrackReader` trims it past `DECODER_BACKLOG_LIMIT` and asks the peer for a
  keyframe (RTCP PLI) so decoding restarts clean.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from fractions import Fraction
from typing import Any

import av
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from stream.errors import SourceError
from stream.media.clock import VIDEO_TIME_BASE, CaptureClock
from stream.media.close import cancel_and_wait
from stream.media.sdr_pictures import SdrPictures
from stream.media.video_info import VideoInfo
from stream.runtime.slot import Slot

log = logging.getLogger(__name__)

DECODER_BACKLOG_LIMIT = 30  # encoded frames (about a second) waiting for aiortc's decoder


class WebRtcSource:
    """The pipeline's source for one peer: the newest decoded frame of its camera track.

    `offer()` (event loop) replaces the waiting frame; `read_into()` (the pipeline's
    source thread) waits for one, converts it to BGR into the slot and stamps it with its
    arrival time, so latency is measured from the moment the frame reached us. The
    picture size is the first frame's; later frames of another size are scaled to it.
    """

    def __init__(self, name: str = "webrtc") -> None:
        self.name = name
        self.info: VideoInfo | None = None
        self.frames_received = 0
        self.frames_replaced = 0  # arrived while an unread frame waited: never processed
        self._cond = threading.Condition()
        self._frame: av.VideoFrame | None = None
        self._arrived = 0.0
        self._ended = False
        self._pictures = SdrPictures()  # the YUV -> BGR conversion (an HDR camera's tone-mapped)
        self.range_note: str | None = None  # an HDR camera: tone-mapped, and how (one line)
        self.clock = CaptureClock()
        self.wait_s = 0.0  # of the last read: time spent waiting for a frame to arrive

    def open(self) -> VideoInfo:
        """The picture size and rate, known once the first frame has arrived (the peer's
        pipeline starts on it); a SourceError before."""
        if self.info is None:
            raise SourceError(f"{self.name}: no frame has arrived yet")
        return self.info

    def offer(self, frame: av.VideoFrame) -> None:
        with self._cond:
            if self._ended:
                return
            if self.info is None:
                self.info = VideoInfo(frame.width - frame.width % 2, frame.height - frame.height % 2,
                                      Fraction(30), VIDEO_TIME_BASE)
                if self._pictures.prepare(frame, self.info.width, self.info.height) is not None:
                    self.range_note = self._pictures.note
            if self._frame is not None:
                self.frames_replaced += 1
            self._frame = frame
            self._arrived = time.monotonic()
            self.frames_received += 1
            self._cond.notify()

    def end(self) -> None:
        """No more frames: a waiting read returns False (the pipeline ends)."""
        with self._cond:
            self._ended = True
            self._frame = None
            self._cond.notify_all()

    def read_into(self, slot: Slot) -> bool:
        t0 = time.perf_counter()
        with self._cond:
            while self._frame is None and not self._ended:
                self._cond.wait()
            self.wait_s = time.perf_counter() - t0
            if self._ended:
                return False
            frame, arrived = self._frame, self._arrived
            self._frame = None
        assert frame is not None
        image = slot.buffers["image"]
        self._pictures.convert(frame, image)
        self.clock.stamp(slot, arrived)
        return True

    def close(self) -> None:
        self.end()

    def describe(self) -> dict[str, object]:
        return {"input": self.name, "frames_received": self.frames_received,
                "frames_replaced": self.frames_replaced, "measured_fps": round(self.clock.measured_fps, 2)}


class TrackReader:
    """Drains a remote video track into a `WebRtcSource` as fast as frames arrive, and
    keeps the receiver's decoder backlog bounded. Runs as a task on the event loop."""

    def __init__(self, track: MediaStreamTrack, source: WebRtcSource, receiver: Any = None,
                 on_first: Any = None, on_frame: Any = None) -> None:
        """`on_first(frame)`: the first frame was offered; `on_frame(frame, when)`: each
        frame was, at `when` (time.monotonic(), its capture stamp)."""
        self.track = track
        self.source = source
        self.receiver = receiver
        self.on_first = on_first
        self.on_frame = on_frame
        self.backlog_trims = 0
        self.max_backlog = 0
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        first = True
        try:
            while True:
                frame = await self.track.recv()
                self.source.offer(frame)
                if self.on_frame is not None:
                    self.on_frame(frame, time.monotonic())
                if first:
                    first = False
                    if self.on_first is not None:
                        self.on_first(frame)
                await self._bound_backlog()
        except MediaStreamError:  # the peer's track ended
            pass
        finally:
            self.source.end()

    def _decoder_queue(self) -> queue.Queue[Any] | None:
        q = getattr(self.receiver, "_RTCRtpReceiver__decoder_queue", None)
        return q if isinstance(q, queue.Queue) else None

    async def _bound_backlog(self) -> None:
        q = self._decoder_queue()
        if q is None:
            return
        depth = q.qsize()
        self.max_backlog = max(self.max_backlog, depth)
        if depth <= DECODER_BACKLOG_LIMIT:
            return
        dropped = 0
        try:
            while True:
                item = q.get_nowait()
                if item is None:  # the receiver's stop signal: put it back, stop trimming
                    q.put(None)
                    break
                dropped += 1
        except queue.Empty:
            pass
        self.backlog_trims += 1
        log.info("%s: decoding fell %d frames behind; skipped to the next keyframe", self.source.name, dropped)
        pli = getattr(self.receiver, "_send_rtcp_pli", None)
        if pli is not None:
            for ssrc in self.receiver.getSynchronizationSources():
                await pli(ssrc.source)

    async def stop(self) -> None:
        await cancel_and_wait(self.task)
        self.source.end()
