"""Each face swapped at a cadence and carried between: the neural swap live on modest hardware.

A neural swap keeps the target's pose and expression, so a swap made on one frame, warped
from the landmarks it was made for onto the face's landmarks on a later frame
(engines.geometry.carry), follows the head and the face's movement; the swapper then only
refreshes the texture, as often as the machine allows. `models.swap_every`:

- **files** (`swap --swap-every N`): a face is swapped in line, in the swap stage, on its
  first frame and every N-th after; the composite stage carries that swap onto the frames
  between. The frames a face is swapped on depend on nothing but the frame numbers, so a
  run is repeatable. `auto`: every frame (1), as without a cadence.
- **live**: the swaps run off the frame path, in a thread of their own (`BackgroundSwaps`):
  the analyse stage cuts a face that is due out of its frame (a copy: the frame goes on),
  the swap stage posts it, and the worker swaps the faces posted one at a time, the most
  needed first: a face with no swap yet, then one whose pose or expression moved past a
  bound since its last swap (`moved_past_bound`), then the one swapped longest ago (the
  faces take turns). The composite stage carries each face's newest swap. A frame never
  waits for a swap; a face with none yet shows the target unchanged, never another track's.
  N: each face is cut every N frames; `auto` (live's default for the neural engine): as
  often as the worker takes them. A run falling behind makes the worker rest after each
  swap (`BackgroundSwaps.slower`, stream/job/cadence.py), and takes it back while it keeps up.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engines.face import Face, ImageBGR, Landmarks68, SwapResult
from engines.geometry.measures import eye_open_ratio, face_turn, mouth_open_ratio
from engines.protocols import BatchSpec, CarrySwapper
from stream.runtime.metrics import Metrics

log = logging.getLogger(__name__)

# Past any of these since its last swap, a face goes first in the worker's queue: its carried
# swap is being stretched over a head turned further (engines.geometry.measures.face_turn), a
# mouth opened or closed (mouth_open_ratio) or eyes opened or shut (eye_open_ratio).
TURN_BOUND = 0.15
MOUTH_BOUND = 0.12
EYES_BOUND = 0.12
# A live face's cut waiting for the worker is cut anew once it is this many frames old, so the
# worker swaps a face as it is, not as it was a swap ago.
REFRESH_FRAMES = 3
# A face not seen for this many frames is forgotten (its swap, its schedule).
FORGET_FRAMES = 150
# The worker's rest after each swap, as a share of the swap's time: doubled from REST_STEP
# up to MAX_REST while the run drops frames, halved back to 0 while it keeps up.
REST_STEP = 0.5
MAX_REST = 8.0
# The worker thread's niceness above the process's (Linux: per thread), so the frame path's
# stages win the cores when both want them.
WORKER_NICENESS = 19


def moved_past_bound(then: Landmarks68, now: Landmarks68) -> bool:
    """Whether a face's pose or expression moved past a bound between two sets of its points."""
    return (abs(face_turn(now) - face_turn(then)) > TURN_BOUND
            or abs(mouth_open_ratio(now) - mouth_open_ratio(then)) > MOUTH_BOUND
            or abs(eye_open_ratio(now) - eye_open_ratio(then)) > EYES_BOUND)


@dataclass(frozen=True, eq=False)
class Made:
    """A face's swap: what the swapper made, from which source face, on which frame, for
    which landmarks (frame pixels)."""

    swap: Any
    source: object
    seq: int
    landmarks: Landmarks68
    at: float  # time.monotonic() when it was made


@dataclass(frozen=True, eq=False)
class Cut:
    """A face cut out of frame `seq` for its swap."""

    track: int
    cut: Any
    source: object
    seq: int
    landmarks: Landmarks68


@dataclass(frozen=True, eq=False)
class CarryBatch:
    """A frame's faces, their sources, and the faces cut for a swap (by index in `faces`)."""

    faces: tuple[Face, ...]
    sources: tuple[object, ...]
    cuts: tuple[tuple[int, Cut], ...]
    seq: int


class SwapStore:
    """Each track's newest swap (any thread)."""

    def __init__(self) -> None:
        self._made: dict[int, Made] = {}
        self._lock = threading.Lock()

    def get(self, track: int) -> Made | None:
        with self._lock:
            return self._made.get(track)

    def put(self, track: int, made: Made) -> None:
        with self._lock:
            self._made[track] = made

    def forget(self, tracks: Sequence[int]) -> None:
        with self._lock:
            for track in tracks:
                self._made.pop(track, None)


