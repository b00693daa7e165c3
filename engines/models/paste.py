"""Paste-back helpers the neural swapper and the enhancer share: insightface's soft paste
mask (a white square warped back into the frame, thresholded, eroded and blurred), and the
frame rectangle a paste can change, so that only that region is warped and blended."""
from __future__ import annotations

import functools
import math

import cv2
import numpy as np

from engines.geometry.face_align import Affine

MASK_THRESHOLD = 20.0  # insightface: warped white above this counts as inside the crop
COLUMN_ALIGN = 32  # floats: two AVX-512 vectors


def paste_region(frame_shape: tuple[int, ...], M: Affine, crop_size: int) -> tuple[int, int, int, int] | None:
    """The frame rectangle (x0, y0, x1, y1) that insightface's paste-back of a crop of
    `crop_size` px (warped out of the frame by M) can change.

    The inverse-warped crop is non-zero where M maps a pixel into (-1, crop_size) (bilinear
    support); the soft mask reaches a blur radius (at most max(size // 20, 5)) past it.
    None when that rectangle misses the frame.
    """
    h, w = frame_shape[:2]
    IM = cv2.invertAffineTransform(M)
    lo, hi = -1.0, float(crop_size)
    corners = np.array([[lo, lo, 1.0], [hi, lo, 1.0], [lo, hi, 1.0], [hi, hi, 1.0]]) @ IM.T
    fx0, fy0 = np.floor(corners.min(axis=0)) - 1
    fx1, fy1 = np.ceil(corners.max(axis=0)) + 2
    # An upper bound of insightface's mask_size gives an upper bound of its blur radius.
    size_bound = int(math.sqrt(max(fx1 - fx0, 0.0) * max(fy1 - fy0, 0.0)))
    margin = max(size_bound // 20, 5) + 2
    x0, y0 = max(int(fx0) - margin, 0), max(int(fy0) - margin, 0)
    x1, y1 = min(int(fx1) + margin, w), min(int(fy1) + margin, h)
    # Columns on multiples of COLUMN_ALIGN, as in the frame: OpenCV's float blur runs SIMD
    # over whole vectors from a row's start and plain code on its tail, whose sums can
    # differ in the last bit, so a region cut elsewhere can round a pixel differently
    # from insightface's full-frame blur. (That keeps the region paste exact where this
    # CPU's code allows it; what holds on every CPU is region_warp.BOUND.)
    x0 -= x0 % COLUMN_ALIGN
    x1 = min(-(-x1 // COLUMN_ALIGN) * COLUMN_ALIGN, w)
    if x1 <= x0 or y1 <= y0:
        return None
    return x0, y0, x1, y1


def rects_meet(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    """Whether two frame rectangles (x0, y0, x1, y1) share a pixel."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@functools.lru_cache(maxsize=8)
def white_square(size: int) -> np.ndarray:
    """A read-only size x size float32 square of 255: warped back with a crop, it marks
    where the crop lands."""
    white = np.full((size, size), 255, dtype=np.float32)
    white.flags.writeable = False  # shared: only ever a warp's source
    return white


def prepare_paste_mask(mask: np.ndarray) -> np.ndarray | None:
    """insightface's soft paste mask from its warped white square (`white_square` put through the
    face's paste warp; float32, region-sized, modified in place).

    The warped white square is thresholded, eroded by a tenth of the face's size and
    blurred by a twentieth, then scaled to 0..1 (float32, region-sized). None when no
    pixel of the crop is fully inside the region.
    """
    mask[mask > MASK_THRESHOLD] = 255
    rows, cols = np.where(mask == 255)
    if rows.size == 0:
        return None
    mask_size = int(np.sqrt((rows.max() - rows.min()) * (cols.max() - cols.min())))
    k = max(mask_size // 10, 10)
    mask = cv2.erode(mask, np.ones((k, k), np.uint8), iterations=1)
    k = max(mask_size // 20, 5)
    mask = cv2.GaussianBlur(mask, (2 * k + 1, 2 * k + 1), 0)
    mask /= 255
    return mask
