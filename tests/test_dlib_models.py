"""dlib's weights (shipped in face_recognition_models) are found whatever setuptools is
installed: the package's own locators import `pkg_resources`, which newer setuptools and
Python 3.12's fresh venvs do not have, so they are not used."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from engines import dlib_models
from engines.errors import ModelNotFound

ROOT = Path(__file__).resolve().parent.parent


def test_the_weights_are_found_and_loaded_without_pkg_resources() -> None:
    code = (
        "import sys\n"
        "sys.modules['pkg_resources'] = None  # as where setuptools has none: importing it fails\n"
        "from engines.dlib_models import model_path\n"
        "from engines.dlib_landmarker import DlibLandmarker\n"
        "DlibLandmarker().open()\n"
        "print(model_path('landmarks')); print(model_path('embedding'))\n"
        "assert 'face_recognition_models' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    landmarks, embedding = done.stdout.split()
    assert landmarks.endswith("shape_predictor_68_face_landmarks.dat") and Path(landmarks).stat().st_size > 10**6
    assert embedding.endswith("dlib_face_recognition_resnet_model_v1.dat") and Path(embedding).is_file()


def test_a_missing_package_or_file_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelNotFound, match=r"^package face_recognition_models is not installed \(pip install"):
        dlib_models.model_path("landmarks")
    monkeypatch.setattr(dlib_models, "package_dir", lambda: tmp_path)
    with pytest.raises(ModelNotFound, match="shape_predictor_68_face_landmarks.dat' is missing"):
        dlib_models.model_path("landmarks")
    with pytest.raises(ValueError, match="unknown dlib model kind 'cnn'; known: landmarks, embedding"):
        dlib_models.model_path("cnn")
