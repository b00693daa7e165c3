"""`facestream swap` as the demo uses it too: one input through a job, with a progress
bar, then the summary."""
from __future__ import annotations

from pathlib import Path

from stream.cli.parser import CliError
from stream.cli.progress import Progress
from stream.config import Config
from stream.job.report import JobResult, Written
from stream.job.runs import run_image, run_video
from stream.job.swap_job import SwapJob
from stream.media.atomic import same_file
from stream.media.image_io import is_image_path
from stream.media.video_info import VideoInfo
from stream.runtime.metrics import format_report, write_json
from stream.runtime.slot import Slot


def job_for(config: Config, sources: list[str]) -> SwapJob:
    """The job for the source photos given (and the reference or mapping photos the
    selection mode names); a CliError when they do not fit together."""
    if config.select.mode == "mapping":
        srcs = [p[0] for p in config.select.mapping]
        refs = [p[1] for p in config.select.mapping]
        return SwapJob(config, srcs, refs)
    if not sources:
        raise CliError("--source PHOTO is required (or --select mapping with --map SOURCE=REFERENCE)")
    if len(sources) > 1:
        raise CliError("several --source photos need --select mapping (--map SOURCE=REFERENCE)")
    refs = [config.select.reference] if config.select.mode == "reference" and config.select.reference else []
    return SwapJob(config, sources, refs)


def check_output(input_path: str, output_path: str, overwrite: bool) -> None:
    """Refuse, before anything is loaded or written, an output that is the input itself (the
    same path, a symlink or a hard link to it) or, with `overwrite` off, one that exists."""
    if same_file(input_path, output_path):
        raise CliError(f"output {output_path!r} is the input file: it would be overwritten while read")
    if not overwrite and Path(output_path).exists():
        raise CliError(f"output {output_path!r} exists already (--overwrite replaces it)")


def run_swap(job: SwapJob, input_path: str, output_path: str, quiet: bool = False, overwrite: bool = True,
             written: Written | None = None) -> JobResult:
    """A picture or a video through `job` (a progress bar for videos unless `quiet`);
    `written` is told where the frames written so far are, also when the run fails."""
    check_output(input_path, output_path, overwrite)
    if is_image_path(input_path):
        if not is_image_path(output_path):
            raise CliError(f"output {output_path!r}: a picture input needs a picture output (.png, .jpg)")
        return run_image(job, input_path, output_path)
    if is_image_path(output_path):
        raise CliError(f"output {output_path!r}: a video input needs a video output (.mp4, .mkv, .mov)")
    progress: dict[str, Progress] = {}

    def on_start(info: VideoInfo) -> None:
        progress["bar"] = Progress(info.frames, enabled=not quiet)

    def on_frame(_slot: Slot) -> None:
        progress["bar"].update()

    try:
        return run_video(job, input_path, output_path, on_start=on_start, on_frame=on_frame,
                         overwrite=overwrite, written=written)
    finally:
        if "bar" in progress:
            progress["bar"].close()


def summarise(result: JobResult, quiet: bool = False, stats_json: str | None = None) -> None:
    """The run's notes, its summary table (unless `quiet`), and its figures as JSON."""
    for note in result.notes:
        print(f"note: {note}")
    if not quiet:
        print(format_report(result.report))
    if stats_json:
        write_json(result.report, stats_json)
        print(f"figures written to {stats_json}")
