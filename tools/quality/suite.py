"""The quality suite: every clip of the set through `facestream swap` in each config, measured."""
from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import cv2

from tools.quality.cadence import label
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
              swap_args: tuple[str, ...] = (), cadences: tuple[int, ...] = ()) -> list[QualityReport]:
    """Make the clips in `workdir`, swap each in every config (plus `swap_args`, e.g.
    ("--engine", "dlib")), and measure every output. `cadences`: each config is swapped once
    at each (`--swap-every N`), labelled `config@N` (tools/quality/cadence.py), into
    `<clip>.<config>@N.mp4`."""
    runs = [(label(c, n), c, ("--swap-every", str(n))) for c in configs for n in cadences] if cadences \
        else [(c, c, ()) for c in configs]
    reports = []
    for clip in make_clip_set(workdir, clips):
        truth = ClipTruth.load(clip.truth)
        source = cv2.imread(str(clip.source))
        if source is None:
            raise MeasureError(f"{clip.source}: cannot read the source photo")
        ref = Reference(models, source, clip.video, truth, sample_every=sample_every, name=clip.name)
        for name, config, every in runs:
            output = workdir / f"{clip.name}.{name}.mp4"
            log.info("swap %s with %s", clip.name, name)
            run_swap(clip, output, config, swap_args + every)
            report = ref.compare(output, name)
            reports.append(report)
            if on_report is not None:
                on_report(report)
    return reports
