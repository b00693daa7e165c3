"""Locating the model files that ship with `face_recognition_models` (dlib's weights).

The package's own locators (`pose_predictor_model_location` ...) need `pkg_resources`, which
newer setuptools no longer ships and which Python 3.12's fresh venvs lack altogether: importing
the package fails there. Its files are found from the package's location instead, without
running its `__init__`.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from engines.errors import ModelNotFound

PACKAGE = "face_recognition_models"
FILES = {  # kind -> the file under the package's models/ folder
    "landmarks": "shape_predictor_68_face_landmarks.dat",
    "embedding": "dlib_face_recognition_resnet_model_v1.dat",
}


def package_dir() -> Path:
    """The installed package's folder; ModelNotFound when it is not installed."""
    spec = importlib.util.find_spec(PACKAGE)  # finds it without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(f"package {PACKAGE} is not installed (pip install {PACKAGE})")
    return Path(next(iter(spec.submodule_search_locations)))


def model_path(kind: str) -> str:
    """Path of dlib's 68-point predictor ("landmarks") or ResNet embedder ("embedding")."""
    if kind not in FILES:
        raise ValueError(f"unknown dlib model kind {kind!r}; known: {', '.join(FILES)}")
    path = package_dir() / "models" / FILES[kind]
    if not path.is_file():
        raise ModelNotFound(f"dlib model file {str(path)!r} is missing (reinstall {PACKAGE})")
    return str(path)
