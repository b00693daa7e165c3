"""The quality suite: every clip of the set through `facestream swap` in each config, measured."""
from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import cv2

from tools.quality.clips import ClipFiles, make_clip_set
from tools.quality.measure import MeasureError, Models, QualityReport, Reference
from tools.quality.truth import ClipTruth

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ("fast", "default", "quality")


def swap_command(clip: ClipFiles, output: Path, config: str, extra: tuple[str, ...] = ()) -> list[str]:
    """The `facestream swap` command line a user would type for this clip and config."""
    cmd = [sys.executable, "-m", "stream.cli", "swap", "--source", str(clip.source),
           "--input", str(clip.video), "--output", str(output), "-q"]
    if config != "default":
        cmd += ["--config", config]
    return cmd + list(extra)


def run_swap(clip: ClipFiles, output: Path, config: str, extra: tuple[str, ...] = ()) -> None:
    res = subprocess.run(swap_command(clip, output, config, extra), cwd=ROOT, capture_output=True, text=True)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise MeasureError(f"facestream swap --config {config} on {clip.video.name} failed: {last}")


def run_suite(workdir: Path, models: Models, clips: list[str] | None = None,
              configs: tuple[str, ...] = CONFIGS, sample_every: int = 5,
              on_report: Callable[[QualityReport], None] | None = None,
              swap_args: tuple[str, ...] = ()) -> list[QualityReport]:
    """Make the clips in `workdir`, swap each in every config (plus `swap_args`, e.g.
    ("--engine", "dlib")), and measure every output."""
    reports = []
    for clip in make_clip_set(workdir, clips):
        truth = ClipTruth.load(clip.truth)
        source = cv2.imread(str(clip.source))
        if source is None:
            raise MeasureError(f"{clip.source}: cannot read the source photo")
        ref = Reference(models, source, clip.video, truth, sample_every=sample_every, name=clip.name)
        for config in configs:
            output = workdir / f"{clip.name}.{config}.mp4"
            log.info("swap %s with %s", clip.name, config)
            run_swap(clip, output, config, swap_args)
            report = ref.compare(output, config)
            reports.append(report)
            if on_report is not None:
                on_report(report)
    return reports
