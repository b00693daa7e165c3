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
from stream.media.audio_delay import AudioBus
from stream.media.clock import VIDEO_TIME_BASE, CaptureClock
from stream.media.video_info import VideoInfo
from stream.runtime.slot import Slot
from stream.sources.clip_sound import ClipSound

log = logging.getLogger(__name__)

# A clip played as a camera skips to the frame due now once its reader is this many frame
# times late (jitter of a loaded machine stays below it; a stalled reader does not).
SKIP_AFTER_FRAMES = 1.5


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
    trying a setup without a camera): frame k is due k frame times after the first, and a
    reader late by more than a frame and a half gets the frame due now, the ones it missed skipped
    (`skipped`), as a camera's driver drops what nobody read; frames never come in a burst,
    and the picture stays in step with the clip's sound: recordings copy it (`audio_from`),
    and the clip's sound is put on `audio` stamped on the same clock (see ClipSound), so the
    network outputs carry it as an RTSP camera's.

    The camera's real rate is measured over the whole run (`describe()`): the frames it
    delivered, skipped ones included, over the time from the first to the last.
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
        self.skipped = 0  # a clip's frames passed over because the reader was late for them
        self._delivered = 0  # frames the camera gave (skipped ones included) ...
        self._first_t: float | None = None  # ... from the first one's capture time ...
        self._last_t = 0.0  # ... to the last one's
        self.audio = AudioBus()  # a clip's sound (a camera's is not read: no format)
        self._sound: ClipSound | None = None

    @property
    def audio_from(self) -> Path | None:
        """The file whose sound goes with these frames: the clip played as a camera (once
        open); None for a camera."""
        return Path(self.device) if self._pace is not None and isinstance(self.device, str) else None

    @property
    def name(self) -> str:
        """What the input is, as the start line and errors say it: `webcam 0`,
        `webcam '/dev/video2'`, or `file 'clip.mp4'` (a clip standing in for a camera)."""
        if isinstance(self.device, str) and not self.device.startswith("/dev/"):
            return f"file {self.device!r}"
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
            sound = ClipSound(Path(str(self.device)), self.audio)
            if sound.open():
                self._sound = sound
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
        self.wait_s = 0.0
        if self._first is not None:
            _fit(self._first, image)
            self._first = None
            self._next_due = time.monotonic()
            if self._sound is not None:
                self._sound.start(self._next_due)
        else:
            if self._pace is not None and not self._pace_file():
                return False
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
        self._count(slot.capture_time, 1)
        return True

    def _pace_file(self) -> bool:
        """A clip: skip the frames whose time has passed, wait for the next one's. False
        when the clip ended or the source was closed meanwhile."""
        assert self._cap is not None and self._pace is not None
        # Late by more than a frame and a half (a camera's driver holds a frame or two for
        # a slow reader, then drops): the frame due now is the next one, so frames never
        # come in a burst. Skipping takes time too (each frame is decoded): look again
        # after it, a few times at most.
        for _ in range(3):
            behind = (time.monotonic() - self._next_due) / self._pace
            if behind < SKIP_AFTER_FRAMES:
                break
            late = int(behind + 0.5)
            for _ in range(late):
                if self._stop.is_set() or not self._cap.grab():
                    return False
                self._next_due += self._pace
                self.skipped += 1
            self._count(None, late)
        delay = self._next_due - time.monotonic()
        if delay > 0:
            if self._stop.wait(delay):
                return False
            self.wait_s = delay
        return True

    def _count(self, when: float | None, frames: int) -> None:
        self._delivered += frames
        if when is not None:
            if self._first_t is None:
                self._first_t = when
            self._last_t = when

    @property
    def measured_fps(self) -> float:
        """Frames the camera delivered per second, over the whole run (0 before two frames)."""
        if self._first_t is None or self._last_t <= self._first_t:
            return 0.0
        return (self._delivered - 1) / (self._last_t - self._first_t)

    def close(self) -> None:
        self._stop.set()
        if self._sound is not None:
            self._sound.stop()
        if self._lock.acquire(timeout=5.0):
            try:
                if self._cap is not None:
                    self._cap.release()
                    self._cap = None
            finally:
                self._lock.release()

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"input": self.name, "measured_fps": round(self.measured_fps, 2)}
        if self.skipped:
            out["skipped"] = self.skipped
        if self._sound is not None:
            out["audio_frames"] = self.audio.frames
        return out
