"""The several-views measurement's media (tools/quality/source_views.py): a head that turns
both ways, source views turned left and right, and the tool's flag."""
from __future__ import annotations

from pathlib import Path

import cv2
import pytest

from engines.dlib.detector import DlibHogDetector
from engines.dlib.landmarker import DlibLandmarker
from engines.frame_views import FrameViews
from engines.geometry.head_pose import head_pose
from tools.eval_quality import parse_args
from tools.quality.clips import t1_source
from tools.quality.source_views import VIEW_NAMES, turning_views_scene, write_views


def _yaw(image) -> float:  # type: ignore[no-untyped-def]
    frame = FrameViews(image)
    boxes = DlibHogDetector(1024).forward(frame)
    assert len(boxes) == 1
    return head_pose(DlibLandmarker().forward(frame, boxes[0][0])).yaw


def test_the_clips_head_turns_both_ways_and_its_truth_follows() -> None:
    scene = turning_views_scene()
    quarter, three_quarters = scene.n_frames // 4, 3 * scene.n_frames // 4
    (right, truth_r), (left, truth_l) = scene.frame(quarter), scene.frame(three_quarters)
    assert _yaw(right) > 0.15 and _yaw(left) < -0.15
    assert truth_r.faces[0][0] > truth_l.faces[0][0]  # the box moves with the nose


def test_the_source_views_face_front_left_and_right(tmp_path: Path) -> None:
    folder = write_views(tmp_path / "views", t1_source())
    assert sorted(p.name for p in folder.iterdir()) == list(VIEW_NAMES)
    front, left, right = (_yaw(cv2.imread(str(folder / n))) for n in VIEW_NAMES)
    assert left < front < right


@pytest.mark.parametrize("argv,configs", [
    (["--source-views"], "fast,quality"),
    (["--source-views", "--configs", "default"], "default"),
    (["--suite"], "fast,default,quality"),
])
def test_source_views_flag_and_its_configs(argv: list[str], configs: str) -> None:
    assert parse_args(argv).configs == configs


def test_source_views_runs_its_own_clip() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--source-views", "--suite"])
