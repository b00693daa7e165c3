"""The child-process landmarker: same landmarks as in process, clean shutdown, errors."""
from __future__ import annotations

import os
from pathlib import Path

import cv2
import numpy as np
import pytest

from engines.dlib_detector import DlibHogDetector
from engines.dlib_landmarker import DlibLandmarker
from engines.errors import EngineError
from engines.landmark_process import DlibLandmarkerProcess
from stream.demo_media import group_picture


@pytest.fixture(scope="module")
def frame():
    gray = cv2.cvtColor(group_picture(), cv2.COLOR_BGR2GRAY)
    boxes = [b for b, _ in DlibHogDetector(2048).forward(gray)]
    assert len(boxes) == 6
    return gray, boxes


@pytest.mark.parametrize("workers, max_faces", [(1, 16), (2, 16), (2, 2), (3, 1)])
def test_same_landmarks_as_in_process(frame, workers: int, max_faces: int) -> None:
    gray, boxes = frame
    expected = DlibLandmarker().forward_many(gray, boxes)
    proc = DlibLandmarkerProcess(gray.shape, max_faces=max_faces, workers=workers)
    proc.open()
    try:
        for _ in range(2):  # the shared buffers are reused
            got = proc.forward_many(gray, boxes)
            assert len(got) == len(boxes)
            for a, b in zip(got, expected):
                np.testing.assert_array_equal(a, b)
        assert proc.forward_many(gray, []) == []
        np.testing.assert_array_equal(proc.forward(gray, boxes[2]), expected[2])
        assert proc.calls == 2 * 6 + 1
    finally:
        proc.close()


def test_close_stops_the_children_and_frees_shared_memory(frame) -> None:
    gray, boxes = frame
    proc = DlibLandmarkerProcess(gray.shape, workers=2)
    proc.open()
    pids = [c.proc.pid for c in proc._children]
    names = [proc._frame.name] + [c.io.name for c in proc._children]
    proc.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    for name in names:
        assert not Path("/dev/shm", name.lstrip("/")).exists()


def test_a_dead_child_is_an_engine_error(frame) -> None:
    gray, boxes = frame
    proc = DlibLandmarkerProcess(gray.shape, workers=1)
    proc.open()
    try:
        proc._children[0].proc.kill()
        proc._children[0].proc.wait()
        with pytest.raises(EngineError, match="died"):
            proc.forward_many(gray, boxes)
    finally:
        proc.close()


def test_a_frame_larger_than_opened_for_is_refused(frame) -> None:
    gray, boxes = frame
    proc = DlibLandmarkerProcess((100, 100), workers=1)
    proc.open()
    try:
        with pytest.raises(EngineError, match="larger"):
            proc.forward_many(gray, boxes)
    finally:
        proc.close()
