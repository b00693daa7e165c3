"""One output clip against its input clip and source photo: the figures of tools/eval_quality.py.

`Reference` holds what depends only on the source photo and the input clip (the source's
embedding, each sampled input face's landmarks, embedding and distance), so one input is
measured once against the outputs of several configs.
"""
from __future__ import annotations

import statistics
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import av
import cv2
import dlib  # type: ignore[import-untyped]
import numpy as np

from engines.dlib.embedder import SAME_PERSON, DlibEmbedder
from engines.dlib.landmarker import DlibLandmarker
from engines.frame_views import FrameViews
from engines.geometry.measures import face_turn
from tools.quality import metrics
from tools.quality.truth import Box, ClipTruth, FrameTruth, grow, visible

MIN_VISIBLE = 0.9  # a face less inside the frame than this is not measured for identity
MIN_SIDE = 24  # px: smaller faces are not measured (their landmarks mean nothing)
SWAPPED_SHARE = 0.3  # a face whose inner box changed this much was swapped
# "Moved closer": the face was swapped and its distance went down by more than an H.264
# round trip moves an untouched face's (at 40 px, re-encoding alone moves it by 0.05 and more).
CLOSER_MARGIN = 0.02
# The landmarks' own uncertainty: how far dlib's 68 points on the unchanged input move when
# the face's box moves by this share of its size (left, right, up, down, larger, smaller).
# The predictor depends on its box, on a turned face several times more than on a frontal
# one, and facestream's detector boxes differ from the ground truth's by up to 17% (small clip).
BOX_JITTER = 0.05


class MeasureError(Exception):
    """Bad input to the instrument (a file that cannot be read, clips that do not match)."""


def read_frames(path: str | Path) -> Iterator[np.ndarray]:
    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, OSError) as exc:
        raise MeasureError(f"{path}: cannot open the video ({exc})") from exc
    with container:
        if not container.streams.video:
            raise MeasureError(f"{path}: no video stream in it")
        try:
            for frame in container.decode(video=0):
                yield frame.to_ndarray(format="bgr24")
        except av.error.FFmpegError as exc:
            raise MeasureError(f"{path}: cannot decode the video ({exc})") from exc


@dataclass
class FaceSample:
    landmarks: np.ndarray
    embedding: np.ndarray
    distance: float
    arc_distance: float | None = None
    box_noise: float = 0.0  # landmark shift from moving the box by BOX_JITTER (inter-ocular units)


class Models:
    """dlib's detector, 68-point landmarks and embedding; ArcFace when given its file."""

    def __init__(self, arcface_path: Path | None = None) -> None:
        self.detector = dlib.get_frontal_face_detector()
        self.landmarker = DlibLandmarker()
        self.embedder = DlibEmbedder()
        self.arcface = None
        if arcface_path is not None:
            from engines.backends.ort import OrtRuntime
            from engines.models.arcface import ArcFaceEmbedder

            self.arcface = ArcFaceEmbedder(OrtRuntime(arcface_path))

    def detect(self, image: np.ndarray, upsample: int = 1) -> list[Box]:
        grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
        rects = self.detector(grey, upsample)
        return [(float(r.left()), float(r.top()), float(r.right() + 1), float(r.bottom() + 1)) for r in rects]

    def landmarks(self, image: np.ndarray, box: Box) -> np.ndarray:
        return self.landmarker.forward(FrameViews(image), box)

    def embed(self, image: np.ndarray, landmarks: np.ndarray) -> np.ndarray:
        return self.embedder.forward(image, landmarks)

    def arc_embed(self, image: np.ndarray, landmarks: np.ndarray) -> np.ndarray | None:
        return None if self.arcface is None else self.arcface.forward(image, landmarks)

    def arc_distance(self, a: np.ndarray | None, b: np.ndarray | None) -> float | None:
        if self.arcface is None or a is None or b is None:
            return None
        return self.arcface.distance(a, b)


@dataclass
class FaceFigures:
    """One face of a clip across its samples: which faces miss a goal, and how turned they are.

    `face` is the face's place in the ground truth's list (without ground truth: in dlib's
    detections of each frame, which need not be the same person from frame to frame)."""

    face: int
    samples: int
    dist_before: float
    dist_after: float
    landmark_shift: float
    shift_noise: float  # FaceSample.box_noise, averaged: a shift this small is within it
    turn: float  # engines.classic.blend.face_turn of the input's landmarks, averaged
    width: float  # px, the face box's, averaged


