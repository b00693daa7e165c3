"""Detection on a thread of its own, so tracking goes on while the detector works."""
from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from engines.face import Box, ImageBGR
from engines.frame_views import FrameViews
from engines.protocols import Detector, detect_in_background


class BackgroundDetector:
    """The detector on a thread of its own, one frame at a time.

    `submit` copies the frame into a buffer reused for every detection and returns at
    once (False while a detection is still running: the next due frame tries again);
    `poll` returns the boxes of a finished detection, once (live runs: as soon as they are
    there); `wait` waits for them (files: at a fixed number of frames after the submit,
    so the boxes join the same frame whatever the machine's speed). An error in the
    detector is raised by the next `poll` or `wait`, on the tracker's thread, so it stops
    the run as any stage error does. `close` ends the thread.
    """

    def __init__(self, detector: Detector) -> None:
        self.detector = detector
        self._cond = threading.Condition()
        self._image: np.ndarray | None = None
        self._gray: np.ndarray | None = None
        self._pending = False
        self._result: list[tuple[Box, float]] | None = None
        self._error: BaseException | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self.detections = 0
        self._settled: list[Box] = []
        self._near: list[Box] | None = None
        self.submitted_at = -1  # the frame (its seq) of the last submit

    @property
    def pending(self) -> bool:
        """A detection is running (or its result not yet taken by `poll`)."""
        return self._pending or self._result is not None

    def submit(self, image: ImageBGR, settled: Sequence[Box] = (), seq: int = -1,
               near: Sequence[Box] | None = None) -> bool:
        """Start a detection on `image`, frame `seq` (`settled`: boxes the detector need not
        refine, see DlibHogDetector.forward; `near`: look for faces near these boxes only,
        see DlibHogDetector.forward_near)."""
        with self._cond:
            if self.pending or self._closed:
                return False
            self._settled = list(settled)
            self._near = None if near is None else list(near)
            self.submitted_at = seq
            if self._image is None or self._image.shape != image.shape:
                self._image = np.empty_like(image)
                self._gray = np.empty(image.shape[:2], np.uint8)
            np.copyto(self._image, image)
            self._pending = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="fs-detect", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return True

    def poll(self) -> list[tuple[Box, float]] | None:
        with self._cond:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            result, self._result = self._result, None
            return result

    def wait(self) -> list[tuple[Box, float]] | None:
        """The boxes of the detection submitted last, once it is done (None when none is
        pending)."""
        with self._cond:
            while self._pending and self._error is None and not self._closed:
                self._cond.wait()
        return self.poll()

    def _loop(self) -> None:
        detect_in_background()  # beside the stages: no helper threads (DlibHogDetector._scan_crops)
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                image, gray, settled, near = self._image, self._gray, self._settled, self._near
            assert image is not None
            try:
                frame = FrameViews(image, gray)
                if near is not None:
                    dets = self.detector.forward_near(frame, near, settled)  # type: ignore[attr-defined]
                else:
                    dets = self.detector.forward(frame, settled) if settled else self.detector.forward(frame)
                error = None
            except Exception as exc:  # noqa: BLE001 - handed to the tracker's thread
                dets, error = [], exc
            with self._cond:
                self._result, self._error = (None, error) if error is not None else (dets, None)
                self._pending = False
                self.detections += 1
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(5.0)
