"""dlib's 68-point shape predictor (the model that ships with face_recognition_models)."""
from __future__ import annotations

import threading

import dlib
import numpy as np

from engines.dlib_models import shared_model
from engines.face import Box, Landmarks68
from engines.frame_views import FrameViews


def to_rect(box: Box) -> dlib.rectangle:
    x0, y0, x1, y1 = box
    return dlib.rectangle(int(round(x0)), int(round(y0)), int(round(x1)) - 1, int(round(y1)) - 1)


class DlibLandmarker:
    """68 landmarks in a face box, on the full-resolution grey frame (about 2 ms a face)."""

    name = "dlib-68"

    def __init__(self) -> None:
        self.calls = 0
        self._predictor: dlib.shape_predictor | None = None
        self._lock = threading.Lock()

    def open(self) -> None:
        if self._predictor is None:
            # One copy a process, shared with every other landmarker (engines.dlib_models).
            self._predictor, self._lock = shared_model("landmarks")

    def forward(self, frame: FrameViews, box: Box) -> Landmarks68:
        if self._predictor is None:
            self.open()
        assert self._predictor is not None
        self.calls += 1
        gray, rect = frame.gray, to_rect(box)
        with self._lock:
            shape = self._predictor(gray, rect)
        return np.array([(p.x, p.y) for p in shape.parts()], dtype=np.float32)

    def forward_many(self, frame: FrameViews, boxes: list[Box]) -> list[Landmarks68]:
        return [self.forward(frame, box) for box in boxes]

    def close(self) -> None:
        pass
