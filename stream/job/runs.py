"""The three kinds of run of a swap job: a video file, a still picture, a live stream."""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from stream.errors import SinkError, SourceError
from stream.job.assembly import Pipeline, assemble
from stream.job.cadence import SHED_LANDMARKS_EVERY, AdaptiveCadence, sheddable
from stream.job.report import JobResult, Written, run_and_report
from stream.job.status import StatusLine, sink_report
from stream.job.swap_job import SwapJob
from stream.media.close import close_quietly
from stream.media.dynamic_range import DEEP, plan_file
from stream.media.image_io import read_picture
from stream.media.probe import probe_video
from stream.media.video_info import VideoInfo
from stream.runtime.metrics import Metrics
from stream.runtime.protocols import Sink, Source
from stream.runtime.slot import Pasted, Slot
from stream.sinks.file import FileSink
from stream.sinks.image import ImageSink
from stream.sinks.protocol import LiveSink, SinkStats, stats_of
from stream.sources.file import FileSource
from stream.sources.image import ImageSource
from stream.sources.protocol import LiveSource


def _assemble(job: SwapJob, shape: tuple[int, int], source: Source, sink: Sink, live: bool,
              faces: Sequence[object] | None = None,
              on_frame: Callable[[Slot], None] | None = None, metrics: Metrics | None = None) -> Pipeline:
    return assemble(job.config, job.models, job.prepared if faces is None else faces,
                    job.reference_embeddings, shape, source, sink, live=live, allocator=job.allocator,
                    enhancer=job.enhancer, metrics=metrics or Metrics(), on_frame=on_frame,
                    frame_buffers=getattr(source, "frame_buffers", None))


def run_video(job: SwapJob, input_path: str, output_path: str,
              on_start: Callable[[VideoInfo], None] | None = None,
              on_frame: Callable[[Slot], None] | None = None,
              overwrite: bool = True, written: Written | None = None) -> JobResult:
    """Every frame of a video file, in order, upright, into a new file with the input's
    timing, audio tracks and subtitles. `on_start` gets the input's description once it is
    open; `on_frame` each slot written (a progress bar). `overwrite=False` refuses an
    existing output. `written` is filled in as the run ends, even when it fails: where the
    frames written so far are. The output is read back before the run counts as done."""
    source = FileSource(input_path)
    info = source.open()
    encode = job.config.encode
    plan = plan_file(info.dynamic, encode.codec, encode.tone_map, even=info.width % 2 == 0 and info.height % 2 == 0)
    info = source.set_range(plan.mode)
    sink = FileSink(output_path, info, replace(encode, codec=plan.codec), audio_from=input_path,
                    overwrite=overwrite, deep=plan.mode == DEEP)
    try:
        sink.open()
    except BaseException:
        source.close()
        raise
    if on_start is not None:
        on_start(info)
    try:
        pipeline = _assemble(job, (info.height, info.width), source, sink, False, on_frame=on_frame)
    except BaseException:
        close_quietly(sink)
        source.close()
        raise
    try:
        result = run_and_report(job, pipeline, output_path, {"input": str(input_path), "video": {
            "width": info.width, "height": info.height, "fps": float(info.rate), "rotation": info.rotation,
            "frames_expected": info.frames, "has_audio": info.has_audio},
            "dynamic_range": {"input": info.dynamic.describe(), "output": plan.mode, "codec": plan.codec}},
            job.config.pipeline.staged)
    finally:
        if written is not None:
            written.path, written.frames = sink.kept, sink.frames_written
    check = probe_video(sink.path)
    result.report["output_check"] = check.as_dict()
    if check.video_frames != sink.frames_written:
        raise SinkError(f"output {output_path!r} holds {check.video_frames} frames where "
                        f"{sink.frames_written} were written")
    if info.rotation:
        result.notes.append(f"the input is stored turned (display rotation {info.rotation} degrees): "
                            "swapped and written upright")
    if source.pts_repaired:
        result.notes.append(f"{source.pts_repaired} frame(s) had no increasing timestamp (B-frames in a "
                            "container without presentation times): timed by their order")
    result.notes.extend(plan.notes)
    result.notes.extend(sink.notes)
    if sink.replaced:
        result.notes.append(f"replaced the existing {output_path}")
    if source.shortfall:  # the output is complete and final; the input was not
        raise SourceError(source.shortfall)
    return result


def run_image(job: SwapJob, input_path: str, output_path: str) -> JobResult:
    """A still picture: a one-frame stream, run serially (frame 0 always detects). The swap
    works on the picture's 8-bit colour; its alpha and 16-bit depth go back into the output
    where the format holds them, and the result's notes say what the format could not."""
    picture = read_picture(input_path)
    sink = ImageSink(output_path, picture)
    pipeline = _assemble(job, picture.bgr.shape[:2], ImageSource(picture.bgr), sink, False)
    result = run_and_report(job, pipeline, output_path, {"input": str(input_path)}, staged=False)
    result.notes.extend(sink.notes)
    return result


