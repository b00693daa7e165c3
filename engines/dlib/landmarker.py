"""dlib's 68-point shape predictor (the model that ships with face_recognition_models), run
with numpy on all the boxes of a frame at once (engines.dlib.shape)."""
from __future__ import annotations

import dlib

from engines.dlib.models import shared_model
from engines.dlib.shape import ShapePredictor
from engines.face import Box, Landmarks68
from engines.frame_views import FrameViews


def to_rect(box: Box) -> dlib.rectangle:
    x0, y0, x1, y1 = _corners(box)
    return dlib.rectangle(x0, y0, x1, y1)


def _corners(box: Box) -> tuple[int, int, int, int]:
    """The box as dlib's whole-pixel rectangle: left, top, right, bottom, all inclusive."""
    x0, y0, x1, y1 = box
    return int(round(x0)), int(round(y0)), int(round(x1)) - 1, int(round(y1)) - 1


class DlibLandmarker:
    """68 landmarks in a face box, on the full-resolution grey frame: dlib's points, about
    1.5-2.5 ms for one face and 6-7 ms for six at once, with the GIL let go for most of it."""

    name = "dlib-68"

    def __init__(self) -> None:
        self.calls = 0
        self._predictor: ShapePredictor | None = None

    def open(self) -> None:
        if self._predictor is None:
            # One copy a process, shared with every other landmarker (engines.dlib.models).
            self._predictor, _ = shared_model("landmarks")

    def forward(self, frame: FrameViews, box: Box) -> Landmarks68:
        return self.forward_many(frame, [box])[0]

    def forward_many(self, frame: FrameViews, boxes: list[Box]) -> list[Landmarks68]:
        if self._predictor is None:
            self.open()
        assert self._predictor is not None
        self.calls += len(boxes)
        if not boxes:
            return []
        points = self._predictor.predict(frame.gray, [_corners(b) for b in boxes])
        return list(points)

    def close(self) -> None:
        pass
