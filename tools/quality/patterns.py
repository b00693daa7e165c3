"""Face-like patterns and occluders for the quality clips, drawn in code or cut from
scikit-image's pictures. Each is BGRA: alpha 255 where the pattern is."""
from __future__ import annotations

import cv2
import numpy as np


def _skimage(name: str) -> np.ndarray:
    from skimage import data

    return cv2.cvtColor(getattr(data, name)(), cv2.COLOR_RGB2BGR)


def _with_oval(picture: np.ndarray, soft: float = 0.06) -> np.ndarray:
    h, w = picture.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w]
    r = np.hypot((xx - (w - 1) / 2) / (w / 2), (yy - (h - 1) / 2) / (h / 2))
    alpha = (np.clip((1 - r) / soft, 0, 1) * 255).astype(np.uint8)
    return np.dstack([picture, alpha])


def smiley(size: int) -> np.ndarray:
    """A yellow disc with two eyes and a smile, outlined (a sticker)."""
    pic = np.zeros((size, size, 4), np.uint8)
    c, r = size // 2, size // 2 - 2
    cv2.circle(pic, (c, c), r, (30, 200, 245, 255), -1, cv2.LINE_AA)
    cv2.circle(pic, (c, c), r, (20, 60, 90, 255), 2, cv2.LINE_AA)
    for ex in (c - size // 6, c + size // 6):
        cv2.ellipse(pic, (ex, c - size // 8), (size // 18, size // 9), 0, 0, 360, (25, 25, 25, 255), -1, cv2.LINE_AA)
    cv2.ellipse(pic, (c, c + size // 12), (size // 4, size // 6), 0, 20, 160, (25, 25, 25, 255),
                max(2, size // 30), cv2.LINE_AA)
    return pic


def cartoon_face(width: int, height: int) -> np.ndarray:
    """A printed cartoon face: a skin-toned oval with hair, brows, eyes, a nose shadow and lips."""
    pic = np.zeros((height, width, 4), np.uint8)
    cx, cy = width // 2, height // 2
    ax, ay = width // 2 - 3, height // 2 - 3
    cv2.ellipse(pic, (cx, cy), (ax, ay), 0, 0, 360, (120, 160, 215, 255), -1, cv2.LINE_AA)
    cv2.ellipse(pic, (cx, cy - ay // 2), (ax, ay // 2), 0, 180, 360, (30, 45, 70, 255), -1, cv2.LINE_AA)
    eye_y = cy - height // 12
    for ex in (cx - width // 5, cx + width // 5):
        cv2.line(pic, (ex - width // 10, eye_y - height // 12), (ex + width // 10, eye_y - height // 12),
                 (40, 50, 70, 255), max(2, height // 30), cv2.LINE_AA)
        cv2.ellipse(pic, (ex, eye_y), (width // 10, height // 28), 0, 0, 360, (235, 235, 235, 255), -1, cv2.LINE_AA)
        cv2.circle(pic, (ex, eye_y), max(2, height // 30), (40, 30, 30, 255), -1, cv2.LINE_AA)
    nose = np.array([[cx, eye_y + 4], [cx - width // 14, cy + height // 8], [cx + width // 14, cy + height // 8]])
    cv2.polylines(pic, [nose], False, (80, 110, 160, 255), 2, cv2.LINE_AA)
    cv2.ellipse(pic, (cx, cy + height // 4), (width // 6, height // 20), 0, 0, 360, (70, 70, 170, 255), -1, cv2.LINE_AA)
    return pic


def cat_print(width: int) -> np.ndarray:
    """scikit-image's cat (chelsea), its face cut out in an oval."""
    face = _skimage("chelsea")[0:300, 70:410]
    height = int(round(width * face.shape[0] / face.shape[1]))
    return _with_oval(cv2.resize(face, (width, height), interpolation=cv2.INTER_AREA))


def coffee_cup(width: int) -> np.ndarray:
    """scikit-image's coffee cup on its saucer, cut out in an oval."""
    cup = _skimage("coffee")[0:400, 40:520]
    height = int(round(width * cup.shape[0] / cup.shape[1]))
    return _with_oval(cv2.resize(cup, (width, height), interpolation=cv2.INTER_AREA), soft=0.03)
