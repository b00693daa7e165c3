"""How a face moved from one frame to the next, from the picture itself (optical flow).

Between detections a track's box used to follow the face's own 68 landmarks. The predictor
places them from the box it is given, so whatever pulls some of them pulls the box, and the
next frame's points with it: a cup crossing the mouth dragged a face's box off the head
within ten frames (and the swap with it), a strong edge beside a face moving fast left the
box behind it, and a face leaving the frame left its points clamped at the edge, swapped
where there was no face any more. The picture moves with the face, not with the points:
Lucas-Kanade flow of the inner points (brows, eyes, nose, mouth) from the last frame to
this one, checked forwards and backwards, and a similarity fitted to them with RANSAC,
gives the face's motion; points dragged by an occluder are outvoted. The box is moved by
it, and the predictor then places this frame's points in the moved box.
"""
from __future__ import annotations

import cv2
import numpy as np

from engines.face import Box, Landmarks68

# Every other point of the brows, nose, eyes and mouth (26 of them; the jaw line lies on the
# face's border, where the background moves): as good an estimate as all 51, at half the cost.
INNER = slice(17, 68, 2)
ALL_INNER = slice(17, 68)
MIN_POINTS = 10  # fewer followed points than this: no motion estimate
CRITERIA = (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 20, 0.03)


def face_motion(prev: np.ndarray, cur: np.ndarray, points: Landmarks68) -> np.ndarray | None:
    """The 2x3 similarity (rotation, scale, shift) taking the face at `points` in the grey
    frame `prev` to where it is in `cur`; None when too few of its points can be followed
    (no texture, the face gone or mostly out of the frame)."""
    followed = follow_face(prev, cur, points)
    return None if followed is None else followed[0]


def follow_face(prev: np.ndarray, cur: np.ndarray, points: Landmarks68, dense: bool = False
                ) -> tuple[np.ndarray, float] | None:
    """`face_motion`, and the share of the face's inner points that moved with it (followed
    both ways and within the fit's tolerance; points at the frame's edge not counted). A
    bare face's is 0.88-1.0 from frame to frame; something coming in front of it takes its
    points away (a bar entering a still face: 0.92, 0.85, 0.69, 0.62 over four frames, then
    0.4-0.5, where the fit to what is left turned the face by 3 degrees). `dense`: all 51
    inner points (for a face partly hidden: every other one left too few to follow once a
    bar covered more than half of a face)."""
    h, w = cur.shape[:2]
    x0, y0 = points.min(axis=0)
    x1, y1 = points.max(axis=0)
    size = float(max(x1 - x0, y1 - y0, 8.0))
    # Look half a face size around the face: room for fast motion (the pyramid's top level
    # follows a shift of several window sizes), little picture to build pyramids of.
    pad = size / 2
    rx0, ry0 = max(0, int(x0 - pad)), max(0, int(y0 - pad))
    rx1, ry1 = min(w, int(x1 + pad) + 1), min(h, int(y1 + pad) + 1)
    if rx1 - rx0 < 16 or ry1 - ry0 < 16:
        return None
    p0 = points[ALL_INNER if dense else INNER].astype(np.float32) - np.float32((rx0, ry0))
    inside = (p0[:, 0] >= 0) & (p0[:, 0] < rx1 - rx0 - 1) & (p0[:, 1] >= 0) & (p0[:, 1] < ry1 - ry0 - 1)
    p0 = p0[inside]
    if len(p0) < MIN_POINTS:
        return None
    a, b = prev[ry0:ry1, rx0:rx1], cur[ry0:ry1, rx0:rx1]
    win = int(np.clip(size * 0.15, 9, 31)) | 1
    kw = dict(winSize=(win, win), maxLevel=3, criteria=CRITERIA)
    p1, st1, _ = cv2.calcOpticalFlowPyrLK(a, b, p0.reshape(-1, 1, 2), None, **kw)
    if p1 is None:
        return None
    back, st2, _ = cv2.calcOpticalFlowPyrLK(b, a, p1, None, **kw)
    p1, back = p1.reshape(-1, 2), back.reshape(-1, 2)
    ok = (st1.ravel() == 1) & (st2.ravel() == 1)
    ok &= np.linalg.norm(back - p0, axis=1) < max(0.5, 0.02 * size)
    if int(ok.sum()) < MIN_POINTS:
        return None
    # Inliers within 1% of the face's size: points beside an occluder's edge move partly with
    # it (their window holds both), and at 3% they counted, so a cup crossing a still face's
    # mouth carried its box 2 px a frame after it (20 px in ten frames, enough for the face
    # filter to read no face there); the face's own points agree far closer than that.
    m, inliers = cv2.estimateAffinePartial2D(p0[ok], p1[ok], method=cv2.RANSAC,
                                             ransacReprojThreshold=max(1.0, 0.01 * size))
    if m is None or inliers is None or int(inliers.sum()) < MIN_POINTS:
        return None
    # The share counts only points a window or more inside the frame: at the frame's edge a
    # point's window leaves the picture and the flow loses it with nothing in front.
    moved = np.zeros(len(p0), bool)
    moved[np.flatnonzero(ok)[inliers.ravel() > 0]] = True
    at = p0 + np.float32((rx0, ry0))
    interior = (at[:, 0] >= win) & (at[:, 0] < w - win) & (at[:, 1] >= win) & (at[:, 1] < h - win)
    share = float(moved[interior].mean()) if int(interior.sum()) >= MIN_POINTS else 1.0
    # From crop coordinates to frame coordinates (both crops share the same offset).
    offset = np.array((rx0, ry0), np.float64)
    m[:, 2] += offset - m[:, :2] @ offset
    return m, share


def move_box(box: Box, m: np.ndarray) -> Box:
    """`box` (upright) moved by the similarity `m`: its centre mapped, its size scaled."""
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    nx, ny = m @ np.array((cx, cy, 1.0))
    scale = float(np.hypot(m[0, 0], m[1, 0]))
    hw, hh = (box[2] - box[0]) * scale / 2, (box[3] - box[1]) * scale / 2
    return (float(nx - hw), float(ny - hh), float(nx + hw), float(ny + hh))
