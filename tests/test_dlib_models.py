"""dlib's weights (shipped in face_recognition_models) are found whatever setuptools is
installed: the package's own locators import `pkg_resources`, which newer setuptools and
Python 3.12's fresh venvs do not have, so they are not used."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from engines.dlib import models as dlib_models
from engines.errors import ModelNotFound

ROOT = Path(__file__).resolve().parent.parent


def test_the_weights_are_found_and_loaded_without_pkg_resources() -> None:
    code = (
        "import sys\n"
        "sys.modules['pkg_resources'] = None  # as where setuptools has none: importing it fails\n"
        "from engines.dlib.models import model_path\n"
        "from engines.dlib.landmarker import DlibLandmarker\n"
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


def test_each_model_is_loaded_once_a_process_and_shared() -> None:
    """The tracker's landmarker and the face filter's (and the two embedders) hold one copy
    of each model: two copies cost a one-face run 90 MB of its peak."""
    from engines.dlib.detector import DlibHogDetector
    from engines.dlib.embedder import DlibEmbedder
    from engines.dlib.face_filter import FaceFilter
    from engines.dlib.landmarker import DlibLandmarker

    own, other = DlibLandmarker(), DlibLandmarker()
    own.open()
    other.open()
    assert own._predictor is other._predictor
    filt = FaceFilter(DlibHogDetector(1024, 0))
    filt.open()
    assert filt.landmarker._predictor is own._predictor
    embedders = DlibEmbedder(), DlibEmbedder()
    for e in embedders:
        e.open()
    assert embedders[0]._model is embedders[1]._model is filt.embedder._model
    # The photos' HOG detectors (0.67 s to build) too; a stream's own is its own, so its
    # detections never wait for another's.
    photos = DlibHogDetector(2048, 1, shared=True), DlibHogDetector(2048, 1, shared=True)
    for h in photos:
        h.open()
    assert photos[0]._detector is photos[1]._detector
    stream = DlibHogDetector(1024, 0)
    stream.open()
    assert stream._detector is not photos[0]._detector and stream._detector is not filt.detector._detector


def test_a_shared_landmarker_gives_each_thread_its_own_answer() -> None:
    """Calls from several threads at once (a server's pipelines, a background detection)
    return what each would alone."""

    import cv2
    import numpy as np

    from engines.dlib.landmarker import DlibLandmarker
    from engines.frame_views import FrameViews
    from stream.media.demo_clips import astronaut

    frames = [FrameViews(cv2.resize(astronaut(), None, fx=s, fy=s)) for s in (1.0, 0.8, 1.25)]
    boxes = [(int(170 * s), int(60 * s), int(300 * s), int(200 * s)) for s in (1.0, 0.8, 1.25)]
    lm = DlibLandmarker()
    alone = [lm.forward(f, b) for f, b in zip(frames, boxes)]
    got: dict[int, list[np.ndarray]] = {i: [] for i in range(3)}

    def work(i: int) -> None:
        mine = DlibLandmarker()
        for _ in range(30):
            got[i].append(mine.forward(frames[i], boxes[i]))

    _in_threads(work, 3)
    for i in range(3):
        assert all(np.array_equal(p, alone[i]) for p in got[i])


def test_a_shared_detector_gives_each_thread_its_own_boxes() -> None:
    """The HOG scanner keeps the picture it scans: detections from several threads at once
    (a background detection beside a photo's) each get their own picture's boxes."""

    import cv2

    from engines.dlib.detector import DlibHogDetector
    from engines.frame_views import FrameViews
    from stream.media.demo_clips import astronaut

    pictures = [FrameViews(cv2.resize(astronaut(), None, fx=s, fy=s)) for s in (0.7, 1.0, 1.4)]
    alone = [DlibHogDetector(1024, 0, refine=True, shared=True).forward(p) for p in pictures]
    assert all(alone)
    got: dict[int, list] = {i: [] for i in range(3)}

    def work(i: int) -> None:
        mine = DlibHogDetector(1024, 0, refine=True, shared=True)
        for _ in range(6):
            got[i].append(mine.forward(pictures[i]))

    _in_threads(work, 3)
    for i in range(3):
        assert all(boxes == alone[i] for boxes in got[i])


def _in_threads(work, n: int) -> None:  # noqa: ANN001
    """`work(i)` for i in 0..n-1, each on a thread of its own, all at once; back when all end."""
    import threading

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_a_detector_of_its_own_is_a_copy_of_the_shared_one_that_finds_the_same() -> None:
    import cv2

    from stream.media.demo_clips import astronaut

    shared, _ = dlib_models.shared_model("hog")
    first, second = dlib_models.own_hog_detector(), dlib_models.own_hog_detector()
    assert first is not shared and second is not shared and first is not second
    gray = cv2.cvtColor(astronaut(), cv2.COLOR_BGR2GRAY)
    for upsample in (0, 1):
        want = shared.run(gray, upsample, 0.0)
        for own in (first, second):
            got = own.run(gray, upsample, 0.0)
            assert [tuple((r.left(), r.top(), r.right(), r.bottom())) for r in got[0]] == \
                [tuple((r.left(), r.top(), r.right(), r.bottom())) for r in want[0]]
            assert list(got[1]) == list(want[1]) and len(want[0]) >= 1
