"""Who a face is, by dlib's embedding: how the tests check that a swap moved a face."""
from __future__ import annotations

import numpy as np

from engines.dlib_detector import DlibHogDetector
from engines.dlib_embedder import DlibEmbedder
from engines.dlib_landmarker import DlibLandmarker
from engines.frame_views import FrameViews


class Identity:
    """dlib's embedding of each face found in a picture, by the same models the swap uses."""

    def __init__(self) -> None:
        self.det, self.lm, self.emb = DlibHogDetector(2048), DlibLandmarker(), DlibEmbedder()

    def boxes(self, image: np.ndarray) -> list[tuple[float, float, float, float]]:
        return [b for b, _ in self.det.forward(FrameViews(image))]

    def embed(self, image: np.ndarray, box) -> np.ndarray:
        return self.emb.forward(image, self.lm.forward(FrameViews(image), box))

    def distance_to(self, image: np.ndarray, reference: np.ndarray) -> list[float]:
        """Embedding distance of each face of `image` to `reference` (an embedding)."""
        return [float(np.linalg.norm(self.embed(image, box) - reference)) for box in self.boxes(image)]
