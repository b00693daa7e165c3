"""Outputs that appear whole or not at all: written under a hidden name beside the target,
synced, then renamed onto it. A crash or SIGKILL leaves the partial file, never a broken
target; an existing target survives a run that fails before it could be replaced."""
from __future__ import annotations

import contextlib
import itertools
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

_numbers = itertools.count()


def partial_path(target: Path) -> Path:
    """Where `target` is written until it is complete: the same folder (so the rename is
    atomic), hidden, named after the process and a counter (no two writes share one), the
    same suffix (the format is still chosen by the extension, and a leftover says what it is)."""
    return target.with_name(f".{target.name}.partial-{os.getpid()}-{next(_numbers)}{target.suffix}")


def commit(partial: Path, target: Path) -> None:
    """Put the finished `partial` in place of `target`: synced first (a crash must not leave
    an empty file under the target's name), the replaced file's permissions kept, renamed in
    one step, the folder entry synced."""
    fd = os.open(partial, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.chmod(partial, stat.S_IMODE(os.stat(target).st_mode))
    os.replace(partial, target)
    _sync_folder(target.parent)


def write_bytes(target: Path, data: memoryview) -> None:
    """Write `data` to `target` whole or not at all; an OSError leaves no partial file."""
    partial = partial_path(target)
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0), 0o666)
        try:
            while data:
                written = os.write(fd, data)
                if written <= 0:  # never for a regular file; a guard against looping forever
                    raise OSError(f"write returned {written}")
                data = data[written:]
        finally:
            os.close(fd)
        commit(partial, target)
    except BaseException:
        discard(partial)
        raise


def discard(partial: Path) -> None:
    """Remove a partial file that will not become the output (missing is fine)."""
    try:
        partial.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:  # the run's own error is the one to report
        log.warning("could not remove %s: %s", partial, exc.strerror or exc)


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file: the same path, a symlink to it, or a hard link."""
    pa, pb = Path(a), Path(b)
    try:
        if pa.exists() and pb.exists():
            return os.path.samefile(pa, pb)
    except OSError:
        pass
    return pa.resolve() == pb.resolve()


def _sync_folder(folder: Path) -> None:
    # the rename is durable once the folder's entry is on disk; not every system opens folders
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
