"""dlib's 128-d ResNet face embedding (about 12 ms a face on one core, mostly off the GIL).

dlib aligns the face's 150x150 chip from its 68 points (`dlib.get_face_chip`, as its own
`compute_face_descriptor` does); the network itself runs from dlib's own weights, by ONNX
Runtime from their ONNX export where it is installed (engines.dlib.onnx_embedding, about half
the numpy port's time), else with numpy (engines.dlib.resnet: dlib's answer to within 3e-7,
in a fifth of dlib's time). The tracklet cache computes it once per track, never per frame.
"""
from __future__ import annotations

import threading

import cv2
import dlib
import numpy as np
import numpy.typing as npt

from engines.dlib.landmarker import to_rect
from engines.dlib.models import shared_model
from engines.dlib.resnet import CHIP, PADDING, DlibResNet
from engines.face import ImageBGR, Landmarks68

SAME_PERSON = 0.6  # dlib's own convention for its embedding


class DlibEmbedder:
    name = "dlib-resnet"
    threshold = SAME_PERSON

    def __init__(self) -> None:
        self.calls = 0
        self._model: DlibResNet | None = None  # shared by the process's embedders
        self._lock = threading.Lock()

    def open(self) -> None:
        if self._model is None:
            # One copy a process, shared with every other embedder (engines.dlib.models).
            self._model, self._lock = shared_model("embedding")

    def warm(self) -> None:
        """The network's first batch run now, on blank chips, not on a live run's first
        faces (DlibResNet.warm: once a process)."""
        if self._model is None:
            self.open()
        assert self._model is not None
        self._model.warm()

    def chip(self, image: ImageBGR, landmarks: Landmarks68) -> np.ndarray:
        """The face's aligned 150x150 RGB chip, as dlib cuts it for its embedding."""
        # Only the face's surroundings are converted to RGB, not the whole frame.
        x0, y0 = np.floor(landmarks.min(axis=0)).astype(int)
        x1, y1 = np.ceil(landmarks.max(axis=0)).astype(int)
        pad = int(max(x1 - x0, y1 - y0))
        h, w = image.shape[:2]
        cx0, cy0 = max(0, x0 - pad), max(0, y0 - pad)
        cx1, cy1 = min(w, x1 + pad), min(h, y1 + pad)
        crop = cv2.cvtColor(image[cy0:cy1, cx0:cx1], cv2.COLOR_BGR2RGB)
        pts = landmarks - np.array([cx0, cy0], np.float32)
        box = (float(pts[:, 0].min()), float(pts[:, 1].min()), float(pts[:, 0].max()), float(pts[:, 1].max()))
        shape = dlib.full_object_detection(
            to_rect(box), [dlib.point(int(round(x)), int(round(y))) for x, y in pts]
        )
        return dlib.get_face_chip(crop, shape, CHIP, PADDING)

    def forward(self, image: ImageBGR, landmarks: Landmarks68) -> npt.NDArray[np.float32]:
        if self._model is None:
            self.open()
        assert self._model is not None
        chip = self.chip(image, landmarks)
        self.calls += 1
        # Its runs keep nothing between calls, so they may overlap: no lock.
        return self._model.embed(chip)

    def forward_many(self, image: ImageBGR, landmarks: list[Landmarks68]) -> npt.NDArray[np.float32]:
        """The (n, 128) embeddings of the faces these points align, run as one batch
        (DlibResNet.embed_many: several faces cost less together than one by one)."""
        if self._model is None:
            self.open()
        assert self._model is not None
        if not landmarks:
            return np.empty((0, 128), np.float32)
        chips = np.stack([self.chip(image, points) for points in landmarks])
        self.calls += len(landmarks)
        return self._model.embed_many(chips)

    def distance(self, a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> float:
        return float(np.linalg.norm(a - b))
