"""A swap job: engines, source faces, rings and stages assembled for one input and output."""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engines.errors import NoFaceError
from engines.face import ImageBGR, Landmarks68
from engines.frame_views import FrameViews
from engines.registry import EngineSet, build_engines
from stream.allocator import default_allocator
from stream.config import Config
from stream.errors import SourceError
from stream.image_io import read_image, write_image
from stream.metrics import Metrics
from stream.ring import Policy, Ring
from stream.runner import Runner, Sink, Source
from stream.selection import Selector
from stream.slot import Slot
from stream.stages import AnalyseWorker, CompositeWorker, SwapWorker
from stream.tracklets import Tracker

log = logging.getLogger(__name__)

FRAME_RING_BYTES = 256 * 1024 * 1024
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}


def is_image_path(path: str | Path) -> bool:
    return Path(path).suffix.lower() in IMAGE_SUFFIXES


@dataclass(frozen=True)
class PhotoFace:
    """The face chosen in a photo (source or reference), and how many the photo had."""

    path: str
    image: ImageBGR
    landmarks: Landmarks68
    faces_found: int


@dataclass
class JobResult:
    report: dict[str, Any]
    output: Path
    notes: list[str] = field(default_factory=list)


class ImageSource:
    """One still picture as a one-frame stream."""

    def __init__(self, image: ImageBGR) -> None:
        self._image = image
        self._done = False

    def read_into(self, slot: Slot) -> bool:
        if self._done:
            return False
        np.copyto(slot.buffers["image"], self._image)
        slot.seq, slot.pts, slot.time_base = 0, 0, None
        slot.capture_time = time.monotonic()
        self._done = True
        return True

    def close(self) -> None:
        pass


class ImageSink:
    """Writes the one frame of an image run when it arrives."""

    def __init__(self, path: str | Path) -> None:
        self.path = path
        self.frames_written = 0

    def write(self, slot: Slot) -> None:
        write_image(self.path, slot.image)
        self.frames_written += 1

    def close(self) -> None:
        pass


