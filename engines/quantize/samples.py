"""Calibration and held-out inputs: the faces of real pictures, found by the embedded default.

A model is calibrated on what the pipeline feeds it, so the faces are found as a run finds
them: dlib's HOG detector and 68 landmarks (no model file needed), on the pictures or video
frames given (the demo's pictures by default). Each face is then seen in several variants of
its picture (turned a little, scaled, shifted, lit differently), with its points moved by the
same transform, so a few faces give enough inputs.

Held-out inputs are never calibration inputs: whole faces (every third one found) are kept
apart, and where fewer than two faces are found, the held-out variants are other variants of
the same faces (the report says which).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from engines.face import Box, ImageBGR, Landmarks68

HELD_OUT_EVERY = 3  # every third face found is held out (faces 2, 5, 8 ...)


@dataclass(frozen=True)
class FaceSample:
    """One face in one picture: the picture, its box and 68 points, and which face it is."""

    image: ImageBGR
    box: Box
    points: Landmarks68
    face: int  # the index of the face found (variants of one face share it)


@dataclass(frozen=True)
class SampleSet:
    """Calibration and held-out inputs: faces (crop models) and whole pictures (detectors)."""

    calibration: list[FaceSample]
    held_out: list[FaceSample]
    calibration_frames: list[ImageBGR]
    held_out_frames: list[ImageBGR]
    faces_found: int
    held_out_faces: str  # how the held-out inputs differ from the calibration ones, in words


def find_faces(images: Sequence[ImageBGR], per_image: int = 12) -> list[FaceSample]:
    """The faces dlib finds in each picture (largest first, up to `per_image` a picture)."""
    from engines.dlib.detector import DlibHogDetector
    from engines.dlib.landmarker import DlibLandmarker
    from engines.frame_views import FrameViews

    detector = DlibHogDetector(max_side=2048, upsample=1, shared=True)
    landmarker = DlibLandmarker()
    found: list[FaceSample] = []
    for image in images:
        views = FrameViews(image)
        boxes = [box for box, _ in detector.forward(views)]
        boxes.sort(key=lambda b: (b[2] - b[0]) * (b[3] - b[1]), reverse=True)
        boxes = boxes[:per_image]
        for box, points in zip(boxes, landmarker.forward_many(views, boxes)):
            found.append(FaceSample(image, box, np.asarray(points, np.float32), len(found)))
    return found


def _variant(image: ImageBGR, rng: np.random.Generator) -> tuple[ImageBGR, np.ndarray]:
    """The picture turned (+-12 deg), scaled (0.8-1.2) and shifted about its centre, with its
    light and colour changed; returns it and the 2x3 transform of its points."""
    h, w = image.shape[:2]
    angle = float(rng.uniform(-12, 12))
    scale = float(rng.uniform(0.8, 1.2))
    m = cv2.getRotationMatrix2D((w / 2, h / 2), angle, scale)
    m[:, 2] += rng.uniform(-0.05, 0.05, 2) * (w, h)
    out = cv2.warpAffine(image, m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101)
    gain = rng.uniform(0.75, 1.25, 3).astype(np.float32) * np.float32(rng.uniform(0.8, 1.2))
    bias = np.float32(rng.uniform(-20, 20))
    lit = out.astype(np.float32) * gain + bias
    return np.clip(lit, 0, 255).astype(np.uint8), m


def _moved(sample: FaceSample, image: ImageBGR, m: np.ndarray) -> FaceSample:
    pts = sample.points.astype(np.float64) @ m[:, :2].T + m[:, 2]
    x0, y0, x1, y1 = sample.box
    corners = np.array([[x0, y0], [x1, y0], [x0, y1], [x1, y1]], np.float64) @ m[:, :2].T + m[:, 2]
    box = (float(corners[:, 0].min()), float(corners[:, 1].min()),
           float(corners[:, 0].max()), float(corners[:, 1].max()))
    return FaceSample(image, box, pts.astype(np.float32), sample.face)


def _variants(faces: list[FaceSample], count: int, rng: np.random.Generator) -> list[FaceSample]:
    """`count` faces: the originals first, then variants, taking the faces in turn."""
    if not faces:
        return []
    out = list(faces[:count])
    # One variant of each picture a round, shared by the faces in it (a group photo is
    # turned once for its six faces, not six times).
    made: dict[tuple[int, int], tuple[ImageBGR, np.ndarray]] = {}
    k = 0
    while len(out) < count:
        face = faces[k % len(faces)]
        key = (id(face.image), k // len(faces))
        if key not in made:
            made[key] = _variant(face.image, rng)
        out.append(_moved(face, *made[key]))
        k += 1
    return out


def sample_set(images: Sequence[ImageBGR], calibration: int, held_out: int, seed: int = 0) -> SampleSet:
    """Calibration and held-out inputs from these pictures (see the module doc). Raises
    ValueError when no face is found in any of them."""
    faces = find_faces(images)
    if not faces:
        raise ValueError("no face found")
    apart = [f for f in faces if f.face % HELD_OUT_EVERY == HELD_OUT_EVERY - 1]
    kept = [f for f in faces if f.face % HELD_OUT_EVERY != HELD_OUT_EVERY - 1]
    if apart and kept:
        how = f"{len({f.face for f in apart})} of the {len(faces)} faces found, never calibrated on"
        calib = _variants(kept, calibration, np.random.default_rng(seed))
        held = _variants(apart, held_out, np.random.default_rng(seed + 1))
    else:
        how = f"other variants of the {len(faces)} face(s) found (too few faces to hold one out)"
        calib = _variants(faces, calibration, np.random.default_rng(seed))
        # variants only: the originals are calibration inputs
        held = _variants(faces, held_out + len(faces), np.random.default_rng(seed + 1))[len(faces):]
    rng_c, rng_h = np.random.default_rng(seed + 2), np.random.default_rng(seed + 3)
    frames_c = list(images) + [_variant(images[i % len(images)], rng_c)[0]
                               for i in range(max(0, min(calibration, 16) - len(images)))]
    frames_h = [_variant(images[i % len(images)], rng_h)[0] for i in range(max(2, min(held_out, 8)))]
    return SampleSet(calib, held, frames_c[:max(calibration, 1)], frames_h, len(faces), how)
