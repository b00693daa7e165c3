"""Measures read off a face's 68 landmarks: its size, how far it is turned, how open its
mouth is. The tracker, the swappers and the quality tools read them alike."""
from __future__ import annotations

import numpy as np

from engines.face import Landmarks68


def face_size(landmarks: Landmarks68) -> float:
    """Geometric mean of the landmarks' bounding-box sides: a scale that tolerates head turns."""
    span = landmarks.max(axis=0) - landmarks.min(axis=0)
    return float(np.sqrt(max(float(span[0]), 1.0) * max(float(span[1]), 1.0)))


def face_turn(landmarks: Landmarks68) -> float:
    """How far a face is turned sideways: 1 - the narrower half of the face over the wider,
    each half measured from the nose tip (30) to its jaw end (0, 16) along the eyes' axis.
    0 for a frontal face; near 1 once the far cheek is hidden (dlib then puts the far jaw
    line close to the nose). A degenerate set of points reads 0."""
    axis = landmarks[45] - landmarks[36]
    norm = float(np.linalg.norm(axis))
    if norm < 1e-6:
        return 0.0
    axis = axis / norm
    left = float(np.dot(landmarks[30] - landmarks[0], axis))
    right = float(np.dot(landmarks[16] - landmarks[30], axis))
    wider = max(left, right)
    if wider <= 1e-6:
        return 0.0
    return float(np.clip(1.0 - max(min(left, right), 0.0) / wider, 0.0, 1.0))


def mouth_open_ratio(landmarks: Landmarks68) -> float:
    """Inner-lip gap (points 62-66) over the mouth's width (48-54) or, when larger, the
    nose-to-chin distance (33-8). A head turned away narrows the mouth but not the lower
    face's height: over the width alone, parted lips on a face turned about 45 degrees read
    twice as open as on a frontal one, and the target's lips were kept as a jagged hole in
    the swap."""
    gap = float(np.linalg.norm(landmarks[66] - landmarks[62]))
    width = float(np.linalg.norm(landmarks[54] - landmarks[48]))
    height = float(np.linalg.norm(landmarks[8] - landmarks[33]))
    return gap / max(width, height, 1e-6)


def eye_open_ratio(landmarks: Landmarks68) -> float:
    """How open the eyes are: each eye's lid gap (37-41 and 38-40; 43-47 and 44-46) over its
    width (36-39; 42-45), the mean of the two eyes. About 0.25-0.35 open, under 0.1 shut."""
    ratios = []
    for a, b, c, d, left, right in ((37, 41, 38, 40, 36, 39), (43, 47, 44, 46, 42, 45)):
        gap = float(np.linalg.norm(landmarks[a] - landmarks[b]) + np.linalg.norm(landmarks[c] - landmarks[d])) / 2
        ratios.append(gap / max(float(np.linalg.norm(landmarks[right] - landmarks[left])), 1e-6))
    return float(np.mean(ratios))
