"""One frame as the models want it: BGR as decoded, and grey, computed once when first asked."""
from __future__ import annotations

import cv2
import numpy as np

from engines.face import ImageBGR


class FrameViews:
    """The views of one frame shared by the models of one analyse step.

    dlib's models read the grey frame, the ONNX ones the BGR frame; the grey view is
    converted at most once per frame, into `gray_out` when it has the right shape (a
    buffer the caller reuses, so no frame-sized allocation per frame).
    """

    __slots__ = ("bgr", "_gray", "_gray_out")

    def __init__(self, bgr: ImageBGR, gray_out: np.ndarray | None = None) -> None:
        self.bgr = bgr
        self._gray: np.ndarray | None = None
        self._gray_out = gray_out

    @property
    def gray(self) -> np.ndarray:
        if self._gray is None:
            out = self._gray_out
            if out is None or out.shape != self.bgr.shape[:2]:
                out = None
            self._gray = cv2.cvtColor(self.bgr, cv2.COLOR_BGR2GRAY, dst=out)
        return self._gray

    @property
    def shape(self) -> tuple[int, int]:
        h, w = self.bgr.shape[:2]
        return h, w
