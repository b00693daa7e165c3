"""The faces a server offers: each photo's chosen face, its prepared form and a thumbnail."""
from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from stream.job.swap_job import PhotoFace

THUMB_SIDE = 160


@dataclass
class FaceEntry:
    id: str
    name: str
    face: PhotoFace
    prepared: object
    thumb: bytes
    uploaded: bool


def thumbnail(face: PhotoFace) -> bytes:
    """A square JPEG around the chosen face (for the page's face picker)."""
    pts = np.asarray(face.landmarks, np.float32)
    (x0, y0), (x1, y1) = pts.min(0), pts.max(0)
    cx, cy, half = (x0 + x1) / 2, (y0 + y1) / 2, max(x1 - x0, y1 - y0) * 0.9
    h, w = face.image.shape[:2]
    a, b = int(max(0, cx - half)), int(max(0, cy - half))
    c, d = int(min(w, cx + half)), int(min(h, cy + half))
    crop = face.image[b:d, a:c] if d > b and c > a else face.image
    crop = cv2.resize(crop, (THUMB_SIDE, THUMB_SIDE), interpolation=cv2.INTER_AREA)
    ok, data = cv2.imencode(".jpg", crop, [cv2.IMWRITE_JPEG_QUALITY, 85])
    return data.tobytes() if ok else b""
