"""The several-views measurement (issue 58, part 2): a turning head swapped with one frontal
source photo, and with a folder of three views of the same person (frontal, turned left,
turned right), in the same configs, measured against the same frontal photo.

The clip ("turning-views"): scikit-image's astronaut, zoomed so her face is about 140 px
wide, her head turning from side to side (+-30 degrees, tools/quality/head_turn.py) while the
view drifts a little. The source: t1.jpg's largest face (tools/quality/clips.t1_source); its
left and right views are the same photo turned by -+25 degrees with the same warp.

    python tools/eval_quality.py --source-views [--configs fast,quality]
"""
from __future__ import annotations

import dataclasses
import logging
import math
import subprocess
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

from tools.quality.clips import ASTRONAUT_FACE, Scene, View, _wave, make_clip, t1_source
from tools.quality.head_turn import turn_head, turned_box
from tools.quality.measure import MeasureError, Models, QualityReport, Reference
from tools.quality.suite import ROOT, swap_command
from tools.quality.truth import ClipTruth

log = logging.getLogger(__name__)

TURN_YAW = 30.0  # the clip's head turns between -30 and +30 degrees
VIEW_YAW = 25.0  # the source's side views: turned this far each way
T1_SOURCE_FACE = (79.0, 79.0, 204.0, 204.0)  # the face in t1_source(), as dlib's HOG finds it
VIEW_NAMES = ("1-front.png", "2-left.png", "3-right.png")


def turning_views_scene() -> Scene:
    """The astronaut turning her head from side to side, t1's largest face as the source."""
    from stream.media.demo_clips import astronaut

    x0, y0, x1, y1 = ASTRONAUT_FACE
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2 + 10
    picture = astronaut()

    def canvas_at(t: float) -> tuple[np.ndarray, tuple[tuple[float, float, float, float], ...]]:
        yaw = TURN_YAW * math.sin(2 * math.pi * t)
        return turn_head(picture, ASTRONAUT_FACE, yaw), (turned_box(ASTRONAUT_FACE, yaw),)

    return Scene(
        "turning-views", "one face turning +-30 deg (a yaw-like warp), source views front/left/right",
        picture, (ASTRONAUT_FACE,), t1_source(),
        lambda t: View(cx + 8 * _wave(t, 0.5), cy + 5 * _wave(t, 1.5), 1.6, 0.0),
        size=(640, 480), seconds=3.0, canvas_at=canvas_at)


def write_views(folder: Path, photo: np.ndarray, box: tuple[float, float, float, float] = T1_SOURCE_FACE) -> Path:
    """The source's three views (front, left, right) as pictures in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, yaw in zip(VIEW_NAMES, (0.0, -VIEW_YAW, VIEW_YAW)):
        cv2.imwrite(str(folder / name), turn_head(photo, box, yaw))
    return folder


def run_source_views(workdir: Path, models: Models, configs: tuple[str, ...], sample_every: int = 5,
                     swap_args: tuple[str, ...] = (),
                     on_report: Callable[[QualityReport], None] | None = None) -> list[QualityReport]:
    """The turning clip swapped in each config with the frontal photo (`<config>/1 photo`) and
    with the folder of three views (`<config>/3 views`), each measured against the frontal photo."""
    clip = make_clip(turning_views_scene(), workdir)
    views = write_views(workdir / "turning-views_source", cv2.imread(str(clip.source)))
    truth = ClipTruth.load(clip.truth)
    ref = Reference(models, cv2.imread(str(clip.source)), clip.video, truth, sample_every=sample_every,
                    name=clip.name)
    reports = []
    for config in configs:
        for label, source in (("1 photo", clip.source), ("3 views", views)):
            output = workdir / f"{clip.name}.{config}.{label.replace(' ', '-')}.mp4"
            cmd = swap_command(dataclasses.replace(clip, source=source), output, config, swap_args)
            res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            if res.returncode != 0:
                last = (res.stderr.strip().splitlines() or ["(no message)"])[-1]
                raise MeasureError(f"facestream swap --config {config} --source {source}: {last}")
            report = ref.compare(output, f"{config}/{label}")
            reports.append(report)
            if on_report is not None:
                on_report(report)
    return reports

