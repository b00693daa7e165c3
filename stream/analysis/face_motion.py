"""How a face moved from one frame to the next, from the picture itself (optical flow).

Between detections a track's box used to follow the face's own 68 landmarks. The predictor
places them from the box it is given, so whatever pulls some of them pulls the box, and the
next frame's points with it: a cup crossing the mouth dragged a face's box off the head
within ten frames (and the swap with it), a strong edge beside a face moving fast left the
box behind it, and a face leaving the frame left its points clamped at the edge, swapped
where there was no face any more. The picture moves with the face, not with the points:
Lucas-Kanade flow of the inner points (brows, eyes, nose, mouth) from the last frame to
this one (followed back as well where any of them is in doubt), and a similarity fitted to
them with RANSAC, gives the face's motion; points dragged by an occluder are outvoted. The
box is moved by it, and the predictor then places this frame's points in the moved box.
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
FLOW_FACE = 100.0  # px: a face twice this size or more is followed on its crop scaled down
# A face at least this share of whose inner points the forward flow alone follows (and the
# fit keeps) is not followed backwards as well: nothing is in front of it. At 1, every one
# of them: on the quality suite's clips each preset's figures stay as they were (the
# occluder clip's `quality` distance 0.563 -> 0.564), and on the bench clips the backwards
# check runs on 0.1% of a face's frames (a third of the flow's cost).
SURE_SHARE = 1.0
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
    # A face of 2 x FLOW_FACE px or more is followed on its crop scaled down by a whole factor
    # k (to 100-200 px): the flow's cost grows with the face's area (a 200 px webcam face:
    # 4.2 ms a frame at full size, 1.9 ms at half), and the motion fitted to its 26 points
    # moves the face's centre to within 0.03 px of where the full size puts it (the one-face
    # bench clip). The crop is trimmed to a multiple of k, so each small pixel is the mean of
    # k x k whole ones (OpenCV's fast path for whole factors).
    k = int(size // FLOW_FACE)
    if k >= 2 and min(rx1 - rx0, ry1 - ry0) >= 16 * k:
        cw, ch = (rx1 - rx0) // k * k, (ry1 - ry0) // k * k
        a = cv2.resize(a[:ch, :cw], (cw // k, ch // k), interpolation=cv2.INTER_AREA)
        b = cv2.resize(b[:ch, :cw], (cw // k, ch // k), interpolation=cv2.INTER_AREA)
        scale = fx = fy = 1.0 / k
        q0 = ((p0 + 0.5) * np.float32(scale) - 0.5).astype(np.float32)  # pixel centres
    else:
        scale = fx = fy = 1.0
        q0 = p0
    fsize = size * scale
    win = int(min(max(fsize * 0.15, 9.0), 31.0)) | 1  # (np.clip on one number: 15 us a face a frame)
    kw = dict(winSize=(win, win), maxLevel=3, criteria=CRITERIA)
    q1, st1, _ = cv2.calcOpticalFlowPyrLK(a, b, q0.reshape(-1, 1, 2), None, **kw)
    if q1 is None:
        return None
    q1 = q1.reshape(-1, 2)
    tolerance = max(1.0, 0.01 * fsize)
    reach = win / scale  # the window, in frame pixels
    at = p0 + np.float32((rx0, ry0))
    interior = (at[:, 0] >= reach) & (at[:, 0] < w - reach) & (at[:, 1] >= reach) & (at[:, 1] < h - reach)
    fitted = None
    if not dense:
        # The forward flow alone first. Where all of a face's points move with it, nothing
        # is in front of it, and the check backwards (a third of the flow's cost) is left
        # out; where any is in doubt, it is done, as for a face partly hidden.
        ok = st1.ravel() == 1
        fitted = _fit(q0, q1, ok, tolerance)
        if fitted is not None and _share(fitted[1], interior) < SURE_SHARE:
            fitted = None
    if fitted is None:
        back, st2, _ = cv2.calcOpticalFlowPyrLK(b, a, q1.reshape(-1, 1, 2), None, **kw)
        back = back.reshape(-1, 2)
        ok = (st1.ravel() == 1) & (st2.ravel() == 1)
        ok &= np.linalg.norm(back - q0, axis=1) < max(0.5, 0.02 * fsize)
        fitted = _fit(q0, q1, ok, tolerance)
        if fitted is None:
            return None
    m, moved = fitted
    share = _share(moved, interior)
    if scale < 1.0:
        # From the scaled crop's pixels back to the crop's: m' = S^-1 m S, S the scaling.
        s3 = np.array([[fx, 0.0, 0.5 * fx - 0.5], [0.0, fy, 0.5 * fy - 0.5], [0.0, 0.0, 1.0]])
        m = (np.linalg.inv(s3) @ np.vstack([m, (0.0, 0.0, 1.0)]) @ s3)[:2]
    # From crop coordinates to frame coordinates (both crops share the same offset).
    offset = np.array((rx0, ry0), np.float64)
    m[:, 2] += offset - m[:, :2] @ offset
    return m, share


def _fit(q0: np.ndarray, q1: np.ndarray, ok: np.ndarray, tolerance: float
         ) -> tuple[np.ndarray, np.ndarray] | None:
    """The similarity fitted with RANSAC to the points `ok` says were followed (q0 -> q1), and
    which of all the points moved with it; None where fewer than MIN_POINTS did."""
    if int(ok.sum()) < MIN_POINTS:
        return None
    # Inliers within 1% of the face's size: points beside an occluder's edge move partly with
    # it (their window holds both), and at 3% they counted, so a cup crossing a still face's
    # mouth carried its box 2 px a frame after it (20 px in ten frames, enough for the face
    # filter to read no face there); the face's own points agree far closer than that.
    m, inliers = cv2.estimateAffinePartial2D(q0[ok], q1[ok], method=cv2.RANSAC, ransacReprojThreshold=tolerance)
    if m is None or inliers is None or int(inliers.sum()) < MIN_POINTS:
        return None
    moved = np.zeros(len(q0), bool)
    moved[np.flatnonzero(ok)[inliers.ravel() > 0]] = True
    return m, moved


def _share(moved: np.ndarray, interior: np.ndarray) -> float:
    """The share of the points a window or more inside the frame that moved with the face (at
    the frame's edge a point's window leaves the picture and the flow loses it with nothing in
    front); 1 where too few are inside."""
    inside = int(interior.sum())
    return float(moved[interior].sum()) / inside if inside >= MIN_POINTS else 1.0


def move_box(box: Box, m: np.ndarray) -> Box:
    """`box` (upright) moved by the similarity `m`: its centre mapped, its size scaled."""
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    nx, ny = m @ np.array((cx, cy, 1.0))
    scale = float(np.hypot(m[0, 0], m[1, 0]))
    hw, hh = (box[2] - box[0]) * scale / 2, (box[3] - box[1]) * scale / 2
    return (float(nx - hw), float(ny - hh), float(nx + hw), float(ny + hh))
