"""The standard neural set behind the pipeline's protocols: SCRFD, 2dfan4, ArcFace, the swappers.

Adapters only: each model class keeps its own pre/post-processing (scrfd.py, arcface.py,
inswapper.py, fan.py); these give them the shapes the tracker and stages use.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from engines.face import Box, Face, ImageBGR, Keypoints5, Landmarks68, SwapResult
from engines.frame_views import FrameViews
from engines.models.arcface import ArcFaceEmbedder
from engines.models.inswapper import CropCut, CropSwap, InSwapBatch, InSwapper
from engines.models.scrfd import ScrfdDetector
from engines.protocols import BatchSpec


class ScrfdFaces:
    """SCRFD as a `Detector`: boxes and scores in frame pixels."""

    name = "scrfd"

    def __init__(self, detector: ScrfdDetector) -> None:
        self.detector = detector

    @property
    def calls(self) -> int:
        return self.detector.calls

    def open(self) -> None:
        self.detector.open()

    def forward(self, frame: FrameViews) -> list[tuple[Box, float]]:
        return [(box, score) for box, score, _ in self.forward_points(frame)]

    def forward_points(self, frame: FrameViews) -> list[tuple[Box, float, Keypoints5]]:
        """Boxes, scores and SCRFD's own five points, in its order (score, descending)."""
        dets, kps = self.detector.forward(frame.bgr)
        return [((float(d[0]), float(d[1]), float(d[2]), float(d[3])), float(d[4]), k.astype(np.float32))
                for d, k in zip(dets, kps)]


def mean_identity(embeddings: Sequence[np.ndarray]) -> np.ndarray:
    """The mean of the L2-normalised embeddings (each view counts alike, whatever its norm)."""
    rows = np.stack([np.asarray(e, np.float32).reshape(-1) for e in embeddings])
    rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    return rows.mean(axis=0).astype(np.float32)


class InSwapperSwapper:
    """A crop swapper (inswapper_128, hyperswap, simswap) as a `Swapper`. A source face is
    prepared once: its ArcFace embedding and then the swapper's own source vector (inswapper:
    embedding @ emap; simswap: the converter's), which every frame reuses."""

    def __init__(self, swapper: InSwapper, embedder: ArcFaceEmbedder) -> None:
        self.swapper = swapper
        self.embedder = embedder
        self.name = swapper.name

    @property
    def calls(self) -> int:
        return self.swapper.calls

    def open(self) -> None:
        self.swapper.open()
        self.embedder.open()

    def prepare_source(self, image: ImageBGR, landmarks: Landmarks68) -> np.ndarray:
        return self.swapper.prepare_source(self.embedder.forward(image, landmarks))

    def prepare_views(self, views: Sequence[tuple[ImageBGR, Landmarks68]]) -> np.ndarray:
        """Several photos of one source person: the mean of their L2-normalised ArcFace
        embeddings (FaceFusion's average face) made into the swapper's source vector, which
        normalises it again. One photo gives exactly what `prepare_source` gives."""
        if len(views) == 1:
            return self.prepare_source(*views[0])
        return self.swapper.prepare_source(mean_identity([self.embedder.forward(i, lm) for i, lm in views]))

    def forward(self, frame: ImageBGR, face: Face, source: object) -> SwapResult | None:
        return self.swapper.forward(frame, face, source)  # type: ignore[arg-type]

    def forward_many(self, frame: ImageBGR, faces: Sequence[Face],
                     sources: Sequence[object]) -> list[SwapResult | None]:
        """All faces of a frame in one model call where the export takes a batch."""
        return self.swapper.forward_many(frame, list(faces), list(sources))  # type: ignore[arg-type]

    def batch_spec(self, max_faces: int) -> BatchSpec:
        return self.swapper.batch_spec(max_faces)

    def prepare_batch(self, frame: ImageBGR, faces: Sequence[Face], sources: Sequence[object],
                      inputs: Mapping[str, np.ndarray]) -> InSwapBatch:
        """The faces' aligned crops and latents, into the batch buffers (CPU)."""
        return self.swapper.prepare_batch(frame, list(faces), list(sources), inputs)  # type: ignore[arg-type]

    def forward_batch(self, batch: InSwapBatch, inputs: Mapping[str, np.ndarray],
                      outputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """inswapper on the frame's faces: one model call where the export takes a batch."""
        return self.swapper.forward_batch(batch, inputs, outputs)

    def finish_batch(self, frame: ImageBGR, batch: InSwapBatch, swapped: np.ndarray) -> list[SwapResult | None]:
        """The swapped crops decoded and blended into copies of their regions (CPU)."""
        return self.swapper.finish_batch(frame, batch, swapped)

    def paste(self, frame: ImageBGR, face: Face, result: SwapResult) -> None:
        self.swapper.paste(frame, face, result)

    # ---- swapped at a cadence, carried between (engines.protocols.CarrySwapper) ----

    def cut(self, frame: ImageBGR, face: Face, source: object) -> CropCut | None:
        return self.swapper.cut_face(frame, face, source)  # type: ignore[arg-type]

    def swap_cut(self, cut: CropCut) -> CropSwap:
        return self.swapper.swap_cut(cut)

    def carry_many(self, frame: ImageBGR, faces: Sequence[Face],
                   swaps: Sequence[CropSwap | None]) -> list[SwapResult | None]:
        return self.swapper.carry_many(frame, faces, swaps)
