"""The TensorRT engine cache: one folder of serialised engines (and timing caches, the
fp16 ONNX files TensorRT 11 builds from, the symmetric copies of INT8 files), named by a
key of everything an engine depends on.

An engine is valid only for the ONNX file, TensorRT version, GPU (name and compute
capability), precision, optimisation profile and workspace it was built with; all of them
go into the key, so a change to any one builds a new engine instead of loading a wrong one.
Files are written atomically (a temporary file in the same folder, then `os.replace`), so
a reader never sees half a file, even with two processes building the same engine; a
build lock lets the second one wait and load what the first built.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from engines.atomic_write import write_atomically

try:
    import fcntl
except ImportError:  # Windows: no advisory lock; the atomic rename still keeps files whole
    fcntl = None  # type: ignore[assignment]

Shape = tuple[int, ...]


@dataclass(frozen=True)
class ProfileEntry:
    """The optimisation profile of one input: its shape at minimum, optimum and maximum."""

    name: str
    min: Shape
    opt: Shape
    max: Shape


@dataclass(frozen=True)
class EngineKey:
    """Everything a serialised engine depends on."""

    onnx_sha256: str
    trt_version: str
    gpu_name: str
    compute: tuple[int, int]
    precision: str  # "fp32", "fp16", "int8" (a Q/DQ file) or "int8+fp16" (its float layers in fp16)
    profile: tuple[ProfileEntry, ...]
    workspace: int

    def digest(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/facestream/engines` (by default `~/.cache/facestream/engines`)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "facestream" / "engines"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-." else "_" for c in text)


class EngineCache:
    """The files of one cache folder."""

    def __init__(self, folder: str | os.PathLike[str] | None = None) -> None:
        self.folder = Path(folder) if folder else default_cache_dir()

    def engine_path(self, model: Path, key: EngineKey) -> Path:
        return self.folder / f"{_safe(model.stem)}.{key.digest()[:24]}.engine"

    def timing_cache_path(self, trt_version: str, gpu_name: str, compute: tuple[int, int]) -> Path:
        # Timings hold for one TensorRT version on one kind of GPU, across models.
        return self.folder / f"timing.{_safe(trt_version)}.{_safe(gpu_name)}.sm{compute[0]}{compute[1]}.cache"

    def fp16_onnx_path(self, model: Path, onnx_sha256: str) -> Path:
        return self.folder / f"{_safe(model.stem)}.{onnx_sha256[:24]}.fp16.onnx"

    def int8_onnx_path(self, model: Path, onnx_sha256: str) -> Path:
        return self.folder / f"{_safe(model.stem)}.{onnx_sha256[:24]}.s8.onnx"

    def read(self, path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    def write(self, path: Path, data: bytes) -> None:
        """Write `data` to `path` atomically: readers see the old file or the whole new one."""
        write_atomically(path, data)

    @contextlib.contextmanager
    def lock(self, path: Path) -> Iterator[None]:
        """Held while `path` is built: a second builder waits, then finds the file made."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if fcntl is None:
            yield
            return
        with open(path.with_name(path.name + ".lock"), "a+b") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def stat_id(path: Path) -> tuple[int, int, int] | None:
    """Which file is at `path` now (inode, size, mtime), None when there is none."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns
