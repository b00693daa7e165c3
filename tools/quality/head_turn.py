"""A head turned sideways, made from one photo: the yaw-like warp the several-views
measurement uses for its turning clip and for the source's left and right views.

No 3D model: the head is taken as a vertical cylinder through the face's centre, of radius
`RADIUS` face widths. Turning it by `yaw` moves each column of the head from its angle on the
cylinder, asin(u), to that plus `yaw`: the near side widens, the far side is squeezed
towards the edge, the nose moves towards it. The warp fades out over the cylinder's last
fifth and above and below the head, so that hair, neck and background stay where they are.
The nose does not stand out of the cylinder, so this is a turn of 20-35 degrees seen
roughly, not a true profile: enough to move dlib's 68 points as a turned face moves them.

    turn_head(picture, face_box, 30.0) -> picture turned 30 degrees (nose to the right)
"""
from __future__ import annotations

import math

import cv2
import numpy as np

Box = tuple[float, float, float, float]
RADIUS = 0.8  # the cylinder's radius, in face-box widths
FADE = 0.2  # the share of the radius over which the turn fades out at the sides
HEAD_ABOVE, HEAD_BELOW = 0.7, 0.35  # the turned band: face-box heights above and below the box


def _weights(shape: tuple[int, int], box: Box) -> tuple[np.ndarray, np.ndarray, float, float]:
    h, w = shape
    x0, y0, x1, y1 = box
    cx, r = (x0 + x1) / 2, RADIUS * (x1 - x0)
    bh = y1 - y0
    ys = np.arange(h, dtype=np.float32)
    top, bottom = y0 - HEAD_ABOVE * bh, y1 + HEAD_BELOW * bh
    ramp = 0.25 * bh
    wy = np.clip(np.minimum((ys - (top - ramp)) / ramp, ((bottom + ramp) - ys) / ramp), 0, 1)
    u = (np.arange(w, dtype=np.float32) - cx) / r
    wx = np.clip((1 - np.abs(u)) / FADE, 0, 1)
    return wx, wy, cx, r


def turn_map(shape: tuple[int, int], box: Box, yaw: float) -> tuple[np.ndarray, np.ndarray]:
    """cv2.remap's maps: for each output pixel, where in the photo it comes from."""
    h, w = shape
    wx, wy, cx, r = _weights(shape, box)
    theta = math.radians(yaw)
    u = np.clip((np.arange(w, dtype=np.float32) - cx) / r, -1, 1)
    phi = np.clip(np.arcsin(u) - theta, -math.pi / 2, math.pi / 2)
    shift = (cx + r * np.sin(phi)) - np.arange(w, dtype=np.float32)  # (w,): the column it comes from
    map_x = np.arange(w, dtype=np.float32)[None, :] + (wy[:, None] * (wx * shift)[None, :])
    map_y = np.repeat(np.arange(h, dtype=np.float32)[:, None], w, axis=1)
    return map_x.astype(np.float32), map_y


def turn_head(picture: np.ndarray, box: Box, yaw: float) -> np.ndarray:
    """`picture` with the head around the face `box` turned by `yaw` degrees (positive: the
    nose to the picture's right)."""
    if abs(yaw) < 1e-6:
        return picture.copy()
    map_x, map_y = turn_map(picture.shape[:2], box, yaw)
    return cv2.remap(picture, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def turned_box(box: Box, yaw: float) -> Box:
    """Where the face box lies after the turn: its sides moved on the cylinder (their row
    at the box's middle), clipped to the cylinder."""
    x0, y0, x1, y1 = box
    cx, r = (x0 + x1) / 2, RADIUS * (x1 - x0)
    theta = math.radians(yaw)

    def moved(x: float) -> float:
        phi = math.asin(max(-1.0, min(1.0, (x - cx) / r))) + theta
        return cx + r * math.sin(max(-math.pi / 2, min(math.pi / 2, phi)))

    return (moved(x0), y0, moved(x1), y1)
