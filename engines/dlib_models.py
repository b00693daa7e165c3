"""Locating the model files that ship with `face_recognition_models` (dlib's weights)."""
from __future__ import annotations

from pathlib import Path

from engines.errors import ModelNotFound


def model_path(kind: str) -> str:
    """Path of dlib's 68-point predictor ("landmarks") or ResNet embedder ("embedding")."""
    try:
        import face_recognition_models as frm
    except ImportError as exc:
        raise ModelNotFound(
            "package face_recognition_models is not installed (pip install face_recognition_models)"
        ) from exc
    getters = {
        "landmarks": frm.pose_predictor_model_location,
        "embedding": frm.face_recognition_model_location,
    }
    if kind not in getters:
        raise ValueError(f"unknown dlib model kind {kind!r}; known: {', '.join(getters)}")
    path = getters[kind]()
    if not Path(path).is_file():
        raise ModelNotFound(f"dlib model file {path!r} is missing (reinstall face_recognition_models)")
    return path
