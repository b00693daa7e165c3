"""A camera as a live source: OpenCV's capture of a device index or path (or a video file
played at its own rate, standing in for a camera), stamped by the capture clock."""
from __future__ import annotations

import logging
import threading
import time
from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np

from stream.errors import SourceError
from stream.media.clock import VIDEO_TIME_BASE, CaptureClock
from stream.media.video_info import VideoInfo
from stream.runtime.slot import Slot

log = logging.getLogger(__name__)


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
        self.info = VideoInfo(w, h, Fraction(rate).limit_denominator(1001), VIDEO_TIME_BASE)
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
