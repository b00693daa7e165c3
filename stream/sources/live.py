"""Live sources: a webcam (OpenCV capture), an RTSP stream (PyAV over TCP, reconnecting).

Both fill ring-A slots in place and stamp each frame with its capture time: `pts` counts
90 kHz ticks of the capture clock from the first frame, so sinks that record keep the real
timing of a live stream (frames dropped by the pipeline leave gaps, not a faster clip).
"""
from __future__ import annotations

import logging
import threading
import time
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

from stream.errors import SourceError, close_quietly, reason_of
from stream.slot import Slot
from stream.sources.file import convert_into
from stream.video_info import VideoInfo

log = logging.getLogger(__name__)

LIVE_TIME_BASE = Fraction(1, 90000)


class CaptureClock:
    """pts and capture times for a live source, plus its measured frame rate."""

    def __init__(self) -> None:
        self.t0: float | None = None
        self.last_pts = -1
        self.frames = 0
        self._rate_since = 0.0
        self._rate_frames = 0
        self.measured_fps = 0.0

    def stamp(self, slot: Slot, now: float | None = None) -> None:
        """Stamp `slot` as captured at `now` (time.monotonic(); default: this moment)."""
        now = time.monotonic() if now is None else now
        if self.t0 is None:
            self.t0 = self._rate_since = now
        pts = round((now - self.t0) / LIVE_TIME_BASE)
        pts = max(pts, self.last_pts + 1)  # strictly increasing even for two reads in one tick
        self.last_pts = pts
        slot.seq = self.frames
        slot.pts = pts
        slot.time_base = LIVE_TIME_BASE
        slot.capture_time = now
        self.frames += 1
        self._rate_frames += 1
        if now - self._rate_since >= 1.0:  # the rate over the last second or so
            self.measured_fps = self._rate_frames / (now - self._rate_since)
            self._rate_since, self._rate_frames = now, 0


def _fit(picture: np.ndarray, image: np.ndarray) -> None:
    """Copy `picture` into the slot picture, resizing when the stream changed size."""
    if picture.shape == image.shape:
        np.copyto(image, picture)
    else:
        cv2.resize(picture, (image.shape[1], image.shape[0]), dst=image, interpolation=cv2.INTER_AREA)


def _quiet_capture(device: int | str) -> cv2.VideoCapture:
    """cv2.VideoCapture without OpenCV's own warnings on stderr (each backend it tries
    prints one when a camera is missing); our error says what went wrong in one line."""
    logging_api = getattr(getattr(cv2, "utils", None), "logging", None)
    if logging_api is None:
        return cv2.VideoCapture(device)
    level = logging_api.getLogLevel()
    logging_api.setLogLevel(logging_api.LOG_LEVEL_SILENT)
    try:
        return cv2.VideoCapture(device)
    finally:
        logging_api.setLogLevel(level)


def parse_webcam(spec: str) -> int | str:
    """`webcam:0` -> 0, `webcam:/dev/video2` -> '/dev/video2'."""
    device = spec.split(":", 1)[1] if spec.startswith("webcam:") else spec
    if device == "":
        return 0
    return int(device) if device.isdigit() else device


