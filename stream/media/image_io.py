"""Still images in and out (source photos, reference faces, snapshots), BGR uint8 via OpenCV."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import cv2
import numpy as np

from stream.errors import SinkError, SourceError

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}


def is_image_path(path: str | os.PathLike[str]) -> bool:
    """Whether `path` names a still picture (by its suffix) rather than a video."""
    return Path(path).suffix.lower() in IMAGE_SUFFIXES


def read_image(path: str | os.PathLike[str]) -> np.ndarray:
    """Read a picture as an (H, W, 3) uint8 BGR array.

    Grey and alpha pictures are converted to BGR. Raises SourceError (one line naming the
    path) when the file is missing, a directory, unreadable, or not a picture OpenCV knows.
    """
    path = Path(path)
    if not path.exists():
        raise SourceError(f"image {str(path)!r}: no such file")
    if path.is_dir():
        raise SourceError(f"image {str(path)!r}: is a directory, not an image")
    try:
        # np.fromfile + imdecode rather than imread: non-ASCII paths work, and the two
        # failure kinds (I/O vs. format) stay apart.
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        raise SourceError(f"image {str(path)!r}: cannot be read ({exc.strerror or exc})") from exc
    image = cv2.imdecode(data, cv2.IMREAD_COLOR) if data.size else None
    if image is None:
        raise SourceError(f"image {str(path)!r}: not an image (or a corrupt one)")
    return image


def write_image(path: str | os.PathLike[str], image: np.ndarray) -> None:
    """Write an (H, W, 3) or (H, W) uint8 BGR picture; the extension picks the format.

    Raises SinkError (one line naming the path) for an unknown extension, a missing folder,
    a directory, or a file that cannot be written.
    """
    path = Path(path)
    if path.is_dir():
        raise SinkError(f"image {str(path)!r}: is a directory")
    if not path.parent.is_dir():
        raise SinkError(f"image {str(path)!r}: folder {str(path.parent)!r} does not exist")
    if not cv2.haveImageWriter(str(path)):
        raise SinkError(f"image {str(path)!r}: unknown image extension {path.suffix!r}")
    try:
        ok, encoded = cv2.imencode(path.suffix, image)
    except cv2.error as exc:
        raise SinkError(f"image {str(path)!r}: cannot encode ({str(exc).strip().splitlines()[-1]})") from exc
    if not ok:
        raise SinkError(f"image {str(path)!r}: cannot encode as {path.suffix!r}")
    try:
        encoded.tofile(path)
    except OSError as exc:
        raise SinkError(f"image {str(path)!r}: cannot be written ({exc.strerror or exc})") from exc
    log.debug("wrote %s (%s)", path, image.shape)
