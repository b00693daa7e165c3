"""Writing a file whole or not at all: the data goes to a temporary name beside it, is flushed
to the disk, then renamed over it, so a reader sees the old file or the whole new one and a
crash leaves no half-written file under the real name."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> Path:
    """Write `data` to `path` atomically (its folder made if missing) and return the path.
    `mode`: the file's permission bits (None: private to the user, as mkstemp makes it)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def user_file_mode() -> int:
    """The bits a file the user writes gets (0o666 less the umask)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask
