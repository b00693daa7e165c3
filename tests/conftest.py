"""Shared fixtures: face clips and photos made from pictures that ship with installed packages."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import cv2
import pytest

from stream.media.demo_clips import astronaut
from tests.fixtures import CLIP_FRAMES, clip_frame, make_clip

# `--engine auto` (the default) picks the neural set when its files are found: keep the
# suite independent of whatever model files this machine's user folder holds. Set at
# import, so the CLI subprocesses the tests start inherit it too.
_EMPTY_MODELS = tempfile.mkdtemp(prefix="fs-no-models-")
os.environ["XDG_DATA_HOME"] = _EMPTY_MODELS
os.environ.pop("FACESTREAM_MODELS", None)

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


@pytest.fixture()
def loopback_ice(monkeypatch: pytest.MonkeyPatch) -> None:
    """WebRTC (ICE) candidates on 127.0.0.1 only: a sandbox may have no other interface."""
    import aioice.ice

    monkeypatch.setattr(aioice.ice, "get_host_addresses", lambda use_ipv4, use_ipv6: ["127.0.0.1"])
