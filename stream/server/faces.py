"""The faces a server offers: the operator's --source faces, shared by every visitor, and
the photos visitors upload, each its uploader's own (unless the operator shares them).

An entry keeps what a swap needs (the swapper's prepared source) and a thumbnail; the
photo itself is not kept. Uploads are counted in bytes and the oldest go first when the
library passes its budget, so its memory is bounded whatever visitors send.
"""
from __future__ import annotations

import dataclasses
import itertools
import secrets
from collections.abc import Collection
from dataclasses import dataclass, field

import cv2
import numpy as np

from stream.job.swap_job import PhotoFace

THUMB_SIDE = 160
MAX_UPLOADS = 64  # uploaded faces kept, all visitors together
MAX_LIBRARY_BYTES = 192 * 1024 * 1024  # uploaded faces' prepared sources and thumbnails

_order = itertools.count()


@dataclass
class FaceEntry:
    id: str
    name: str
    prepared: object  # the swapper's own prepared source
    thumb: bytes
    owner: str | None = None  # the visitor who uploaded it; None: one of the operator's faces
    faces_found: int = 1
    nbytes: int = 0
    order: int = field(default_factory=lambda: next(_order))
    note: str = ""  # said on the page beside the face (e.g. the photos an upload left out)

    @property
    def uploaded(self) -> bool:
        return self.owner is not None


def new_entry(face: PhotoFace, prepared: object, name: str, owner: str | None) -> FaceEntry:
    thumb = thumbnail(face)
    return FaceEntry(secrets.token_hex(6), name, prepared, thumb, owner, face.faces_found,
                     nbytes_of(prepared) + len(thumb))


class FaceLibrary:
    """The entries, who may see them, and the upload budget."""

    def __init__(self, share_uploads: bool = False, max_uploads: int = MAX_UPLOADS,
                 max_bytes: int = MAX_LIBRARY_BYTES) -> None:
        self.share_uploads = share_uploads
        self.max_uploads = max_uploads
        self.max_bytes = max_bytes
        self.entries: dict[str, FaceEntry] = {}
        self.default: str | None = None  # the operator's first face

    def add(self, entry: FaceEntry, in_use: Collection[str] = ()) -> list[FaceEntry]:
        """Add `entry`; returns the uploads evicted to stay within the budget (oldest
        first, never one of `in_use` nor the new one)."""
        self.entries[entry.id] = entry
        if self.default is None and not entry.uploaded:
            self.default = entry.id
        evicted = []
        for old in sorted(self.uploads(), key=lambda e: e.order):
            if len(self.uploads()) <= self.max_uploads and self.upload_bytes() <= self.max_bytes:
                break
            if old is not entry and old.id not in in_use:
                evicted.append(self.entries.pop(old.id))
        return evicted

    def uploads(self) -> list[FaceEntry]:
        return [e for e in self.entries.values() if e.uploaded]

    def upload_bytes(self) -> int:
        return sum(e.nbytes for e in self.entries.values() if e.uploaded)

    def visible(self, entry: FaceEntry, visitor: str | None) -> bool:
        return not entry.uploaded or self.share_uploads or (visitor is not None and entry.owner == visitor)

    def get(self, face_id: str, visitor: str | None) -> FaceEntry | None:
        """The entry, when `visitor` may use it (else None, as for an unknown id)."""
        entry = self.entries.get(face_id)
        return entry if entry is not None and self.visible(entry, visitor) else None

    def listed(self, visitor: str | None) -> list[FaceEntry]:
        return [e for e in self.entries.values() if self.visible(e, visitor)]

    def remove(self, face_id: str) -> None:
        self.entries.pop(face_id, None)


def thumbnail(face: PhotoFace) -> bytes:
    """A square JPEG around the chosen face (for the page's face picker)."""
    pts = np.asarray(face.landmarks, np.float32)
    (x0, y0), (x1, y1) = pts.min(0), pts.max(0)
    cx, cy, half = (x0 + x1) / 2, (y0 + y1) / 2, max(x1 - x0, y1 - y0) * 0.9
    h, w = face.image.shape[:2]
    a, b = int(max(0, cx - half)), int(max(0, cy - half))
    c, d = int(min(w, cx + half)), int(min(h, cy + half))
    crop = face.image[b:d, a:c] if d > b and c > a else face.image
    small = cv2.resize(crop, (THUMB_SIDE, THUMB_SIDE), interpolation=cv2.INTER_AREA)
    ok, data = cv2.imencode(".jpg", small, [cv2.IMWRITE_JPEG_QUALITY, 85])
    return data.tobytes() if ok else b""


def nbytes_of(obj: object) -> int:
    """The bytes of the arrays an object holds (a prepared source: dataclasses, tuples,
    lists and dicts of numpy arrays), each buffer once; other leaves count nothing."""
    seen: set[int] = set()

    def walk(item: object, depth: int) -> int:
        if isinstance(item, np.ndarray):
            root = item
            while isinstance(root.base, np.ndarray):  # a view holds its whole base
                root = root.base
            if id(root) in seen:
                return 0
            seen.add(id(root))
            return root.nbytes
        if depth > 8:
            return 0
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            parts: list[object] = [getattr(item, f.name) for f in dataclasses.fields(item)]
        elif isinstance(item, (tuple, list)):
            parts = list(item)
        elif isinstance(item, dict):
            parts = list(item.values())
        else:
            return 0
        return sum(walk(p, depth + 1) for p in parts)

    return walk(obj, 0)
