"""Five-point face alignment: the templates of the standard models and the similarity fit.

A template is five points (left eye, right eye, nose tip, left and right mouth corner)
at a reference crop size. The points are kept in float32 pixels at that size, exactly as
insightface stores `arcface_dst`, because its `estimate_norm` fits against those float32
values: keeping the same numbers (and the same arithmetic, see `_umeyama`) gives the same
matrix bit for bit, hence the same crops.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

import cv2
import numpy as np
import numpy.typing as npt

from engines.face import Face, ImageBGR, Landmarks68

Kps5: TypeAlias = npt.NDArray[np.floating]  # (5, 2) x, y in frame pixels
Affine: TypeAlias = npt.NDArray[np.float64]  # (2, 3) frame -> crop

# insightface's `arcface_dst`: the ArcFace template in pixels of a 112 crop.
ARCFACE_DST = np.array(
    [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366],
     [41.5493, 92.3655], [70.7299, 92.2041]], dtype=np.float32)


@dataclass(frozen=True, eq=False)
class AlignTemplate:
    """Five template points in float32 pixels of a `ref_size` square crop."""

    name: str
    points: npt.NDArray[np.float32]
    ref_size: int

    def normalized(self) -> npt.NDArray[np.float64]:
        """The points over the crop size (0..1), the form models.md lists."""
        return self.points.astype(np.float64) / self.ref_size

    def at_size(self, size: int) -> npt.NDArray[np.float32]:
        """The points in pixels of a `size` crop, computed as insightface does (float32)."""
        if size == self.ref_size:
            return self.points.copy()
        return self.points * np.float32(float(size) / self.ref_size)


TEMPLATES: dict[str, AlignTemplate] = {
    # ArcFace (112): insightface's arcface_dst itself.
    "arcface_112_v2": AlignTemplate("arcface_112_v2", ARCFACE_DST, 112),
    # inswapper_128: arcface_dst shifted right (x only) by 8 px in a 128 crop (insightface adds
    # the 8 in float32 after scaling by 128/128 = 1, so this array is bit-identical to its dst).
    "arcface_128": AlignTemplate("arcface_128", ARCFACE_DST + np.float32([8.0, 0.0]), 128),
    # SimSwap (256, 512): the older, symmetric ArcFace template (FaceFusion's arcface_112_v1).
    "arcface_112_v1": AlignTemplate("arcface_112_v1", (np.array(
        [[0.35473214, 0.45658929], [0.64526786, 0.45658929], [0.50000000, 0.61154464],
         [0.37913393, 0.77687500], [0.62086607, 0.77687500]], dtype=np.float64) * 112).astype(np.float32), 112),
    # GFPGAN, CodeFormer (512).
    "ffhq_512": AlignTemplate("ffhq_512", (np.array(
        [[0.37691676, 0.46864664], [0.62285697, 0.46912813], [0.50123859, 0.61331904],
         [0.39308822, 0.72541100], [0.61150205, 0.72490465]], dtype=np.float64) * 512).astype(np.float32), 512),
}


def get_template(template: str | AlignTemplate) -> AlignTemplate:
    """The template of that name; an unknown name is a ValueError listing the known ones."""
    if isinstance(template, AlignTemplate):
        return template
    try:
        return TEMPLATES[template]
    except KeyError:
        raise ValueError(f"unknown alignment template {template!r}; known: {', '.join(TEMPLATES)}") from None


def _umeyama(src: np.ndarray, dst: np.ndarray) -> npt.NDArray[np.float64]:
    """Least-squares similarity (rotation, uniform scale, translation) from src to dst, 3x3.

    The same operations in the same order (and the same dtypes: float32 points stay float32
    until the float64 result) as scikit-image's `_umeyama`, which insightface's
    `estimate_norm` calls through `SimilarityTransform.estimate`, so the matrices match
    exactly; scikit-image itself is not needed at run time.
    """
    num, dim = src.shape
    src_mean = src.mean(axis=0)
    dst_mean = dst.mean(axis=0)
    src_demean = src - src_mean
    dst_demean = dst - dst_mean
    a = dst_demean.T @ src_demean / num
    d = np.ones((dim,), dtype=np.float64)
    if np.linalg.det(a) < 0:
        d[dim - 1] = -1
    t = np.eye(dim + 1, dtype=np.float64)
    u, s, v = np.linalg.svd(a)
    tol = s.max() * np.max(a.shape) * np.finfo(float).eps
    rank = np.count_nonzero(s > tol)
    if rank == 0:
        return np.nan * t
    if rank == dim - 1:
        if np.linalg.det(u) * np.linalg.det(v) > 0:
            t[:dim, :dim] = u @ v
        else:
            keep = d[dim - 1]
            d[dim - 1] = -1
            t[:dim, :dim] = u @ np.diag(d) @ v
            d[dim - 1] = keep
    else:
        t[:dim, :dim] = u @ np.diag(d) @ v
    scale = 1.0 / src_demean.var(axis=0).sum() * (s @ d)
    t[:dim, dim] = dst_mean - scale * (t[:dim, :dim] @ src_mean.T)
    t[:dim, :dim] *= scale
    return t


def fit_similarity(source: npt.NDArray[np.floating], target: npt.NDArray[np.floating]
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Least-squares 2-D similarity (rotation, scale, shift) of `source` onto `target` points,
    in closed form: returns (L, mu_s, mu_t) with target ~ (source - mu_s) @ L + mu_t."""
    src, dst = source.astype(np.float64), target.astype(np.float64)
    mu_s, mu_t = src.mean(axis=0), dst.mean(axis=0)
    a, b = src - mu_s, dst - mu_t
    norm = float((a * a).sum())
    if norm <= 1e-9:
        return np.eye(2), mu_s, mu_t
    c = float((a * b).sum()) / norm
    s = float((a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]).sum()) / norm
    return np.array([[c, s], [-s, c]]), mu_s, mu_t


