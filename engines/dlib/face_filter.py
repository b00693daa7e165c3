"""A second opinion on a detector's boxes: only faces go on, not what looks like one to HOG.

dlib's HOG detector fires on round, face-like things: a mission patch on a space suit, a
name badge, a drawn smiley, a cartoon face print. A track started there gets a face pasted
on it in every frame. Its own score does not tell them apart (a badge scores up to 0.4, a
real face rolled 26 degrees or 40 px wide as low as 0), so each box is checked twice:

1. the 68-point predictor is run in the box (about 2 ms) and the points must make a face:
   eyes side by side at a plausible share of the box, brows above the eyes, then nose, then
   mouth going down the face, roll within `MAX_ROLL`;
2. dlib's 128-d embedding of the face those points align (as the pipeline computes it) is
   scored by a linear discriminant fitted by tools/fit_face_filter.py on installed pictures
   (faces against non-faces, HOG's false alarms and drawn faces among them), in units of the
   spread of the faces' scores, and HOG's own score is added: two opinions, each sure of
   different faces (a face rolled 26 degrees is far from the upright faces the discriminant
   saw but HOG scores it 2; a cartoon face HOG scores up to 0.9 the embedding puts far from
   faces). A box whose sum is not above `margin` is not a face.

The embedding is the costly part (~12 ms: engines.dlib.resnet), so verdicts are remembered:
a box that overlaps a box judged at one of the last detections takes its verdict. A face is judged afresh every
`recheck` detections, a rejected box every `recheck_rejected` (sooner: a real face judged
in a bad frame, blurred or half turned, must not stay unswapped for long). A face therefore
costs one embedding when it appears, not one per detection.

The tracker also asks it to `confirm` a followed face's box that a detection missed (a face
behind a cup): the same two checks, without HOG's score, decide whether it is kept.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engines.dlib.embedder import DlibEmbedder
from engines.dlib.face_filter_weights import BIAS, SCALE, WEIGHTS
from engines.dlib.landmarker import DlibLandmarker
from engines.face import Box, ImageBGR, Landmarks68, iou
from engines.frame_views import FrameViews
from engines.protocols import Detector

log = logging.getLogger(__name__)

MAX_ROLL = 50.0  # degrees: a face rolled further is not one HOG's frontal filters find
EYES_SHARE = (0.15, 0.8)  # inter-ocular distance over the box's width
SAME_BOX_IOU = 0.4  # a box overlapping a judged one this much is the same thing, moved
FORGET_AFTER = 3  # detections a judged box may be missing before its verdict is dropped


def plausible(points: Landmarks68, box: Box) -> bool:
    """The 68 points are laid out as a face is: eyes apart at a plausible share of the box,
    brows above the eyes, nose below them, mouth below the nose, roll within MAX_ROLL."""
    left_eye, right_eye = points[36:42].mean(axis=0), points[42:48].mean(axis=0)
    across = right_eye - left_eye
    iod = float(np.hypot(*across))
    width = max(box[2] - box[0], 1.0)
    if not EYES_SHARE[0] <= iod / width <= EYES_SHARE[1]:
        return False
    if abs(np.degrees(np.arctan2(across[1], across[0]))) > MAX_ROLL:
        return False
    down = np.array([-across[1], across[0]]) / iod  # the face's down direction, unit length
    eyes = (left_eye + right_eye) / 2

    def depth(p: np.ndarray) -> float:
        return float((p - eyes) @ down) / iod

    brows, nose, mouth = points[17:27].mean(axis=0), points[30], points[48:68].mean(axis=0)
    return depth(brows) < 0 < depth(nose) < depth(mouth)


@dataclass
class _Verdict:
    box: Box
    face: bool
    judged_at: int
    seen_at: int


class FaceFilter:
    """A detector whose boxes are checked by landmarks and embedding (see the module doc).

    Wraps any `Detector`; has its own landmarker and embedder (the detection may run on a
    thread of its own, beside the tracker's landmarks and embeddings)."""

    def __init__(self, detector: Detector, margin: float = 0.0, recheck: int = 30,
                 recheck_rejected: int = 3) -> None:
        self.detector = detector
        self.name = f"{detector.name}+face-filter"
        self.margin = margin
        self.recheck = recheck
        self.recheck_rejected = recheck_rejected
        self.landmarker = DlibLandmarker()
        self.embedder = DlibEmbedder()
        self._weights = np.asarray(WEIGHTS, np.float32)
        self._memory: list[_Verdict] = []
        self._detections = 0
        self._lock = threading.Lock()
        self.judged = 0  # boxes embedded and scored
        self.rejected = 0  # boxes dropped (each detection that dropped one counts)

    @property
    def calls(self) -> int:
        return self.detector.calls

    def open(self) -> None:
        self.detector.open()
        self.landmarker.open()
        self.embedder.open()

    def warm(self) -> None:
        """New faces are judged in a batch, whose first run in a process is 1.7x slower
        (DlibResNet.warm): a live run runs it on blank chips when it starts (engines.protocols.
        WarmDetector). Files do not: their first detection costs no frames, and the blank
        batch's buffers would raise a one-face run's peak memory by about 10 MiB."""
        self.embedder.warm()

    def embedding_scores(self, image: ImageBGR, points: list[Landmarks68]) -> np.ndarray:
        """The discriminant's score of each face these points align, in units of the spread
        of faces' scores (positive is face-like), their embeddings run as one batch."""
        embeddings = self.embedder.forward_many(image, points)
        return (embeddings @ self._weights + BIAS) / SCALE

    def is_face(self, frame: FrameViews, box: Box, score: float) -> bool:
        """Judge one box (with its detector score) afresh, without the memory."""
        return self.are_faces(frame, [(box, score)])[0]

    def are_faces(self, frame: FrameViews, found: Sequence[tuple[Box, float]]) -> list[bool]:
        """Judge boxes (with their detector scores) afresh, without the memory: the points of
        all at once, then the embeddings of those laid out as faces as one batch (a scene's
        six new faces: their embeddings 36-42 ms together, 48 ms one by one)."""
        if not found:
            return []
        boxes = [box for box, _ in found]
        points = self.landmarker.forward_many(frame, boxes)
        laid_out = [k for k, (p, box) in enumerate(zip(points, boxes)) if plausible(p, box)]
        verdicts = [False] * len(found)
        if laid_out:
            self.judged += len(laid_out)
            scores = self.embedding_scores(frame.bgr, [points[k] for k in laid_out])
            for k, s in zip(laid_out, scores):
                verdicts[k] = bool(s + found[k][1] > self.margin)
        return verdicts

    def confirm(self, frame: FrameViews, box: Box) -> bool:
        """A followed face's box that a detection missed still holds a face (an occluded face
        HOG does not find): judged afresh, with no detector score added."""
        with self._lock:  # the landmarker and embedder may be busy with a background detection
            return self.is_face(frame, box, 0.0)

    @property
    def refines_boxes(self) -> bool:
        return bool(getattr(self.detector, "refines_boxes", False))

    def forward(self, frame: FrameViews, settled: Sequence[Box] = ()) -> list[tuple[Box, float]]:
        """The detector's boxes that are faces; `settled` goes to a detector that refines
        its boxes (DlibHogDetector.forward)."""
        found = self.detector.forward(frame, settled) if settled else self.detector.forward(frame)
        return self._judged(frame, found)

    @property
    def looks_near(self) -> bool:
        """Its detector can look for faces near given boxes only (`forward_near`)."""
        return hasattr(self.detector, "forward_near")

    def forward_near(self, frame: FrameViews, boxes: Sequence[Box],
                     settled: Sequence[Box] = ()) -> list[tuple[Box, float]]:
        """The faces its detector finds again near `boxes` (DlibHogDetector.forward_near),
        judged as `forward` judges boxes (followed faces take their earlier verdicts)."""
        return self._judged(frame, self.detector.forward_near(frame, boxes, settled))  # type: ignore[attr-defined]

    def _judged(self, frame: FrameViews, found: list[tuple[Box, float]]) -> list[tuple[Box, float]]:
        """The boxes of `found` that are faces (remembered verdicts, the others judged now)."""
        with self._lock:  # a live run may detect in line while a background detection runs
            self._detections += 1
            now = self._detections
            # A box takes an earlier verdict where it can (never one made at this detection:
            # see _remembered); the others are judged together.
            verdicts = [self._remembered(box, now) for box, _ in found]
            fresh = [k for k, v in enumerate(verdicts) if v is None]
            for k, face in zip(fresh, self.are_faces(frame, [found[k] for k in fresh])):
                verdicts[k] = _Verdict(found[k][0], face, now, now)
                self._memory.append(verdicts[k])
            kept = []
            for (box, score), verdict in zip(found, verdicts):
                assert verdict is not None
                if verdict.face:
                    kept.append((box, score))
                else:
                    self.rejected += 1
                    log.debug("not a face: box %s (detector score %.2f)", box, score)
            self._memory = [v for v in self._memory if now - v.seen_at < FORGET_AFTER]
        return kept

    def _remembered(self, box: Box, now: int) -> _Verdict | None:
        """The verdict on this box from an earlier detection, still fresh; updated to `box`."""
        best, overlap = None, SAME_BOX_IOU
        for v in self._memory:
            if v.seen_at == now:
                continue  # already taken by another box of this detection
            o = iou(v.box, box)
            if o >= overlap:
                best, overlap = v, o
        if best is None:
            return None
        if now - best.judged_at >= (self.recheck if best.face else self.recheck_rejected):
            self._memory.remove(best)
            return None
        best.box, best.seen_at = box, now
        return best