def open_live(source: LiveSource, make_sink: Callable[[VideoInfo], LiveSink]) -> tuple[VideoInfo, LiveSink]:
    """Open a live source, then the sink `make_sink` builds for its picture size and rate;
    if anything fails, what was opened is closed again before the error goes on."""
    info = source.open()
    sink: LiveSink | None = None
    try:
        sink = make_sink(info)
        sink.open()
    except BaseException:  # an error, or Ctrl-C / SIGTERM while opening
        if sink is not None:
            close_quietly(sink)
        close_quietly(source)
        raise
    return info, sink


def run_live(job: SwapJob, source: LiveSource, sink: LiveSink, output_name: str,
             status: Callable[[dict[str, Any]], None] | None = None,
             duration: float | None = None, faces: Sequence[object] | None = None,
             on_start: Callable[[Pipeline], None] | None = None) -> JobResult:
    """A live run: `source` (opened) through the live rings to `sink` (opened here), until
    the source ends, `duration` seconds pass, a sink asks to stop, or someone calls the
    pipeline's `stop()`. Optional quality steps and detection's cadence adapt to load
    (stream.job.cadence); `status` gets the figures every second (see StatusLine.figures).
    `faces` replaces the job's source faces for this run; `on_start` gets the pipeline
    before it starts (to stop it, or to change faces)."""
    info = source.info
    if info is None:
        raise ValueError(f"{source.name}: open the source before the run")
    cadence: AdaptiveCadence | None = None
    metrics = Metrics()

    def on_frame(slot: Slot) -> None:
        if isinstance(slot.payload, Pasted):  # the composite stage's faces pasted
            metrics.faces_on_screen = slot.payload.count
        if cadence is not None:
            cadence.on_frame()

    line: StatusLine | None = None
    timer: threading.Timer | None = None
    try:
        # Until the runner owns them (it closes both whatever happens), an interrupt here
        # (Ctrl-C, SIGTERM while the stages are built) must still close the source and the
        # sink: a file output is finalised, or removed when it holds no frame.
        sink.open()
        pipeline = _assemble(job, (info.height, info.width), source, sink, True, faces, on_frame, metrics)
        analyse = pipeline.analyse

        tracker, landmarks_every = pipeline.tracker, job.config.track.landmarks_every

        def use_skip(skip: frozenset[str]) -> None:
            analyse.skip = skip
            shed = "landmarks_each_frame" in skip
            tracker.landmarks_every = max(landmarks_every, SHED_LANDMARKS_EVERY) if shed else landmarks_every

        swaps = pipeline.carried.worker if pipeline.carried is not None else None
        cadence = AdaptiveCadence(pipeline.tracker, pipeline.rings, job.config.detect.every,
                                  sheddable(job.config, pipeline.composite.paster), use_skip, swaps)
        if on_start is not None:
            on_start(pipeline)
        line = StatusLine(pipeline, status) if status is not None else None
        timer = threading.Timer(duration, pipeline.stop, args=("duration reached",)) if duration else None
        if line is not None:
            line.start()
        if timer is not None:
            timer.daemon = True
            timer.start()
    except BaseException:
        if line is not None:
            line.stop()
        if timer is not None:
            timer.cancel()
        close_quietly(sink)
        close_quietly(source)
        raise
    try:
        extra = {"input": source.describe(),
                 "video": {"width": info.width, "height": info.height, "fps": float(info.rate)}}
        result = run_and_report(job, pipeline, output_name, extra, job.config.pipeline.staged)
    finally:
        if timer is not None:
            timer.cancel()
        if line is not None:
            line.stop()
    rep = result.report
    rep["live"] = {"detect_every_base": cadence.base, "detect_every_max": cadence.highest,
                   "cadence_changes": cadence.changes, "stopped": pipeline.runner.stopped,
                   "sheddable": list(cadence.steps), "shed": list(cadence.ever_shed),
                   "shed_changes": cadence.shed_changes, "swaps_slowed": cadence.swaps_slowed}
    rep["input"] = source.describe()
    # "frames" are the frames delivered: those the sink was given and dropped are counted apart.
    delivered_only(rep, stats_of(sink))
    return result


def delivered_only(rep: dict[str, Any], stats: SinkStats) -> None:
    """Make a live report's `frames` (and `fps`) the frames the sink delivered, and keep
    its delivery figures under `sink`."""
    rep["frames"] = max(0, rep["frames"] - stats["dropped"])
    rep["fps"] = round(rep["frames"] / rep["elapsed_s"], 2) if rep["elapsed_s"] > 0 else 0.0
    rep["sink"] = sink_report(stats)