class BackgroundSwaps:
    """The worker thread of a live run's swaps: one swap at a time, the most needed face first
    (see the module's docstring); `post` never waits."""

    def __init__(self, swapper: CarrySwapper, store: SwapStore, metrics: Metrics) -> None:
        self.swapper = swapper
        self.store = store
        self.metrics = metrics
        self.rest = 0.0  # the share of each swap's time the worker rests after it
        self.swaps = 0
        self.busy_s = 0.0  # time spent swapping
        self.failed: BaseException | None = None
        self._pending: dict[int, Cut] = {}
        self._cv = threading.Condition()
        self._stopped = False
        # Started with the first cut posted: a pipeline built and never run owns no thread.
        self._thread = threading.Thread(target=self._loop, name="swap-worker", daemon=True)

    def wants(self, track: int, seq: int) -> bool:
        """Whether the face of `track` should be cut on frame `seq`: it has no cut waiting, or
        the one waiting is REFRESH_FRAMES old."""
        with self._cv:
            waiting = self._pending.get(track)
        return waiting is None or seq - waiting.seq >= REFRESH_FRAMES

    def post(self, cuts: Sequence[Cut]) -> None:
        """Hand cut faces to the worker, each replacing its track's cut still waiting."""
        if not cuts:
            return
        with self._cv:
            if self._stopped:
                return
            for cut in cuts:
                self._pending[cut.track] = cut
            if self._thread.ident is None:
                self._thread.start()
            self._cv.notify()

    def drop(self, tracks: Sequence[int]) -> None:
        """Forget the cuts of tracks that have gone."""
        with self._cv:
            for track in tracks:
                self._pending.pop(track, None)

    def slower(self) -> bool:
        """Rest longer after each swap (a run falling behind); False at MAX_REST already."""
        if self.rest >= MAX_REST:
            return False
        self.rest = min(MAX_REST, REST_STEP if self.rest == 0 else self.rest * 2)
        log.info("swaps: resting %.1fx each swap's time after it (frames dropped)", self.rest)
        return True

    def faster(self) -> bool:
        """Rest less (a run keeping up); False when it does not rest."""
        if self.rest == 0:
            return False
        self.rest = 0.0 if self.rest <= REST_STEP else self.rest / 2
        log.info("swaps: resting %.1fx each swap's time after it (keeping up)", self.rest)
        return True

    def _next(self) -> Cut | None:
        """The most needed cut waiting (under the lock), taken off the queue; None when stopped."""
        while not self._pending and not self._stopped:
            self._cv.wait()
        if self._stopped:
            return None

        def need(cut: Cut) -> tuple[int, float]:
            made = self.store.get(cut.track)
            if made is None or made.source is not cut.source:
                return 0, 0.0
            return (1 if moved_past_bound(made.landmarks, cut.landmarks) else 2), made.at

        track = min(self._pending, key=lambda t: need(self._pending[t]))
        return self._pending.pop(track)

    def _loop(self) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WORKER_NICENESS)
        except (AttributeError, OSError):  # not Linux, or not allowed: same priority as the stages
            pass
        while True:
            with self._cv:
                cut = self._next()
            if cut is None:
                return
            t0 = time.monotonic()
            try:
                swap = self.swapper.swap_cut(cut.cut)
            except BaseException as exc:  # handed to the frame path, which stops the run with it
                self.failed = exc
                return
            took = time.monotonic() - t0
            log.debug("swapped track %d (frame %d) in %.0f ms", cut.track, cut.seq, took * 1000)
            self.swaps += 1
            self.busy_s += took
            self.metrics.count_swaps(made=1)
            if swap is not None:
                self.store.put(cut.track, Made(swap, cut.source, cut.seq, cut.landmarks, time.monotonic()))
            if self.rest > 0:
                with self._cv:
                    self._cv.wait_for(lambda: self._stopped, timeout=self.rest * took)

    def close(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
        if self._thread.ident is not None:
            self._thread.join()


class CarriedSwapper:
    """A `CarrySwapper` behind the pipeline's `Swapper` phases, swapping each face at a cadence
    (`every` frames; None: live's auto) and carrying its newest swap between. `live`: the
    swaps run in a `BackgroundSwaps` thread; otherwise in line, in the swap stage."""

    def __init__(self, swapper: Any, every: int | None, live: bool, metrics: Metrics) -> None:
        if not isinstance(swapper, CarrySwapper):
            raise ValueError(f"the {swapper.name} swapper cannot be carried between swaps")
        if every is None and not live:
            raise ValueError("a file run swaps every N frames (auto is live's)")
        self.inner = swapper
        self.name = swapper.name
        self.every = every
        self.metrics = metrics
        self.store = SwapStore()
        self.worker = BackgroundSwaps(swapper, self.store, metrics) if live else None
        self.cuts_occluders = getattr(swapper, "cuts_occluders", False)
        self.optional_steps = getattr(swapper, "optional_steps", ())
        self._frames = 0  # frames prepared (the analyse stage's count)
        self._cut_at: dict[int, tuple[int, object]] = {}  # track -> (frame, source) of its last cut
        self._seen: dict[int, int] = {}  # track -> the last frame it was on (the composite's)

    @property
    def calls(self) -> int:
        return self.inner.calls

    def open(self) -> None:
        self.inner.open()

    def prepare_source(self, image: ImageBGR, landmarks: Landmarks68) -> object:
        return self.inner.prepare_source(image, landmarks)

    def prepare_views(self, views: Sequence[tuple[ImageBGR, Landmarks68]]) -> object:
        return self.inner.prepare_views(views)

    def forward(self, frame: ImageBGR, face: Face, source: Any) -> SwapResult | None:
        return self.inner.forward(frame, face, source)

    def forward_many(self, frame: ImageBGR, faces: Sequence[Face], sources: Sequence[Any]) -> list[SwapResult | None]:
        return self.inner.forward_many(frame, faces, sources)

    def batch_spec(self, max_faces: int) -> BatchSpec:
        return BatchSpec()  # each cut is its own copy, made on the frame path

    def _due(self, track: int, source: object, seq: int) -> bool:
        if track < 0:
            return True  # a face without a track (a picture's): swapped where it is
        last = self._cut_at.get(track)
        if last is None or last[1] is not source:
            return self.worker is None or self.worker.wants(track, seq)
        if self.every is None:
            assert self.worker is not None
            return self.worker.wants(track, seq)
        return seq - last[0] >= self.every

    def prepare_batch(self, frame: ImageBGR, faces: Sequence[Face], sources: Sequence[Any],
                      inputs: Mapping[str, np.ndarray]) -> CarryBatch:
        """The analyse stage: the faces due for a swap cut out of the frame (copies)."""
        if len(faces) != len(sources):
            raise ValueError(f"{len(faces)} faces but {len(sources)} sources")
        seq = self._frames
        self._frames += 1
        cuts = []
        for i, (face, source) in enumerate(zip(faces, sources)):
            if not self._due(face.track_id, source, seq):
                continue
            cut = self.inner.cut(frame, face, source)
            if cut is None:
                continue
            if face.track_id >= 0:
                self._cut_at[face.track_id] = (seq, source)
            cuts.append((i, Cut(face.track_id, cut, source, seq, np.asarray(face.landmarks, np.float32))))
        if seq % FORGET_FRAMES == 0:
            gone = [t for t, (at, _) in self._cut_at.items() if seq - at > FORGET_FRAMES]
            for track in gone:
                del self._cut_at[track]
        return CarryBatch(tuple(faces), tuple(sources), tuple(cuts), seq)

    def forward_batch(self, batch: CarryBatch, inputs: Mapping[str, np.ndarray],
                      outputs: Mapping[str, np.ndarray]) -> list[tuple[int, Any]]:
        """The swap stage: the cut faces swapped in line (files, and faces without a track), or
        posted to the worker (live): the swaps made here, by face index."""
        if self.worker is None:
            made = [(i, self.inner.swap_cut(cut.cut)) for i, cut in batch.cuts]
            self.metrics.count_swaps(made=len(made))
            return made
        self.worker.post([cut for _, cut in batch.cuts if cut.track >= 0])
        made = [(i, self.inner.swap_cut(cut.cut)) for i, cut in batch.cuts if cut.track < 0]
        self.metrics.count_swaps(made=len(made))
        return made

    def finish_batch(self, frame: ImageBGR, batch: CarryBatch, swapped: list[tuple[int, Any]]
                     ) -> list[SwapResult | None]:
        """The composite stage: each face's newest swap (from its own track, for its source
        now) carried onto the face as it is in this frame."""
        if self.worker is not None and self.worker.failed is not None:
            raise self.worker.failed
        fresh = dict(swapped)
        cuts = dict(batch.cuts)
        swaps: list[Any] = []
        carried: list[int] = []  # faces given a swap made on an earlier frame
        for i, (face, source) in enumerate(zip(batch.faces, batch.sources)):
            track = face.track_id
            if i in fresh:
                swap = fresh[i]
                if track >= 0 and swap is not None:
                    cut = cuts[i]
                    self.store.put(track, Made(swap, source, batch.seq, cut.landmarks, time.monotonic()))
            else:
                made = self.store.get(track) if track >= 0 else None
                swap = made.swap if made is not None and made.source is source else None
                if swap is not None:
                    carried.append(i)
            swaps.append(swap)
            if track >= 0:
                self._seen[track] = batch.seq
        if batch.seq % FORGET_FRAMES == 0:
            gone = [t for t, at in self._seen.items() if batch.seq - at > FORGET_FRAMES]
            for track in gone:
                del self._seen[track]
            self.store.forget(gone)
            if self.worker is not None:
                self.worker.drop(gone)
        results = self.inner.carry_many(frame, batch.faces, swaps)
        self.metrics.count_swaps(carried=sum(results[i] is not None for i in carried))
        return results

    def paste(self, frame: ImageBGR, face: Face, result: SwapResult) -> None:
        self.inner.paste(frame, face, result)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