class WebcamSource:
    """A camera through OpenCV's capture: a device index or path, asked for a size, a rate
    and MJPG (cameras deliver far higher rates in MJPG than raw over USB 2).

    A video file given as the device plays at its own frame rate, as a camera would (for
    trying a setup without a camera). The camera's real rate is measured and reported.
    """

    def __init__(self, device: int | str, width: int | None = None, height: int | None = None,
                 fps: float | None = None, mjpg: bool = True) -> None:
        self.device = device
        self.want = (width, height, fps)
        self.mjpg = mjpg
        self.info: VideoInfo | None = None
        self.clock = CaptureClock()
        self._cap: cv2.VideoCapture | None = None
        self._first: np.ndarray | None = None
        self._pace: float | None = None  # seconds per frame when the "camera" is a file
        self._next_due = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.wait_s = 0.0  # of the last read: time spent waiting for the frame to be due

    @property
    def name(self) -> str:
        return f"webcam {self.device!r}"

    def _error(self, what: str) -> SourceError:
        return SourceError(f"{self.name}: {what}")

    def open(self) -> VideoInfo:
        if isinstance(self.device, str) and not self.device.startswith("/dev/") and not Path(self.device).exists():
            raise self._error("no such device or file")
        cap = _quiet_capture(self.device)
        if not cap.isOpened():
            cap.release()
            raise self._error("cannot be opened (no such camera, or another program is using it)")
        is_file = cap.get(cv2.CAP_PROP_FRAME_COUNT) > 0
        width, height, fps = self.want
        if not is_file:
            if self.mjpg:
                cap.set(cv2.CAP_PROP_FOURCC, cv2.VideoWriter_fourcc(*"MJPG"))
            if width:
                cap.set(cv2.CAP_PROP_FRAME_WIDTH, width)
            if height:
                cap.set(cv2.CAP_PROP_FRAME_HEIGHT, height)
            if fps:
                cap.set(cv2.CAP_PROP_FPS, fps)
        ok, first = cap.read()
        if not ok or first is None:
            cap.release()
            raise self._error("opened but delivers no frames")
        rate = cap.get(cv2.CAP_PROP_FPS) or fps or 30.0
        if is_file:
            self._pace = 1.0 / rate
        self._cap, self._first = cap, first
        h, w = first.shape[:2]
        if (width and width != w) or (height and height != h):
            log.info("%s: asked for %sx%s, the camera gives %dx%d", self.name, width, height, w, h)
        self.info = VideoInfo(w, h, Fraction(rate).limit_denominator(1001), LIVE_TIME_BASE)
        return self.info

    def read_into(self, slot: Slot) -> bool:
        with self._lock:  # close() from another thread waits for a read in progress
            return self._read_into(slot)

    def _read_into(self, slot: Slot) -> bool:
        if self._cap is None:
            return False  # closed
        image = slot.buffers["image"]
        if self._first is not None:
            _fit(self._first, image)
            self._first = None
            self._next_due = time.monotonic()
        else:
            self.wait_s = 0.0
            if self._pace is not None:  # a file: wait for this frame's turn, as a camera would
                delay = self._next_due - time.monotonic()
                if delay > 0:
                    if self._stop.wait(delay):
                        return False
                    self.wait_s = delay
            ok, picture = self._cap.read(image if image.flags.c_contiguous else None)
            if self._stop.is_set():
                return False
            if not ok:
                if self._pace is not None:
                    return False  # the file ended
                raise self._error(f"stopped delivering frames after {self.clock.frames} "
                                  "(unplugged, or taken by another program?)")
            if picture is not image:
                _fit(picture, image)
        if self._pace is not None:
            self._next_due += self._pace
        self.clock.stamp(slot)
        return True

    def close(self) -> None:
        self._stop.set()
        if self._lock.acquire(timeout=5.0):
            try:
                if self._cap is not None:
                    self._cap.release()
                    self._cap = None
            finally:
                self._lock.release()

    def describe(self) -> dict[str, object]:
        return {"input": self.name, "measured_fps": round(self.clock.measured_fps, 2)}


class RtspSource:
    """An RTSP stream pulled with PyAV over TCP, with low-delay options.

    Opening gives up after `open_timeout` seconds with a one-line error. When the stream
    drops mid-run (server restart, network), it reconnects with backoff (0.5 s doubling to
    4 s) and says so; after `give_up_after` seconds without a frame it ends with an error.
    A changed picture size after a reconnect is scaled to the pipeline's size.
    """

    BACKOFF = (0.5, 1.0, 2.0, 4.0)

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
        for delay in (*self.BACKOFF, *([self.BACKOFF[-1]] * 100)):
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
        self.info = VideoInfo(first.width, first.height, Fraction(rate or 30), LIVE_TIME_BASE)
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
            delay = self.BACKOFF[min(attempt, len(self.BACKOFF) - 1)]
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
