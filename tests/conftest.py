"""Shared fixtures: face clips and photos made from pictures that ship with installed packages."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import cv2
import numpy as np
import pytest

from stream.demo_media import astronaut, group_picture
from tests.media import make_clip

# `--engine auto` (the default) picks the neural set when its files are found: keep the
# suite independent of whatever model files this machine's user folder holds. Set at
# import, so the CLI subprocesses the tests start inherit it too.
_EMPTY_MODELS = tempfile.mkdtemp(prefix="fs-no-models-")
os.environ["XDG_DATA_HOME"] = _EMPTY_MODELS
os.environ.pop("FACESTREAM_MODELS", None)

# A 640x480 window of t1.jpg holding three faces (about 88-125 px) at native scale.
WINDOW = (0, 80, 640, 560)
FACE_FRAMES = 12
BLANK_FRAMES = 4  # faces return on frame 16: a detection frame with --detect-every 4
TAIL_FRAMES = 8


def window_frame(i: int) -> np.ndarray:
    x0, y0, x1, y1 = WINDOW
    dx = i  # a slow pan: one pixel a frame
    return group_picture()[y0:y1, x0 + dx:x1 + dx].copy()


def faceless_frame(i: int) -> np.ndarray:
    return cv2.GaussianBlur(window_frame(i), (0, 0), 30)


def clip_frame(i: int) -> np.ndarray:
    """Faces for FACE_FRAMES frames, then a faceless stretch, then faces again."""
    if FACE_FRAMES <= i < FACE_FRAMES + BLANK_FRAMES:
        return faceless_frame(i)
    return window_frame(i)


CLIP_FRAMES = FACE_FRAMES + BLANK_FRAMES + TAIL_FRAMES


@pytest.fixture(scope="session")
def media_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("media")


@pytest.fixture(scope="session")
def face_clip(media_dir: Path) -> Path:
    path = media_dir / "faces.mp4"
    make_clip(path, clip_frame, n=CLIP_FRAMES, fps=25, audio=True, options=None)
    return path


@pytest.fixture(scope="session")
def source_photo(media_dir: Path) -> Path:
    path = media_dir / "astronaut.png"
    cv2.imwrite(str(path), astronaut())
    return path
