"""A face's pose and expression read off its 68 landmarks, as numbers two faces can be
compared by: how far it is turned sideways (signed yaw), up or down (pitch), and how open its
mouth is. No 3D model: ratios of landmark distances, measured in the face's own frame (along
and across the eyes' axis), so that roll, scale and position drop out.

The classical swapper compares a target face's pose with each source view's to pick the
view it warps (engines.classic.source_views)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engines.face import Landmarks68
from engines.geometry.measures import mouth_open_ratio

NOSE_TIP = 30


@dataclass(frozen=True)
class HeadPose:
    """`yaw` in [-1, 1]: 0 frontal, positive with the nose towards the picture's right (the
    face's right cheek, on the picture's left, seen wider); `pitch`: where the nose tip sits
    between the eyes' line (0) and the mouth's (1), about 0.5-0.6 on a level face, lower when
    the face looks up; `mouth`: engines.geometry.measures.mouth_open_ratio."""

    yaw: float
    pitch: float
    mouth: float


def head_pose(landmarks: Landmarks68) -> HeadPose:
    """The pose of the face with these 68 landmarks; degenerate points read (0, 0.5, 0)."""
    lm = np.asarray(landmarks, np.float64)
    axis = lm[45] - lm[36]
    norm = float(np.linalg.norm(axis))
    if norm < 1e-6 or not np.isfinite(lm).all():
        return HeadPose(0.0, 0.5, 0.0)
    axis /= norm
    down = np.array([-axis[1], axis[0]])  # the eyes' axis turned a quarter: towards the chin
    left = float(np.dot(lm[NOSE_TIP] - lm[0], axis))
    right = float(np.dot(lm[16] - lm[NOSE_TIP], axis))
    span = abs(left) + abs(right)
    yaw = float(np.clip((left - right) / span, -1.0, 1.0)) if span > 1e-6 else 0.0
    eyes = lm[36:48].mean(axis=0)
    mouth = lm[48:68].mean(axis=0)
    height = float(np.dot(mouth - eyes, down))
    pitch = float(np.dot(lm[NOSE_TIP] - eyes, down)) / height if height > 1e-6 else 0.5
    return HeadPose(yaw, pitch, mouth_open_ratio(lm.astype(np.float32)))