class SwapJob:
    """Everything a swap run needs that outlives one input: models, source faces."""

    def __init__(self, config: Config, sources: list[str], references: list[str] | None = None) -> None:
        if not sources:
            raise ValueError("at least one source photo is needed")
        self.config = config
        self.source_paths = list(sources)
        self.reference_paths = list(references or [])
        self.engines: EngineSet | None = None
        self.sources: list[PhotoFace] = []
        self.prepared: list[object] = []
        self.reference_embeddings: list[np.ndarray] = []
        self.enhancer: Any = None
        self.notes: list[str] = []

    def open(self) -> None:
        """Load the models and prepare every source (and reference) face once."""
        cfg = self.config
        self.engines = build_engines(cfg.engine, detect=cfg.detect, swap=cfg.swap, models=cfg.models)
        self.notes.append(self.engines.note)
        self.engines.open()
        if cfg.enhance.enabled:  # loaded only when asked for
            from engines.catalog import find
            from engines.gfpgan import GfpganEnhancer
            from engines.ort_runtime import OrtOptions

            path = find(cfg.enhance.model, cfg.models.dir)
            self.enhancer = GfpganEnhancer(path, OrtOptions(providers=cfg.models.providers),
                                           every=cfg.enhance.every)
            self.enhancer.open()
            self.notes.append(f"enhancer: {path.name}, every {cfg.enhance.every} frame(s) per face")
        for path in self.source_paths:
            face = self.find_face(path, "source photo")
            self.sources.append(face)
            self.prepared.append(self.engines.swapper.prepare_source(face.image, face.landmarks))
        for path in self.reference_paths:
            face = self.find_face(path, "reference photo")
            self.reference_embeddings.append(self.engines.embedder.forward(face.image, face.landmarks))

    def find_face(self, path: str, what: str, image: ImageBGR | None = None) -> PhotoFace:
        """The largest face of a photo (read from `path` unless `image` is given);
        NoFaceError when there is none."""
        assert self.engines is not None
        image = read_image(path) if image is None else image
        frame = FrameViews(image)
        dets = self.engines.detector.forward(frame)
        if not dets:  # photos are often small: one pass with upsampling before giving up
            from engines.dlib_detector import DlibHogDetector

            dets = DlibHogDetector(max_side=2048, upsample=1).forward(frame)
        if not dets:
            raise NoFaceError(f"{what} {path!r}: no face found")
        box, _ = max(dets, key=lambda d: (d[0][2] - d[0][0]) * (d[0][3] - d[0][1]))
        if len(dets) > 1:
            self.notes.append(f"{what} {path!r} has {len(dets)} faces; using the largest")
        landmarks = self.engines.landmarker.forward(frame, box)
        return PhotoFace(path, image, landmarks, len(dets))

    def share(self) -> None:
        """Let several pipelines run on this job's models at once (a server's peers): each
        model method then runs under its own lock, so one call of a kind at a time while
        different stages still overlap. Call after open()."""
        from stream.shared_engines import share_engines

        assert self.engines is not None
        self.engines = share_engines(self.engines)
        if self.enhancer is not None:
            from stream.shared_engines import Shared

            self.enhancer = Shared(self.enhancer)

    def prepare(self, face: PhotoFace) -> object:
        """The swapper's per-source preparation of `face` (safe beside running pipelines)."""
        assert self.engines is not None
        from stream.shared_engines import exclusive

        with exclusive(self.engines.embedder, "forward"):  # the swapper may use the embedder inside
            return self.engines.swapper.prepare_source(face.image, face.landmarks)

    def _build(self, shape: tuple[int, int], source: Source, sink: Sink, metrics: Metrics,
               live: bool, on_frame: Callable[[Slot], None] | None,
               prepared: list[object] | None = None) -> Runner:
        assert self.engines is not None
        cfg = self.config
        eng = self.engines
        tracker = Tracker(eng.detector, eng.landmarker, eng.embedder, cfg.detect, cfg.track,
                          background=live and cfg.detect.background)
        selector = Selector(cfg.select, self.reference_embeddings, eng.embedder, cfg.pipeline.max_faces)
        faces = self.prepared if prepared is None else prepared
        workers = [AnalyseWorker(tracker, selector), SwapWorker(eng.swapper, faces, self.enhancer),
                   CompositeWorker(eng.swapper, metrics, self.enhancer)]
        depth = cfg.pipeline.live_ring_depth if live else cfg.pipeline.ring_depth
        h, w = shape
        # Frames stay in their ring-A slot until encoded: A holds its own queue plus
        # everything downstream (each later ring, and one frame in each stage's hands),
        # but at most FRAME_RING_BYTES of pictures (a 4K ring would otherwise take ~0.5 GB):
        # with fewer slots decode simply waits sooner; every stage still has work.
        frame_slots = depth + len(workers) * depth + len(workers) + 1
        frame_slots = max(len(workers) + 2, min(frame_slots, FRAME_RING_BYTES // (h * w * 3)))
        # Live: frames are dropped at the entry only (ring A keeps the newest `depth`
        # unread), before any model has worked on them; a frame let in goes through every
        # stage, the later rings blocking, so no stage's work is thrown away and at most
        # `depth` frames wait between two stages.
        entry = dict(policy=Policy.DROP_OLDEST, max_ready=depth) if live else dict(policy=Policy.BLOCK)
        rings = [Ring("A", frame_slots, {"image": ((h, w, 3), np.uint8)}, allocator=default_allocator(),
                      **entry)]
        rings += [Ring(name, depth, policy=Policy.BLOCK) for name in ("B", "C", "D")]
        return Runner(source, workers, sink, rings, metrics, on_frame)

    def run_video(self, input_path: str, output_path: str,
                  on_start: Callable[[Any], None] | None = None,
                  on_frame: Callable[[Slot], None] | None = None) -> JobResult:
        from stream.sinks.file import FileSink
        from stream.sources.file import FileSource

        source = FileSource(input_path)
        info = source.open()
        sink = FileSink(output_path, info, self.config.encode, audio_from=input_path)
        try:
            sink.open()
        except BaseException:
            source.close()
            raise
        if on_start is not None:
            on_start(info)
        metrics = Metrics()
        try:
            runner = self._build((info.height, info.width), source, sink, metrics, False, on_frame)
        except BaseException:
            sink.close()
            source.close()
            raise
        result = self._finish(runner, output_path, {"input": str(input_path), "video": {
            "width": info.width, "height": info.height, "fps": float(info.rate),
            "frames_expected": info.frames, "has_audio": info.has_audio}})
        if source.shortfall:  # the output is complete and final; the input was not
            raise SourceError(source.shortfall)
        return result

    def run_live(self, source: Any, sink: Any, output_name: str,
                 status: Callable[[dict[str, Any]], None] | None = None,
                 duration: float | None = None, prepared: list[object] | None = None,
                 on_start: Callable[[Runner], None] | None = None) -> JobResult:
        """A live run: `source` (opened) through drop-oldest rings to `sink` (a LiveSink,
        opened here), until the source ends, `duration` seconds pass, a sink asks to stop,
        or Ctrl-C. Detection cadence adapts to load; `status` gets the figures every second
        (see StatusLine.figures). `prepared` replaces the job's source faces for this run;
        `on_start` gets the runner before it starts (to stop it, or to change faces)."""
        from stream.live import AdaptiveCadence, StatusLine

        info = source.info
        sink.open()
        metrics = Metrics()
        try:
            runner = self._build((info.height, info.width), source, sink, metrics, True, None, prepared)
        except BaseException:
            sink.close()
            source.close()
            raise
        if on_start is not None:
            on_start(runner)
        sink.cadence = cadence = AdaptiveCadence(runner, self.config.detect.every)
        line = StatusLine(runner, status) if status is not None else None
        timer = threading.Timer(duration, runner.stop, args=("duration reached",)) if duration else None
        if line is not None:
            line.start()
        if timer is not None:
            timer.daemon = True
            timer.start()
        restore = _stop_on_ctrl_c(runner)
        try:
            extra = {"input": source.describe() if hasattr(source, "describe") else str(source),
                     "video": {"width": info.width, "height": info.height, "fps": float(info.rate)}}
            result = self._finish(runner, output_name, extra)
        finally:
            restore()
            if timer is not None:
                timer.cancel()
            if line is not None:
                line.stop()
        result.report["live"] = {"detect_every_base": cadence.base, "detect_every_max": cadence.highest,
                                 "cadence_changes": cadence.changes, "stopped": runner.stopped}
        if hasattr(source, "describe"):
            result.report["input"] = source.describe()
        return result

    def run_image(self, input_path: str, output_path: str) -> JobResult:
        image = read_image(input_path)
        metrics = Metrics()
        # A still picture is a one-frame stream, run serially (frame 0 always detects).
        runner = self._build(image.shape[:2], ImageSource(image), ImageSink(output_path), metrics,
                             False, None)
        return self._finish(runner, output_path, {"input": str(input_path)}, staged=False)

    def _calls(self) -> dict[str, int]:
        assert self.engines is not None
        calls = self.engines.calls()
        if self.enhancer is not None:
            calls["enhance"] = self.enhancer.calls
        return calls

    def _finish(self, runner: Runner, output: str, extra: dict[str, Any],
                staged: bool | None = None) -> JobResult:
        assert self.engines is not None
        before = self._calls()  # the models live as long as the job: count this run's calls
        runner.run(staged=self.config.pipeline.staged if staged is None else staged)
        calls = {kind: n - before.get(kind, 0) for kind, n in self._calls().items()}
        tracker = runner.workers[0].tracker  # type: ignore[attr-defined]
        rep = runner.metrics.report(runner.rings, calls, {
            "tracks_started": tracker.tracks_started,
            **extra, "output": str(output), "engine": self.engines.name,
            "staged": self.config.pipeline.staged if staged is None else staged,
            "sources": [s.path for s in self.sources]})
        notes = list(self.notes)
        if rep["frames_with_faces"] == 0:
            notes.append("no target faces found: the input passed through unchanged")
        return JobResult(rep, Path(output), notes)


def _stop_on_ctrl_c(runner: Runner) -> Callable[[], None]:
    """In a live run Ctrl-C is how a user ends it: the first one stops the run cleanly
    (summary, exit 0), a second one interrupts at once. Returns the undo."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: Any) -> None:
        if runner.stopped:
            raise KeyboardInterrupt
        runner.stop("stopped by Ctrl-C")

    signal.signal(signal.SIGINT, handler)
    return lambda: signal.signal(signal.SIGINT, previous)
