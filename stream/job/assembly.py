"""One pipeline assembled: rings sized and named, the stages built on the job's models,
and named handles to the parts a run steers (the tracker, the source faces).

Ring A holds the frames; ring B's slots hold a frame's batch of swapper inputs (made by the
analyse stage) and ring C's the swapper's outputs (read by the composite stage), all from
the run's allocator: page-locked memory on CUDA, which the swap stage's runtime copies to
and from the device directly."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from engines.protocols import Enhancer, WarmDetector
from engines.registry import EngineSet
from stream.analysis.selection import Selector
from stream.analysis.tracklets import Tracker
from stream.config import Config
from stream.errors import ConfigError
from stream.runtime.allocator import Allocator
from stream.runtime.metrics import Metrics
from stream.runtime.protocols import Sink, Source, Worker
from stream.runtime.ring import Policy, Ring
from stream.runtime.runner import Runner
from stream.runtime.slot import Slot
from stream.stages.analyse import AnalyseWorker
from stream.stages.carry import CarriedSwapper
from stream.stages.composite import CompositeWorker
from stream.stages.swap import SwapWorker

# Pictures held by the frame ring at most (a 4K ring would otherwise take ~0.5 GB).
FRAME_RING_BYTES = 256 * 1024 * 1024


@dataclass
class Pipeline:
    """A built run: its runner, and the parts others may steer while it runs."""

    runner: Runner
    tracker: Tracker
    analyse: AnalyseWorker
    swap: SwapWorker
    composite: CompositeWorker
    carried: CarriedSwapper | None = None  # each face swapped at a cadence, carried between

    @property
    def metrics(self) -> Metrics:
        return self.runner.metrics

    @property
    def rings(self) -> list[Ring]:
        return self.runner.rings

    def use_faces(self, prepared: Sequence[object]) -> None:
        """Swap in these prepared source faces from the next frame on (any thread: the analyse
        stage, which prepares each frame's faces, reads its list once per frame)."""
        self.analyse.sources = list(prepared)

    def stop(self, why: str) -> None:
        self.runner.stop(why)


def swap_cadence(config: Config, engines: EngineSet, live: bool) -> int | None:
    """How often each face's swap runs (`models.swap_every`): every N frames, or None for
    live's auto (as often as a worker off the frame path can). auto: files every frame; live,
    the neural engine at auto, the classical one every frame."""
    every = config.models.swap_every
    if every == "auto":
        return None if live and engines.name != "dlib" else 1
    return int(every)


def frame_slots(shape: tuple[int, int], depth: int, stages: int, bytes_per_pixel: int = 3) -> int:
    """Slots of the frame ring. Frames stay in their ring-A slot until encoded, so A holds
    its own queue plus everything downstream (each later ring, and one frame in each
    stage's hands), capped at FRAME_RING_BYTES of pictures: with fewer slots decode simply
    waits sooner; every stage still has work."""
    h, w = shape
    wanted = depth + stages * depth + stages + 1
    return max(stages + 2, min(wanted, FRAME_RING_BYTES // (h * w * bytes_per_pixel)))


def assemble(config: Config, engines: EngineSet, faces: Sequence[object], references: list[np.ndarray],
             shape: tuple[int, int], source: Source, sink: Sink, *, live: bool, allocator: Allocator,
             enhancer: Enhancer | None = None, metrics: Metrics | None = None,
             on_frame: Callable[[Slot], None] | None = None,
             frame_buffers: dict[str, tuple[tuple[int, ...], type]] | None = None) -> Pipeline:
    """Rings, stages and runner for one input of `shape` (height, width).

    Files: every ring blocks (every frame, in order). Live: frames are dropped at the entry
    only (ring A keeps the newest `live_ring_depth` unread), before any model has worked on
    them; a frame let in goes through every stage, the later rings blocking, so no stage's
    work is thrown away and at most `live_ring_depth` frames wait between two stages.
    `frame_buffers`: what else a frame's ring-A slot holds beside its picture (the source's
    `frame_buffers`: a 10-bit input's own planes).
    """
    metrics = metrics or Metrics()
    # The detector's points align faces only on the frame they were found in: in line then.
    # Live: in the background, merged when done; files: with detect.lag, merged that many
    # frames on.
    background = (config.detect.background if live else config.detect.lag > 0) \
        and config.track.points != "detector"
    tracker = Tracker(engines.detector, engines.landmarker, engines.embedder, config.detect, config.track,
                      background=background, lag=None if live else config.detect.lag, stagger=live)
    if live and isinstance(engines.detector, WarmDetector):
        engines.detector.warm()  # the first faces' judgement: before the camera's first frame
    selector = Selector(config.select, references, engines.embedder, config.pipeline.max_faces)
    every = swap_cadence(config, engines, live)
    carried: CarriedSwapper | None = None
    swapper = engines.swapper
    if every != 1:
        try:
            carried = CarriedSwapper(engines.swapper, every, live, metrics)
        except ValueError as exc:
            raise ConfigError(f"models.swap_every {config.models.swap_every}: {exc}") from exc
        swapper = carried
        metrics.swap_every = "auto" if every is None else str(every)
        metrics.swapper = "classical" if engines.name == "dlib" else engines.name
    analyse = AnalyseWorker(tracker, selector, swapper, faces)
    swap = SwapWorker(swapper, enhancer)
    composite = CompositeWorker(swapper, metrics, enhancer)
    workers: list[Worker] = [analyse, swap, composite]
    depth = config.pipeline.live_ring_depth if live else config.pipeline.ring_depth
    h, w = shape
    spec = {"image": ((h, w, 3), np.uint8), **(frame_buffers or {})}
    per_pixel = sum(int(np.prod(s)) * np.dtype(t).itemsize for s, t in spec.values()) // (h * w)
    slots = frame_slots(shape, depth, len(workers), max(3, per_pixel))
    if live:
        entry = Ring("A", slots, spec, policy=Policy.DROP_OLDEST, max_ready=depth, allocator=allocator)
    else:
        entry = Ring("A", slots, spec, policy=Policy.BLOCK, allocator=allocator)
    batch = swapper.batch_spec(config.pipeline.max_faces)  # the selector's cap per frame
    rings = [entry,
             Ring("B", depth, batch.inputs, policy=Policy.BLOCK, allocator=allocator),
             Ring("C", depth, batch.outputs, policy=Policy.BLOCK, allocator=allocator),
             Ring("D", depth, policy=Policy.BLOCK)]
    runner = Runner(source, workers, sink, rings, metrics, on_frame)
    return Pipeline(runner, tracker, analyse, swap, composite, carried)
