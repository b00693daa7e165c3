"""A run's result: the figures of the report, the output, and notes for the user."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stream.job.assembly import Pipeline
from stream.job.swap_job import SwapJob


@dataclass
class Written:
    """What a run left at its output, filled in as the run ends (also when it fails)."""

    path: Path | None = None  # where the frames written so far are; None: nothing was kept
    frames: int = 0


@dataclass
class JobResult:
    report: dict[str, Any]
    output: Path
    notes: list[str] = field(default_factory=list)


def run_and_report(job: SwapJob, pipeline: Pipeline, output: str, extra: dict[str, Any],
                   staged: bool) -> JobResult:
    """Run `pipeline` to its end and report it: this run's model calls, the tracker's
    figures, `extra` (input, video), the job's notes."""
    before = job.model_calls()  # the models live as long as the job: count this run's calls
    pipeline.runner.run(staged=staged)
    calls = {kind: n - before.get(kind, 0) for kind, n in job.model_calls().items()}
    rep = pipeline.metrics.report(pipeline.rings, calls, {
        "tracks_started": pipeline.tracker.tracks_started,
        **extra, "output": str(output), "engine": job.models.name, "staged": staged,
        "sources": [s.path for s in job.source_sets]})
    notes = list(job.notes)
    if rep["frames_with_faces"] == 0:
        notes.append("no target faces found: the input passed through unchanged")
    return JobResult(rep, Path(output), notes)
