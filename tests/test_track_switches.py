"""The tracker's switches for the reference mode, with scripted models: smoothing on or off,
the detector's own five points, the detector's order, and faces at the frame's edge."""
from __future__ import annotations

import numpy as np
import pytest

from stream.analysis.selection import Selector
from stream.analysis.tracklets import Tracker
from stream.config import DetectConfig, SelectConfig, TrackConfig
from stream.errors import ConfigError

TEMPLATE = np.random.default_rng(3).uniform(-0.5, 0.5, size=(68, 2)).astype(np.float32)
TEMPLATE[0], TEMPLATE[1] = (-0.5, -0.5), (0.5, 0.5)
FRAME = np.zeros((480, 640), np.uint8)


class Scene:
    """Faces (cx, cy, size) of the current frame; landmarks with a little seeded jitter."""

    def __init__(self, faces: list[tuple[float, float, float]]) -> None:
        self.faces = faces
        self.rng = np.random.default_rng(0)


class Detector:
    name = "scripted"

    def __init__(self, scene: Scene) -> None:
        self.scene, self.calls = scene, 0

    def open(self) -> None: ...

    def forward(self, frame):
        self.calls += 1
        return [((cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2), 0.9 - 0.1 * i)
                for i, (cx, cy, s) in enumerate(self.scene.faces)]


class PointDetector(Detector):
    def forward_points(self, frame):
        return [(box, score, np.float32([[cx, cy]] * 5) + i) for i, ((box, score), (cx, cy, _))
                in enumerate(zip(self.forward(frame), self.scene.faces))]


class Landmarker:
    name = "scripted"
    calls = 0

    def __init__(self, scene: Scene) -> None:
        self.scene = scene

    def open(self) -> None: ...

    def forward_many(self, frame, boxes):
        out = []
        for box in boxes:
            cx, cy, s = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2, box[2] - box[0]
            jitter = self.scene.rng.normal(0, 1.5, size=(68, 2)).astype(np.float32)
            out.append(TEMPLATE * s + np.float32([cx, cy]) + jitter)
        return out


def _run(scene: Scene, frames: int, detector_cls: type = Detector, **track: object):
    tracker = Tracker(detector_cls(scene), Landmarker(scene), None, DetectConfig(every=1), TrackConfig(**track))
    return [tracker.update(FRAME, i, i / 30) for i in range(frames)], tracker


@pytest.mark.parametrize("smoothing", [True, False])
def test_smoothing_switch(smoothing: bool) -> None:
    seen, _ = _run(Scene([(320, 240, 120)]), 10, smoothing=smoothing)
    raw_equal = [np.array_equal(tracks[0].landmarks, tracks[0].raw) for tracks in seen[1:]]
    assert all(raw_equal) is not smoothing  # off: each frame's own landmarks, untouched


@pytest.mark.parametrize("inside", [0.3, 0.1])
def test_a_face_mostly_past_the_edge_is_still_swapped(inside: float) -> None:
    size = 120
    cx = -size / 2 + inside * size  # `inside` of its width in the frame, at the left edge
    seen, _ = _run(Scene([(cx, 240, size), (400, 240, size)]), 3)
    assert all(len(tracks) == 2 for tracks in seen)


def test_a_face_entirely_outside_ends() -> None:
    scene = Scene([(100, 240, 120)])
    tracker = Tracker(Detector(scene), Landmarker(scene), None, DetectConfig(every=50), TrackConfig())
    assert len(tracker.update(FRAME, 0, 0.0)) == 1
    tracker.tracks[0].rel = (-10.0, 0.0, 1.0, 1.0)  # its box carried far off the frame
    assert tracker.update(FRAME, 1, 1 / 30) == [] and tracker.tracks == []


def test_detector_points_and_order() -> None:
    # the detector's order (by score) is not the largest-first order
    scene = Scene([(150, 240, 60), (450, 240, 160), (300, 100, 100)])
    seen, tracker = _run(scene, 2, PointDetector, points="detector", smoothing=False)
    selector = Selector(SelectConfig(order="detector"), [], None, max_faces=8)
    targets = selector.choose(seen[-1], tracker, np.zeros((480, 640, 3), np.uint8), 1)
    for i, ((cx, cy, _), target) in enumerate(zip(scene.faces, targets)):
        np.testing.assert_array_equal(target.face.kps5, np.float32([[cx, cy]] * 5) + i)
    largest = Selector(SelectConfig(), [], None, max_faces=8).choose(seen[-1], tracker, FRAME, 1)
    assert [t.face.kps5[0, 0] for t in largest] == [451, 302, 150]  # largest first otherwise


def test_detector_points_need_a_detector_that_finds_them() -> None:
    scene = Scene([])
    with pytest.raises(ConfigError, match="track.points 'detector' needs a detector that finds five points"):
        Tracker(Detector(scene), Landmarker(scene), None, DetectConfig(every=1), TrackConfig(points="detector"))


def _errors(smoother: str, speed: float) -> dict[str, float]:
    """Over the last 20 of 40 frames of a face panning at `speed` px a frame: the mean
    distance of the smoothed landmarks' centre from the true centre (lag), and of the
    smoothed and of the raw points from the true points (jitter)."""
    scene = Scene([(200.0, 240.0, 120.0)])
    tracker = Tracker(Detector(scene), Landmarker(scene), None, DetectConfig(every=1),
                      TrackConfig(smoother=smoother))
    errs: dict[str, list[float]] = {"centre": [], "points": [], "raw": []}
    for i in range(40):
        scene.faces = [(200.0 + speed * i, 240.0, 120.0)]
        tracks = tracker.update(FRAME, i, i / 30)
        true = TEMPLATE * 120 + np.float32([200.0 + speed * i, 240.0])
        if i >= 20:
            got = tracks[0].landmarks
            errs["centre"].append(float(np.linalg.norm(got.mean(axis=0) - true.mean(axis=0))))
            errs["points"].append(float(np.linalg.norm(got - true, axis=1).mean()))
            errs["raw"].append(float(np.linalg.norm(tracks[0].raw - true, axis=1).mean()))
    return {k: float(np.mean(v)) for k, v in errs.items()}


def test_the_pose_smoother_follows_a_panning_face_without_the_one_euro_lag() -> None:
    pose, one_euro = _errors("pose", 4.0)["centre"], _errors("one-euro", 4.0)["centre"]
    assert pose < 0.5 * one_euro, (pose, one_euro)


@pytest.mark.parametrize("smoother", ["pose", "one-euro"])
def test_both_smoothers_still_a_still_face(smoother: str) -> None:
    e = _errors(smoother, 0.0)
    assert e["points"] < 0.75 * e["raw"], e


def test_an_unknown_smoother_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="track.smoother"):
        TrackConfig(smoother="kalman")