@dataclass
class QualityReport:
    """The figures for one output clip (None where nothing could be measured)."""

    clip: str
    config: str
    frames: int
    faces: int  # face samples measured for identity
    dist_before: float | None = None
    dist_after: float | None = None
    closer: float | None = None  # share of face samples swapped and 0.02 or more closer
    under: float | None = None  # share of face samples under dlib's 0.6 after the swap
    arc_before: float | None = None
    arc_after: float | None = None
    arc_closer: float | None = None
    swapped: float | None = None  # share of face samples whose face changed at all
    landmark_shift: float | None = None  # input's to output's landmarks, inter-ocular units
    shift_noise: float | None = None  # the input's own landmarks under a 5% move of the box
    flicker: float | None = None  # output's frame-to-frame change in face boxes / input's
    # What the input's own motion does not explain: each frame against the previous one moved
    # by the motion the input shows in the face box, output / input (1.0: no added jitter).
    jitter: float | None = None
    seam: float | None = None  # gradient along the swapped region's border: output / input
    nonface_swaps: int = 0  # changed blobs away from every face, summed over frames
    patch_hits: dict[str, int] = field(default_factory=dict)  # frames each named non-face was changed
    occluder_overpaint: float | None = None  # share of occluder pixels in front of a face changed
    per_face: list[FaceFigures] = field(default_factory=list)  # by face, in the truth's order


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


