"""The per-frame measures of swap quality, on plain arrays (BGR uint8 frames, boxes in pixels).

Changed pixels are found on lightly blurred frames with a threshold above what an H.264
round trip at the clips' quality changes, so re-encoding alone changes nothing.
"""
from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np
import numpy.typing as npt

from tools.quality.truth import Box, clip_box, grow

Mask = npt.NDArray[np.bool_]
CHANGE_THRESHOLD = 12  # grey levels (any channel), after a 5x5 Gaussian blur of both frames
MIN_STRAY_AREA = 150  # px: a changed blob this large away from every face is a swap there
FACE_MARGIN = 1.6  # a face's box grown this much holds everything a swap of it may change
SEAM_BAND = 2  # px each side of a swapped region's border


def changed_mask(inp: np.ndarray, out: np.ndarray, threshold: int = CHANGE_THRESHOLD) -> Mask:
    """Where `out` differs visibly from `inp` (isolated pixels removed)."""
    a = cv2.GaussianBlur(inp, (5, 5), 0)
    b = cv2.GaussianBlur(out, (5, 5), 0)
    diff = cv2.absdiff(a, b).max(axis=2) > threshold
    opened = cv2.morphologyEx(diff.astype(np.uint8), cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
    return opened.astype(bool)


def interocular(landmarks: np.ndarray) -> float:
    """The inter-ocular distance of 68-point landmarks: between the eyes' outer corners (points
    36 and 45), as the 300-W benchmark (the point scheme and training set of dlib's predictor)
    normalises landmark errors. The distance between the eyes' centres (the inter-pupil
    distance) is about 0.72 of it."""
    return float(np.linalg.norm(landmarks[45] - landmarks[36]))


def landmark_shift(before: np.ndarray, after: np.ndarray) -> float:
    """Mean distance between corresponding landmarks, in units of `before`'s inter-ocular distance."""
    return float(np.linalg.norm(after - before, axis=1).mean() / max(interocular(before), 1e-6))


def grey(image: np.ndarray) -> npt.NDArray[np.float32]:
    return cv2.cvtColor(image, cv2.COLOR_BGR2GRAY).astype(np.float32)


def box_motion(prev: np.ndarray, cur: np.ndarray, box: Box) -> float | None:
    """Mean absolute grey-level change inside `box` from `prev` to `cur` (None if off-frame)."""
    x0, y0, x1, y1 = clip_box(box, (cur.shape[1], cur.shape[0]))
    if x1 <= x0 or y1 <= y0:
        return None
    return float(np.abs(grey(cur[y0:y1, x0:x1]) - grey(prev[y0:y1, x0:x1])).mean())


JITTER_BLUR = 1.0  # px (Gaussian sigma): what a re-encode or a sharper texture adds is not jitter
MIN_TRACKED = 8  # corners followed from one input frame to the next to trust the motion found


def face_motion(prev: np.ndarray, cur: np.ndarray, box: Box) -> npt.NDArray[np.float64] | None:
    """The motion of what is inside `box` from `prev` to `cur` (input frames): a 2x3 similarity
    (shift, scale, roll) fitted to corners followed by optical flow (checked backwards), or None
    where too few corners could be followed."""
    h, w = cur.shape[:2]
    x0, y0, x1, y1 = clip_box(box, (w, h))
    if x1 - x0 < 8 or y1 - y0 < 8:
        return None
    a, b = cv2.cvtColor(prev, cv2.COLOR_BGR2GRAY), cv2.cvtColor(cur, cv2.COLOR_BGR2GRAY)
    mask = np.zeros((h, w), np.uint8)
    mask[y0:y1, x0:x1] = 255
    corners = cv2.goodFeaturesToTrack(a, 200, 0.01, 3, mask=mask)
    if corners is None or len(corners) < MIN_TRACKED:
        return None
    fwd, ok1, _ = cv2.calcOpticalFlowPyrLK(a, b, corners, None, winSize=(15, 15), maxLevel=3)
    back, ok2, _ = cv2.calcOpticalFlowPyrLK(b, a, fwd, None, winSize=(15, 15), maxLevel=3)
    good = (ok1.ravel() == 1) & (ok2.ravel() == 1) & (np.linalg.norm(back - corners, axis=2).ravel() < 0.5)
    if good.sum() < MIN_TRACKED:
        return None
    m, inliers = cv2.estimateAffinePartial2D(corners[good], fwd[good], method=cv2.RANSAC,
                                             ransacReprojThreshold=1.0)
    if m is None or inliers is None or inliers.sum() < MIN_TRACKED:
        return None
    return m.astype(np.float64)


def compensated_change(prev: np.ndarray, cur: np.ndarray, motion: np.ndarray, box: Box) -> float | None:
    """Mean absolute grey-level difference inside `box` between `cur` and `prev` moved by
    `motion` (2x3, prev to cur): the change that motion does not explain (None if off-frame)."""
    x0, y0, x1, y1 = clip_box(box, (cur.shape[1], cur.shape[0]))
    if x1 <= x0 or y1 <= y0:
        return None
    shifted = motion.copy()
    shifted[:, 2] -= (x0, y0)  # straight into the box's own coordinates
    moved = cv2.warpAffine(grey(prev), shifted, (x1 - x0, y1 - y0), flags=cv2.INTER_LINEAR,
                           borderMode=cv2.BORDER_REPLICATE)
    here = grey(cur[y0:y1, x0:x1])
    moved = cv2.GaussianBlur(moved, (0, 0), JITTER_BLUR)
    here = cv2.GaussianBlur(here, (0, 0), JITTER_BLUR)
    return float(np.abs(here - moved).mean())


def changed_share(mask: Mask, box: Box) -> float:
    """The share of `box` (clipped to the frame) that changed; 0 for an off-frame box."""
    x0, y0, x1, y1 = clip_box(box, (mask.shape[1], mask.shape[0]))
    if x1 <= x0 or y1 <= y0:
        return 0.0
    return float(mask[y0:y1, x0:x1].mean())


def _largest_filled(mask: Mask) -> Mask:
    n, labels, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    if n <= 1:
        return np.zeros_like(mask)
    best = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    blob = (labels == best).astype(np.uint8)
    blob = cv2.morphologyEx(blob, cv2.MORPH_CLOSE, np.ones((7, 7), np.uint8))
    # Fill holes: whatever the border cannot reach from outside the blob belongs to it.
    padded = np.pad(blob, 1)
    flood = padded.copy()
    cv2.floodFill(flood, np.zeros((padded.shape[0] + 2, padded.shape[1] + 2), np.uint8), (0, 0), 1)
    return ((padded > 0) | (flood == 0))[1:-1, 1:-1]


def gradient(image: np.ndarray) -> npt.NDArray[np.float32]:
    g = grey(image)
    gx = cv2.Sobel(g, cv2.CV_32F, 1, 0, ksize=3)
    gy = cv2.Sobel(g, cv2.CV_32F, 0, 1, ksize=3)
    return np.sqrt(gx * gx + gy * gy)


def seam_strength(inp: np.ndarray, out: np.ndarray, box: Box) -> tuple[float, float] | None:
    """Mean gradient magnitude along the border of the swapped region around face `box`, in
    `out` and in `inp` at the same pixels; None where too little of the face changed."""
    h, w = inp.shape[:2]
    x0, y0, x1, y1 = clip_box(grow(box, FACE_MARGIN), (w, h))
    if x1 - x0 < 8 or y1 - y0 < 8:
        return None
    a, b = inp[y0:y1, x0:x1], out[y0:y1, x0:x1]
    region = _largest_filled(changed_mask(a, b))
    face_area = (box[2] - box[0]) * (box[3] - box[1])
    if region.sum() < 0.1 * face_area:
        return None
    kernel = np.ones((2 * SEAM_BAND + 1, 2 * SEAM_BAND + 1), np.uint8)
    r8 = region.astype(np.uint8)
    band = (cv2.dilate(r8, kernel) > 0) & ~(cv2.erode(r8, kernel) > 0)
    # Where the region runs into the edge of what we look at, its border is not a seam.
    edge = SEAM_BAND + 1
    band[:edge], band[-edge:], band[:, :edge], band[:, -edge:] = False, False, False, False
    if band.sum() < 20:
        return None
    return float(gradient(b)[band].mean()), float(gradient(a)[band].mean())


def faces_mask(shape: tuple[int, int], faces: Sequence[Box], margin: float = FACE_MARGIN) -> Mask:
    """True inside every face box grown by `margin`."""
    mask = np.zeros(shape, bool)
    for box in faces:
        x0, y0, x1, y1 = clip_box(grow(box, margin), (shape[1], shape[0]))
        mask[y0:y1, x0:x1] = True
    return mask


def stray_swaps(changed: Mask, faces: Sequence[Box], min_area: int = MIN_STRAY_AREA) -> list[Box]:
    """Boxes of the changed blobs that lie away from every face (swaps on something else).

    A blob that reaches into a face's grown box is that face's own swap (a swap may spill past
    the box, or lag behind a moving face): only blobs almost wholly away from faces count.
    """
    near = faces_mask(changed.shape, faces)
    n, labels, stats, _ = cv2.connectedComponentsWithStats(changed.astype(np.uint8), connectivity=8)
    blobs = []
    for i in range(1, n):
        x, y, bw, bh, area = (int(v) for v in stats[i])
        if area < min_area:
            continue
        blob = labels[y:y + bh, x:x + bw] == i
        if near[y:y + bh, x:x + bw][blob].mean() < 0.1:
            blobs.append((float(x), float(y), float(x + bw), float(y + bh)))
    return blobs


def occluder_overpaint(changed: Mask, faces: Sequence[Box], occluder: Box) -> float | None:
    """The share of an occluder's pixels in front of a face that the swap changed."""
    inside = faces_mask(changed.shape, faces, 1.0)
    x0, y0, x1, y1 = clip_box(occluder, (changed.shape[1], changed.shape[0]))
    part = np.zeros_like(inside)
    part[y0:y1, x0:x1] = True
    part &= inside
    if part.sum() < 50:
        return None
    return float(changed[part].mean())
