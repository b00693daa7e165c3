"""dlib's HOG frontal-face detector, run on the grey frame scaled to a working size."""
from __future__ import annotations

import cv2
import dlib
import numpy as np

from engines.face import Box
from engines.frame_views import FrameViews

WINDOW = 80  # px: the smallest face HOG's frontal filters find, at the scale they scan


class DlibHogDetector:
    """Finds frontal faces of at least ~80 px in the frame as it scans it.

    The frame is scaled so its longer side is `max_side`: HOG cost grows with the pixel
    count, so larger frames are downscaled (faces much larger than the 80 px window need no
    full resolution), and smaller ones are upscaled, by at most `max_upscale`, so a small
    frame's small faces are found at about the cost of a larger frame (a 640x360 frame at
    `max_side` 1024 finds faces from 50 px, not 80). `upsample` passes find smaller faces
    still, at 4x the cost each.
    """

    name = "dlib-hog"

    def __init__(self, max_side: int = 1024, upsample: int = 0, threshold: float = 0.0,
                 max_upscale: float = 1.0) -> None:
        if max_upscale < 1.0:
            raise ValueError(f"max_upscale must be >= 1, got {max_upscale}")
        self.max_side = max_side
        self.upsample = upsample
        self.threshold = threshold
        self.max_upscale = max_upscale
        self.calls = 0
        self._detector: dlib.fhog_object_detector | None = None
        self._scaled: np.ndarray | None = None  # reused working-size buffer

    def open(self) -> None:
        if self._detector is None:
            self._detector = dlib.get_frontal_face_detector()

    def scale_for(self, width: int, height: int) -> float:
        """The factor the frame is scaled by before HOG scans it."""
        return min(self.max_upscale, self.max_side / max(width, height))

    def min_face(self, width: int, height: int) -> float:
        """About the smallest face (px, in the frame) found in a frame of this size."""
        return WINDOW / (self.scale_for(width, height) * 2 ** self.upsample)

    def forward(self, frame: FrameViews) -> list[tuple[Box, float]]:
        if self._detector is None:
            self.open()
        assert self._detector is not None
        gray = frame.gray
        h, w = gray.shape[:2]
        scale = self.scale_for(w, h)
        if abs(scale - 1.0) > 1e-3:
            size = (max(1, round(w * scale)), max(1, round(h * scale)))
            if self._scaled is None or self._scaled.shape[:2] != (size[1], size[0]):
                self._scaled = np.empty((size[1], size[0]), np.uint8)
            interpolation = cv2.INTER_AREA if scale < 1.0 else cv2.INTER_LINEAR
            image = cv2.resize(gray, size, dst=self._scaled, interpolation=interpolation)
            sx, sy = w / size[0], h / size[1]
        else:
            image, sx, sy = gray, 1.0, 1.0
        self.calls += 1
        rects, scores, _ = self._detector.run(image, self.upsample, self.threshold)
        return [
            ((r.left() * sx, r.top() * sy, (r.right() + 1) * sx, (r.bottom() + 1) * sy), float(s))
            for r, s in zip(rects, scores)
        ]
