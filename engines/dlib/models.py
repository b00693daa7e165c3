"""Locating the model files that ship with `face_recognition_models` (dlib's weights).

The package's own locators (`pose_predictor_model_location` ...) need `pkg_resources`, which
newer setuptools no longer ships and which Python 3.12's fresh venvs lack altogether: importing
the package fails there. Its files are found from the package's location instead, without
running its `__init__`.
"""
from __future__ import annotations

import functools
import importlib.util
import pickle
import threading
from pathlib import Path
from typing import Any

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


_LOADED: dict[str, tuple[Any, threading.Lock]] = {}
_LOADING = threading.Lock()


@functools.cache
def _hog_pickled() -> bytes:
    model, lock = shared_model("hog")
    with lock:
        return pickle.dumps(model)


def own_hog_detector() -> Any:
    """A HOG frontal-face detector of the caller's own (its scanner keeps the image it scans,
    so concurrent detections each need one). dlib builds one in 0.65-0.73 s; unpickling a
    copy of the shared one (`shared_model("hog")`, 155 KB) takes 3 ms and finds the same
    boxes with the same scores."""
    return pickle.loads(_hog_pickled())  # bytes this process pickled itself


def shared_model(kind: str) -> tuple[Any, threading.Lock]:
    """dlib's model of `kind` ("landmarks", "embedding" or "hog": the frontal face detector
    built into dlib), loaded once per process, and the lock its calls take. The embedding's
    is dlib's ResNet run by ONNX Runtime from its ONNX export, or with numpy where that is
    not installed (engines.dlib.onnx_embedding, engines.dlib.resnet), the landmarks' dlib's shape
    predictor run with numpy (engines.dlib.shape): neither needs the lock, their runs keep
    nothing between calls, so they may overlap.

    Every user of a kind (the tracker's landmarker and the face filter's, the run's embedder
    and the filter's) shares one copy: the 68-point predictor holds about 70 MB and the
    ResNet 22 MB, and two of each raised a one-face run's peak memory by 90 MB. The models
    are read-only once loaded; the lock keeps one call at a time on the HOG detector, which
    takes 0.67 s to build (twice a job: the stream's and the photos'), and whose scanner
    keeps the image it scans: its lock is held for the whole of a detection (it releases
    the GIL, so the other stages go on meanwhile)."""
    with _LOADING:
        found = _LOADED.get(kind)
        if found is None:
            import dlib

            if kind == "hog":
                model = dlib.get_frontal_face_detector()
            else:
                path = model_path(kind)
                if kind == "landmarks":  # dlib's predictor, run with numpy (engines.dlib.shape)
                    from engines.dlib.shape import ShapePredictor

                    model = ShapePredictor(path)
                else:  # dlib's ResNet, exported to ONNX, or run with numpy (engines.dlib.onnx_embedding)
                    from engines.dlib.onnx_embedding import load_embedding

                    model = load_embedding(path)
            found = _LOADED[kind] = (model, threading.Lock())
        return found
