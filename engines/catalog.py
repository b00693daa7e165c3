"""The model catalog: each standard model's name, file, kind and contract, and where to find it.

Files are looked up in the `--models-dir` folder, then `$FACESTREAM_MODELS`, then the
per-user folder (`$XDG_DATA_HOME/facestream/models`, by default
`~/.local/share/facestream/models`). Nothing is downloaded unless the user asks
(`facestream models fetch`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from engines.errors import ModelNotFound


@dataclass(frozen=True)
class ModelEntry:
    """One standard model: its catalog name, file name, kind and I/O contract in words."""

    name: str
    file: str
    kind: str  # detector | embedder | swapper | landmarker | enhancer
    contract: str
    sha256: str | None = None  # when known; `fetch --sha256` verifies a download either way


CATALOG: dict[str, ModelEntry] = {e.name: e for e in (
    ModelEntry("scrfd_10g", "det_10g.onnx", "detector",
               "input.1 [1,3,H,W] -> 9 outputs: scores, boxes, keypoints at strides 8/16/32"),
    ModelEntry("scrfd_2.5g", "det_2.5g.onnx", "detector",
               "input.1 [1,3,H,W] -> 9 outputs: scores, boxes, keypoints at strides 8/16/32"),
    ModelEntry("arcface_w600k_r50", "w600k_r50.onnx", "embedder",
               "[N,3,112,112] RGB (x-127.5)/127.5 -> [N,512]"),
    ModelEntry("inswapper_128", "inswapper_128.onnx", "swapper",
               "target [1,3,128,128] RGB 0..1, source [1,512] -> output [1,3,128,128]; emap 512x512"),
    ModelEntry("inswapper_128_fp16", "inswapper_128_fp16.onnx", "swapper",
               "as inswapper_128, half-precision weights, float32 I/O"),
    ModelEntry("2dfan4", "2dfan4.onnx", "landmarker",
               "input [1,3,256,256] x/255 -> [1,68,3] landmarks, [1,68,64,64] heatmaps"),
    ModelEntry("gfpgan_1.4", "gfpgan_1.4.onnx", "enhancer",
               "input [1,3,512,512] RGB (x/255-0.5)/0.5 -> output [1,3,512,512] in [-1,1]"),
)}


def user_models_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "facestream" / "models"


def search_dirs(models_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """The folders searched for model files, in order."""
    dirs: list[Path] = []
    if models_dir:
        dirs.append(Path(models_dir))
    env = os.environ.get("FACESTREAM_MODELS")
    if env:
        dirs.append(Path(env))
    dirs.append(user_models_dir())
    return dirs


def entry(name: str) -> ModelEntry:
    """The catalog entry `name`; ValueError listing the known names otherwise."""
    try:
        return CATALOG[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(CATALOG)}") from None


def locate(name: str, models_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The first file of model `name` in the search folders, or None."""
    file = entry(name).file
    for folder in search_dirs(models_dir):
        candidate = folder / file
        if candidate.is_file():
            return candidate
    return None


def find(name: str, models_dir: str | os.PathLike[str] | None = None) -> Path:
    """Like `locate`, but a missing file is ModelNotFound naming it and the folders searched."""
    path = locate(name, models_dir)
    if path is None:
        folders = ", ".join(str(d) for d in search_dirs(models_dir))
        raise ModelNotFound(f"model {name!r} ({entry(name).file}) not found in: {folders}")
    return path