class Reference:
    """The source photo and an input clip, measured once."""

    def __init__(self, models: Models, source: np.ndarray, input_path: str | Path,
                 truth: ClipTruth | None = None, sample_every: int = 5, name: str = "") -> None:
        self.models = models
        self.input_path = Path(input_path)
        self.name = name or self.input_path.stem
        self.sample_every = sample_every
        boxes = models.detect(source)
        if not boxes:
            raise MeasureError("the source photo: no face found in it")
        box = max(boxes, key=lambda b: (b[2] - b[0]) * (b[3] - b[1]))
        lm = models.landmarks(source, box)
        self.source_embedding = models.embed(source, lm)
        self.source_arc = models.arc_embed(source, lm)
        self.truth: list[FrameTruth] = []
        self.samples: dict[tuple[int, int], FaceSample] = {}
        for i, frame in enumerate(read_frames(self.input_path)):
            ft = truth.frames[i] if truth and i < len(truth.frames) else FrameTruth(tuple(models.detect(frame)))
            self.truth.append(ft)
            if i % sample_every == 0:
                self._sample(i, frame, ft)
        if truth is not None and len(truth.frames) != len(self.truth):
            raise MeasureError(f"{self.input_path}: {len(self.truth)} frames but its ground truth has "
                               f"{len(truth.frames)}")

    def measurable(self, frame: np.ndarray, box: Box) -> bool:
        return (visible(box, (frame.shape[1], frame.shape[0])) >= MIN_VISIBLE
                and min(box[2] - box[0], box[3] - box[1]) >= MIN_SIDE)

    def _sample(self, i: int, frame: np.ndarray, ft: FrameTruth) -> None:
        for k, box in enumerate(ft.faces):
            if not self.measurable(frame, box):
                continue
            lm = self.models.landmarks(frame, box)
            emb = self.models.embed(frame, lm)
            arc = self.models.arc_embed(frame, lm)
            noise = statistics.fmean(metrics.landmark_shift(lm, self.models.landmarks(frame, moved))
                                     for moved in jittered(box, BOX_JITTER))
            self.samples[(i, k)] = FaceSample(
                lm, emb, self.models.embedder.distance(self.source_embedding, emb),
                self.models.arc_distance(self.source_arc, arc), noise)

    def compare(self, output_path: str | Path, config: str = "") -> QualityReport:
        """The figures for `output_path`, a swap of this input (same frame count)."""
        before: list[float] = []
        after: list[float] = []
        arc_before: list[float] = []
        arc_after: list[float] = []
        shifts: list[float] = []
        swapped: list[float] = []
        arc_swapped: list[bool] = []
        flicker_out = flicker_in = 0.0
        jitter_out = jitter_in = 0.0
        seam_out: list[float] = []
        seam_in: list[float] = []
        strays = 0
        hits: dict[str, int] = {}
        overpaint: list[float] = []
        noises: list[float] = []
        # face -> (distance before, after, shift, shift noise, turn, width) of each of its samples
        by_face: dict[int, list[tuple[float, float, float, float, float, float]]] = {}
        prev_in: np.ndarray | None = None
        prev_out: np.ndarray | None = None
        n = 0
        inputs = read_frames(self.input_path)
        for i, out in enumerate(read_frames(output_path)):
            inp = next(inputs, None)
            if inp is None or i >= len(self.truth):
                raise MeasureError(f"{output_path}: more frames than the input's {len(self.truth)}")
            if inp.shape != out.shape:
                raise MeasureError(f"{output_path}: frames of {out.shape[1]}x{out.shape[0]}, the input's are "
                                   f"{inp.shape[1]}x{inp.shape[0]}")
            n += 1
            ft = self.truth[i]
            changed = metrics.changed_mask(inp, out)
            for k, box in enumerate(ft.faces):
                if prev_in is not None and prev_out is not None:
                    m_in, m_out = metrics.box_motion(prev_in, inp, box), metrics.box_motion(prev_out, out, box)
                    if m_in is not None and m_out is not None:
                        flicker_in += m_in
                        flicker_out += m_out
                    motion = metrics.face_motion(prev_in, inp, box)
                    if motion is not None:
                        j_in = metrics.compensated_change(prev_in, inp, motion, box)
                        j_out = metrics.compensated_change(prev_out, out, motion, box)
                        if j_in is not None and j_out is not None:
                            jitter_in += j_in
                            jitter_out += j_out
                sample = self.samples.get((i, k))
                if sample is None:
                    continue
                was_swapped = metrics.changed_share(changed, grow(box, 0.6)) >= SWAPPED_SHARE
                swapped.append(1.0 if was_swapped else 0.0)
                lm = self.models.landmarks(out, box)
                d = self.models.embedder.distance(self.source_embedding, self.models.embed(out, lm))
                before.append(sample.distance)
                after.append(d)
                arc = self.models.arc_distance(self.source_arc, self.models.arc_embed(out, lm))
                if sample.arc_distance is not None and arc is not None:
                    arc_before.append(sample.arc_distance)
                    arc_after.append(arc)
                    arc_swapped.append(was_swapped)
                shift = metrics.landmark_shift(sample.landmarks, lm)
                shifts.append(shift)
                noises.append(sample.box_noise)
                by_face.setdefault(k, []).append((sample.distance, d, shift, sample.box_noise,
                                                  face_turn(sample.landmarks), box[2] - box[0]))
                if was_swapped:
                    seam = metrics.seam_strength(inp, out, box)
                    if seam is not None:
                        seam_out.append(seam[0])
                        seam_in.append(seam[1])
            for blob in metrics.stray_swaps(changed, ft.faces):
                strays += 1
                for patch in ft.nonfaces:
                    if _overlap(blob, patch.box):
                        hits[patch.kind] = hits.get(patch.kind, 0) + 1
            for occ in ft.occluders:
                share = metrics.occluder_overpaint(changed, ft.faces, occ.box)
                if share is not None:
                    overpaint.append(share)
            prev_in, prev_out = inp, out
        if n != len(self.truth):
            raise MeasureError(f"{output_path}: {n} frames, the input has {len(self.truth)}")
        pairs = list(zip(before, after))
        arc_pairs = list(zip(arc_before, arc_after))
        return QualityReport(
            clip=self.name, config=config, frames=n, faces=len(pairs),
            dist_before=_mean(before), dist_after=_mean(after),
            closer=_mean([1.0 if w and a < b - CLOSER_MARGIN else 0.0 for (b, a), w in zip(pairs, swapped)]),
            under=_mean([1.0 if a < SAME_PERSON else 0.0 for a in after]),
            arc_before=_mean(arc_before), arc_after=_mean(arc_after),
            arc_closer=_mean([1.0 if w and a < b - CLOSER_MARGIN else 0.0
                              for (b, a), w in zip(arc_pairs, arc_swapped)]),
            swapped=_mean(swapped), landmark_shift=_mean(shifts), shift_noise=_mean(noises),
            flicker=(flicker_out / flicker_in if flicker_in > 0 else (1.0 if flicker_out == 0 else None)),
            jitter=(jitter_out / jitter_in if jitter_in > 0 else (1.0 if jitter_out == 0 else None)),
            seam=(sum(seam_out) / sum(seam_in) if seam_in and sum(seam_in) > 0 else None),
            nonface_swaps=strays, patch_hits=hits,
            occluder_overpaint=_mean(overpaint),
            per_face=[FaceFigures(k, len(rows), *(float(v) for v in np.mean(rows, axis=0)))
                      for k, rows in sorted(by_face.items())])


def jittered(box: Box, share: float) -> list[Box]:
    """`box` moved by `share` of its width left and right, of its height up and down, and
    grown and shrunk by `share` about its centre."""
    x0, y0, x1, y1 = box
    w, h = x1 - x0, y1 - y0
    dx, dy = share * w, share * h
    gx, gy = share * w / 2, share * h / 2
    return [(x0 - dx, y0, x1 - dx, y1), (x0 + dx, y0, x1 + dx, y1), (x0, y0 - dy, x1, y1 - dy),
            (x0, y0 + dy, x1, y1 + dy), (x0 - gx, y0 - gy, x1 + gx, y1 + gy), (x0 + gx, y0 + gy, x1 - gx, y1 - gy)]


def _overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