def estimate_norm(kps5: Kps5, size: int, template: str | AlignTemplate) -> Affine:
    """The 2x3 similarity transform (4 DOF) taking the five points onto the template at `size`.

    For arcface_112_v2 at 112 and arcface_128 at 128 this equals insightface's
    `face_align.estimate_norm(kps5, 112)` and `(kps5, 128)`. The keypoints' dtype is kept
    (insightface fits float32 detector points in float32). A degenerate point set (all
    points equal) is a ValueError.
    """
    kps = np.asarray(kps5)
    if kps.shape != (5, 2):
        raise ValueError(f"expected 5 keypoints of shape (5, 2), got {kps.shape}")
    dst = get_template(template).at_size(size)
    t = _umeyama(kps, dst)
    if not np.all(np.isfinite(t)):
        raise ValueError(f"keypoints {kps.tolist()} are degenerate: no similarity transform fits them")
    return t[0:2, :]


def warp_crop(image: ImageBGR, M: Affine, size: int) -> ImageBGR:
    """The `size` x `size` crop of `image` under M (bilinear, black outside), like norm_crop."""
    return cv2.warpAffine(image, M, (size, size), borderValue=0.0)


def kps5_from_landmarks68(landmarks: Landmarks68) -> npt.NDArray[np.float32]:
    """Five alignment points from dlib's 68: eye centres (36-41, 42-47), nose tip 30, mouth corners 48, 54.

    In image order, as the templates expect: the eye on the image's left comes first.
    """
    lm = np.asarray(landmarks, dtype=np.float32)
    return np.stack([lm[36:42].mean(axis=0), lm[42:48].mean(axis=0), lm[30], lm[48], lm[54]]).astype(np.float32)


def as_kps5(points: npt.NDArray[np.floating] | Face) -> npt.NDArray[np.floating]:
    """Five keypoints (5, 2): a face's own, or read off its (or the given) 68 landmarks."""
    if isinstance(points, Face):
        return points.kps5 if points.kps5 is not None else kps5_from_landmarks68(points.landmarks)
    pts = np.asarray(points)
    if pts.shape == (68, 2):
        return kps5_from_landmarks68(pts)
    if pts.shape != (5, 2):
        raise ValueError(f"expected 5 keypoints (5, 2) or 68 landmarks (68, 2), got shape {pts.shape}")
    return pts
