"""An RTSP stream as a live source: PyAV over TCP with low-delay options, reconnecting
with backoff when the stream drops, stamped by the capture clock."""
from __future__ import annotations

import logging
import threading
import time
from fractions import Fraction

import av
import numpy as np

from stream.errors import SourceError, reason_of
from stream.media.backoff import backoff_delay
from stream.media.clock import VIDEO_TIME_BASE, CaptureClock
from stream.media.close import close_quietly
from stream.media.convert import convert_into
from stream.media.video_info import VideoInfo
from stream.runtime.slot import Slot

log = logging.getLogger(__name__)


class RtspSource:
    """An RTSP stream pulled with PyAV over TCP, with low-delay options.

    Opening gives up after `open_timeout` seconds with a one-line error. When the stream
    drops mid-run (server restart, network), it reconnects with backoff (0.5 s doubling to
    4 s) and says so; after `give_up_after` seconds without a frame it ends with an error.
    A changed picture size after a reconnect is scaled to the pipeline's size.
    """

    def __init__(self, url: str, transport: str = "tcp", open_timeout: float = 10.0,
                 read_timeout: float = 3.0, give_up_after: float = 60.0) -> None:
        self.url = url
        self.transport = transport
        self.open_timeout = open_timeout
        self.read_timeout = read_timeout
        self.give_up_after = give_up_after
        self.info: VideoInfo | None = None
        self.clock = CaptureClock()
        self.reconnects = 0
        self.wait_s = 0.0  # network waits count as decoding here: a stalled stream shows in decode time
        self._container: av.container.InputContainer | None = None
        self._frames = None
        self._pending: av.VideoFrame | None = None
        self._i420: np.ndarray | None = None  # reused for the YUV -> BGR conversion
        self._stop = threading.Event()
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"rtsp {self.url!r}"

    def _error(self, what: str) -> SourceError:
        return SourceError(f"{self.name}: {what}")

    def _connect(self, timeout: float) -> None:
        options = {"rtsp_transport": self.transport, "fflags": "nobuffer", "flags": "low_delay",
                   "max_delay": "0", "analyzeduration": "1000000", "probesize": "500000"}
        container = av.open(self.url, "r", options=options, timeout=(timeout, self.read_timeout))
        try:
            if not container.streams.video:
                raise SourceError(f"{self.name}: has no video stream")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            stream.codec_context.flags |= av.codec.context.Flags.low_delay
        except BaseException:
            container.close()
            raise
        self._container = container
        self._frames = container.decode(stream)

    def _disconnect(self) -> None:
        container, self._container, self._frames = self._container, None, None
        if container is not None:
            close_quietly(container)

    def open(self) -> VideoInfo:
        deadline = time.monotonic() + self.open_timeout
        last = "no answer"
        for attempt in range(1000):
            delay = backoff_delay(attempt)
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                self._connect(max(left, 0.5))
                first = next(self._frames)  # type: ignore[arg-type]
                break
            except SourceError:
                raise
            except (av.FFmpegError, OSError, StopIteration) as exc:
                last = reason_of(exc) if not isinstance(exc, StopIteration) else "stream ended at once"
                self._disconnect()
                if self._stop.wait(min(delay, max(deadline - time.monotonic(), 0))):
                    break
        if self._frames is None:
            raise self._error(f"cannot connect within {self.open_timeout:.0f} s ({last})")
        self._pending = first
        rate = self._container.streams.video[0].average_rate or self._container.streams.video[0].guessed_rate
        self.info = VideoInfo(first.width, first.height, Fraction(rate or 30), VIDEO_TIME_BASE)
        return self.info

    def _reconnect(self, why: str) -> bool:
        self._disconnect()
        log.warning("%s: stream dropped (%s); reconnecting", self.name, why)
        started = time.monotonic()
        attempt = 0
        while not self._stop.is_set():
            waited = time.monotonic() - started
            if waited > self.give_up_after:
                raise self._error(f"lost for {waited:.0f} s, giving up ({why})")
            delay = backoff_delay(attempt)
            attempt += 1
            if self._stop.wait(delay):
                return False
            try:
                self._connect(min(self.open_timeout, 5.0))
                self._pending = next(self._frames)  # type: ignore[arg-type]
            except (av.FFmpegError, OSError, StopIteration) as exc:
                why = reason_of(exc) if not isinstance(exc, StopIteration) else "stream ended"
                self._disconnect()
                continue
            self.reconnects += 1
            log.warning("%s: reconnected after %.1f s", self.name, time.monotonic() - started)
            return True
        return False

    def read_into(self, slot: Slot) -> bool:
        with self._lock:  # close() from another thread waits for a read in progress
            return self._read_into(slot)

    def _read_into(self, slot: Slot) -> bool:
        if self.info is None:
            raise self._error("read before open()")
        while True:
            if self._stop.is_set():
                return False
            frame = self._pending
            self._pending = None
            if frame is None:
                try:
                    frame = next(self._frames)  # type: ignore[arg-type]
                except StopIteration:
                    if not self._reconnect("the server ended the stream"):
                        return False
                    continue
                except (av.FFmpegError, OSError) as exc:
                    if self._stop.is_set() or not self._reconnect(reason_of(exc)):
                        return False
                    continue
            image = slot.buffers["image"]
            if self._i420 is None or self._i420.shape != (image.shape[0] * 3 // 2, image.shape[1]):
                self._i420 = np.empty((image.shape[0] * 3 // 2, image.shape[1]), np.uint8)
            convert_into(frame, image, self._i420)  # scales a stream that changed size
            self.clock.stamp(slot)
            return True

    def close(self) -> None:
        self._stop.set()
        # A read in progress ends within the read timeout (or a backoff wait, at once).
        if self._lock.acquire(timeout=self.read_timeout + 2.0):
            try:
                self._disconnect()
            finally:
                self._lock.release()

    def describe(self) -> dict[str, object]:
        return {"input": self.name, "measured_fps": round(self.clock.measured_fps, 2),
                "reconnects": self.reconnects}
