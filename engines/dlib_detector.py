"""dlib's HOG frontal-face detector, run on a downscaled grey frame."""
from __future__ import annotations

import cv2
import dlib
import numpy as np

from engines.face import Box
from engines.frame_views import FrameViews


class DlibHogDetector:
    """Finds frontal faces of at least ~80 px in the (downscaled) frame.

    The frame is downscaled so its longer side is at most `max_side`: HOG cost grows
    with the pixel count, and faces much larger than the 80 px window need no full
    resolution. `upsample` passes find smaller faces at 4x the cost each.
    """

    name = "dlib-hog"

    def __init__(self, max_side: int = 1024, upsample: int = 0, threshold: float = 0.0) -> None:
        self.max_side = max_side
        self.upsample = upsample
        self.threshold = threshold
        self.calls = 0
        self._detector: dlib.fhog_object_detector | None = None
        self._small: np.ndarray | None = None  # reused downscale buffer

    def open(self) -> None:
        if self._detector is None:
            self._detector = dlib.get_frontal_face_detector()

    def forward(self, frame: FrameViews) -> list[tuple[Box, float]]:
        if self._detector is None:
            self.open()
        assert self._detector is not None
        gray = frame.gray
        h, w = gray.shape[:2]
        scale = min(1.0, self.max_side / max(h, w))
        if scale < 1.0:
            size = (max(1, round(w * scale)), max(1, round(h * scale)))
            if self._small is None or self._small.shape[:2] != (size[1], size[0]):
                self._small = np.empty((size[1], size[0]), np.uint8)
            image = cv2.resize(gray, size, dst=self._small, interpolation=cv2.INTER_AREA)
        else:
            image = gray
        self.calls += 1
        rects, scores, _ = self._detector.run(image, self.upsample, self.threshold)
        inv = 1.0 / scale
        return [
            ((r.left() * inv, r.top() * inv, (r.right() + 1) * inv, (r.bottom() + 1) * inv), float(s))
            for r, s in zip(rects, scores)
        ]
