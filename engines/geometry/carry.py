"""A picture made for a face's landmarks on one frame, moved onto the same face's landmarks on
a later frame: how a swap made on an earlier frame is carried between the swaps (live runs
swap each face at a cadence, stream/stages/carry.py).

The map is piecewise affine on the 68 points plus anchors around them (a ring on the
picture's border, moved as the face moved as a whole), triangulated on the points *now*: its
triangles tile the destination's hull exactly once, so no pixel inside it is left empty or
drawn twice, whatever the face did since (a turn of the head or a mouth opened wide only
folds triangles on the side of the picture that is sampled, which repeats a few source
pixels and tears nothing). Each point lands exactly on its place now; between the points the
picture follows linearly. `tools/eval_quality.py --swap-every` measures what the carry costs.
"""
from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt

from engines.errors import EngineError
from engines.face import ImageBGR
from engines.geometry.face_align import fit_similarity
from engines.geometry.piecewise_affine import Points, prepare_mesh, prepare_triangulation, warp_maps

RING_SIDE = 4  # anchors along each side of the ring (corners included): 12 in all
# A swap whose face's points moved further than this since (beyond the face's motion as a
# whole: `residual`) is not carried: the face shows the target until its next swap.
MAX_RESIDUAL = 0.35


def ring(x0: float, y0: float, x1: float, y1: float) -> Points:
    """Anchors on the rectangle (x0, y0)-(x1, y1), RING_SIDE a side, corners once: (12, 2)."""
    t = np.linspace(0.0, 1.0, RING_SIDE)[:-1]
    top = np.stack([x0 + t * (x1 - x0), np.full_like(t, y0)], axis=1)
    right = np.stack([np.full_like(t, x1), y0 + t * (y1 - y0)], axis=1)
    bottom = np.stack([x1 - t * (x1 - x0), np.full_like(t, y1)], axis=1)
    left = np.stack([np.full_like(t, x0), y1 - t * (y1 - y0)], axis=1)
    return np.concatenate([top, right, bottom, left]).astype(np.float32)


def carry_warp(image: ImageBGR, then: Points, now: Points, size: tuple[int, int],
               planes: tuple[npt.NDArray[np.generic], ...] = ()
               ) -> tuple[ImageBGR, npt.NDArray[np.uint8], list[npt.NDArray[np.generic]]] | None:
    """`image` (laid out for the points `then`) warped so that each point lands on `now`, over
    a (w, h) picture: the warped image, `valid` (255 where a triangle covers the pixel) and
    each of `planes` (laid out as `image`) warped alike. None when the points `now` cannot be
    triangulated (collapsed or not finite)."""
    then = np.asarray(then, np.float32)
    now = np.asarray(now, np.float32)
    if then.shape != now.shape or not np.isfinite(then).all():
        return None
    w, h = size
    if np.array_equal(then, now) and image.shape[:2] == (h, w):
        # Not moved (a swap on the frame it was made for): the picture as it is, not resampled
        # (the map holds each sample inside its triangle's box, half a pixel off on its edges).
        return image, np.full((h, w), 255, np.uint8), list(planes)
    try:
        triangles = prepare_triangulation(now)
    except EngineError:
        return None
    mesh = prepare_mesh(image, then, triangles)
    map_x, map_y, labels, _ = warp_maps(mesh, now, size)
    warped = cv2.remap(image, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    moved = [cv2.remap(p, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE) for p in planes]
    return warped, cv2.compare(labels, 0, cv2.CMP_GT), moved


def similarity(then: Points, now: Points) -> npt.NDArray[np.float64]:
    """The rotation, scale and shift (2x3) that best takes the points `then` to `now` (least
    squares, in closed form): how the face moved as a whole."""
    L, mu_then, mu_now = fit_similarity(np.asarray(then, np.float64), np.asarray(now, np.float64))
    m = np.empty((2, 3))
    m[:, :2] = L.T  # now ~ (then - mu_then) @ L + mu_now
    m[:, 2] = mu_now - mu_then @ L
    return m


def residual(then: Points, now: Points) -> float:
    """How far the points moved beyond the face's motion as a whole (`similarity`): their
    mean distance from where that motion alone puts them, over the face's size then. A turn
    of the head or an opened mouth reads a few hundredths to a few tenths; another face read
    as this one, far more."""
    then = np.asarray(then, np.float64)
    now = np.asarray(now, np.float64)
    m = similarity(then, now)
    moved = then @ m[:, :2].T + m[:, 2]
    span = then.max(axis=0) - then.min(axis=0)
    size = float(np.sqrt(max(span[0], 1.0) * max(span[1], 1.0)))
    return float(np.linalg.norm(moved - now, axis=1).mean() / size)
