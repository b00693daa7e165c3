"""Still images in and out (source photos, reference faces, snapshots, the target of a picture
run) via OpenCV; outputs are written atomically."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import cv2
import numpy as np

from stream.errors import SinkError, SourceError
from stream.media.atomic import write_bytes
from stream.media.picture import Picture

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}

# one process may write several pictures at once (server snapshots): the pid alone is not enough


def is_image_path(path: str | os.PathLike[str]) -> bool:
    """Whether `path` names a still picture (by its suffix) rather than a video."""
    return Path(path).suffix.lower() in IMAGE_SUFFIXES


def _read_bytes(path: Path) -> np.ndarray:
    if not path.exists():
        raise SourceError(f"image {str(path)!r}: no such file")
    if path.is_dir():
        raise SourceError(f"image {str(path)!r}: is a directory, not an image")
    try:
        # np.fromfile + imdecode rather than imread: non-ASCII paths work, and the two
        # failure kinds (I/O vs. format) stay apart.
        return np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        raise SourceError(f"image {str(path)!r}: cannot be read ({exc.strerror or exc})") from exc


def _decode(path: Path, data: np.ndarray, flags: int) -> np.ndarray:
    image = cv2.imdecode(data, flags) if data.size else None
    if image is None:
        raise SourceError(f"image {str(path)!r}: not an image (or a corrupt one)")
    return image


def read_image(path: str | os.PathLike[str]) -> np.ndarray:
    """Read a picture as an (H, W, 3) uint8 BGR array.

    Grey and alpha pictures are converted to BGR. Raises SourceError (one line naming the
    path) when the file is missing, a directory, unreadable, or not a picture OpenCV knows.
    """
    path = Path(path)
    return _decode(path, _read_bytes(path), cv2.IMREAD_COLOR)


def _turned(array: np.ndarray, quarter_turns: int, mirror: bool) -> np.ndarray:
    turned = np.rot90(array, quarter_turns)
    return turned[:, ::-1] if mirror else turned


def _alpha_oriented(stored: np.ndarray, oriented: np.ndarray, alpha: np.ndarray) -> np.ndarray | None:
    """`alpha` turned the way the decoder turned `stored` colour into `oriented` (one of the
    eight EXIF orientations, found by comparing the pixels); None when none matches."""
    for quarter_turns in range(4):
        for mirror in (False, True):
            if np.array_equal(_turned(stored, quarter_turns, mirror), oriented):
                return np.ascontiguousarray(_turned(alpha, quarter_turns, mirror))
    return None


def read_picture(path: str | os.PathLike[str]) -> Picture:
    """Read the target picture of a swap, keeping what the swap does not use.

    Grey, grey+alpha, BGR and BGRA files at 8 or 16 bits per channel: the Picture holds the
    8-bit BGR the pipeline swaps, the alpha plane, and the 16-bit colour. EXIF orientation
    is applied, as read_image applies it. Other depths (e.g. 32-bit float TIFF) are read as
    read_image reads them, with a warning. Raises SourceError as read_image does.
    """
    path = Path(path)
    data = _read_bytes(path)
    raw = _decode(path, data, cv2.IMREAD_UNCHANGED)
    if raw.dtype not in (np.uint8, np.uint16):
        log.warning("%s: %s pixels are read as 8-bit BGR without alpha (only 8 and 16 bits are kept)",
                    path, raw.dtype)
        return Picture(_decode(path, data, cv2.IMREAD_COLOR))
    # IMREAD_UNCHANGED is the one mode that keeps alpha, and the one mode that ignores EXIF
    # orientation: the colour comes from a decode that orients it (and keeps the depth).
    colour = _decode(path, data, cv2.IMREAD_COLOR | cv2.IMREAD_ANYDEPTH)
    if raw.ndim == 2 or raw.shape[2] in (1, 3):
        return Picture.from_planes(colour)
    alpha = raw[..., -1]
    stored = raw[..., :3] if raw.shape[2] == 4 else cv2.cvtColor(raw[..., 0], cv2.COLOR_GRAY2BGR)
    oriented = _alpha_oriented(stored, colour, alpha)
    if oriented is None:
        log.warning("%s: the alpha plane does not match the oriented colour; read as stored, unoriented", path)
        return Picture.from_planes(np.ascontiguousarray(stored), np.ascontiguousarray(alpha))
    return Picture.from_planes(colour, oriented)


def write_image(path: str | os.PathLike[str], image: np.ndarray) -> None:
    """Write a picture: (H, W) grey, (H, W, 3) BGR or (H, W, 4) BGRA, uint8, or uint16 for
    formats that hold 16 bits; the extension picks the format.

    The file appears whole or not at all: encoded in memory, written to a hidden partial
    file beside `path`, synced, then renamed onto `path`. On any failure the partial file is
    removed and an existing file at `path` keeps its bytes. Raises SinkError (one line
    naming the path) for an unknown extension, a missing folder, a directory, a picture the
    format cannot encode, or a file that cannot be written (the system's reason, e.g. "No
    space left on device").
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
    # a link to an output is kept a link: the file it points to is the one replaced
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        write_bytes(target, memoryview(encoded.reshape(-1)))
    except OSError as exc:
        raise SinkError(f"image {str(path)!r}: cannot be written ({exc.strerror or exc})") from exc
    log.debug("wrote %s (%s %s)", path, image.shape, image.dtype)
