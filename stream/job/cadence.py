"""Live runs adapt to load: optional quality steps are shed and detection runs less often;
both come back, detection first, while the run keeps up."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from stream.analysis.tracklets import Tracker
from stream.config import Config
from stream.runtime.ring import Ring

log = logging.getLogger(__name__)

CADENCE_WINDOW_S = 1.0  # seconds between cadence decisions
CADENCE_MAX_FACTOR = 4


# Optional steps in the order a run falling behind sheds them (the costliest a face first,
# tools/cost_parts.py on the six-face clip): the predictor on every frame (1.7 ms: shed, it
# places each face's points every other frame and the flow carries them between, as
# track.landmarks_every 2 does), the squeezed-triangle sampling (1.3 ms), the occlusion
# finder (1.2 ms), the blend's second band (0.3 ms at 110 px, 1.2 ms at 200 px), shading
# (0.7 ms), lip colour (0.6 ms), detail (0.35 ms).
SHED_ORDER = ("landmarks_each_frame", "resample", "occlusion", "bands", "shading", "lip_color", "detail")
SHED_LANDMARKS_EVERY = 2  # track.landmarks_every while "landmarks_each_frame" is shed


def sheddable(config: Config, swapper: object) -> list[str]:
    """The optional steps this run does and may shed, in SHED_ORDER: those the swapper
    names in `optional_steps` that the config has on, the occlusion finder where the
    swapper cuts occluders out and the config looks for them, and the predictor on every
    frame where the config runs it so (track.landmarks_every 1)."""
    swap = config.swap
    on = {"resample": swap.resample, "shading": swap.shading > 0,
          "bands": swap.fine_feather > 0 and swap.blend == "feather",
          "lip_color": swap.lip_color and swap.color_transfer, "detail": swap.detail > 0}
    steps = set(getattr(swapper, "optional_steps", ()))
    if config.track.landmarks_every == 1 and config.track.points == "landmarks":
        steps.add("landmarks_each_frame")
        on["landmarks_each_frame"] = True
    if getattr(swapper, "cuts_occluders", False) and config.track.occlusion:
        steps.add("occlusion")
        on["occlusion"] = True
    return [name for name in SHED_ORDER if name in steps and on.get(name, False)]


class Pace(Protocol):
    """A worker off the frame path whose pace a run falling behind slows (the live swaps'
    worker, stream.stages.carry.BackgroundSwaps): each call one step, False when none is left."""

    def slower(self) -> bool: ...

    def faster(self) -> bool: ...


class AdaptiveCadence:
    """While the pipeline drops frames, sheds one optional step a second (`steps`, in
    order; `use_skip` is given the set shed so far) and doubles the tracker's detection
    interval (up to CADENCE_MAX_FACTOR times the base): detection, the largest cost, backs
    off at once, as it did before steps could be shed. While it keeps
    up, every three calm seconds take back one change, the last made first: detection's
    cadence comes down to its base before the steps return. With `swaps` (a live run's
    neural swaps off the frame path), their worker is slowed a step first, before any quality
    step is shed, and given its pace back last. Called for every frame delivered."""

    def __init__(self, tracker: Tracker, rings: Sequence[Ring], base_every: int,
                 steps: Sequence[str] = (), use_skip: Callable[[frozenset[str]], None] | None = None,
                 swaps: Pace | None = None) -> None:
        self.tracker = tracker
        self.rings = list(rings)
        self.base = base_every
        self.max_every = base_every * CADENCE_MAX_FACTOR
        self.changes = 0
        self.highest = base_every
        self.steps = list(steps)
        self.use_skip = use_skip
        self.shed: list[str] = []  # shed now, in the order they were
        self.ever_shed: list[str] = []  # every step shed at some point of the run
        self.shed_changes = 0
        self.swaps = swaps
        self.swaps_slowed = 0  # steps the swaps' worker was slowed by, in all
        self._since: float | None = None
        self._drops_seen = 0
        self._calm = 0

    def on_frame(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self._since is None:
            self._since = now
        if now - self._since < CADENCE_WINDOW_S:
            return
        self._since = now
        drops = sum(r.drops for r in self.rings)
        new_drops, self._drops_seen = drops - self._drops_seen, drops
        every = self.tracker.detect_every
        if new_drops > 0:
            self._calm = 0
            left = [s for s in self.steps if s not in self.shed]
            if self.swaps is not None and self.swaps.slower():
                self.swaps_slowed += 1
            elif left and self.use_skip is not None:
                self._shed([*self.shed, left[0]], f"{new_drops} frames dropped")
            if every < self.max_every:
                self._set(min(every * 2, self.max_every), f"{new_drops} frames dropped")
        else:
            self._calm += 1
            if self._calm >= 3:
                self._calm = 0
                if every > self.base:
                    self._set(max(every // 2, self.base), "keeping up")
                elif self.shed:
                    self._shed(self.shed[:-1], "keeping up")
                elif self.swaps is not None:
                    self.swaps.faster()

    def _shed(self, shed: list[str], why: str) -> None:
        gone = [s for s in shed if s not in self.shed]
        log.info("%s %s (%s)", "shedding" if gone else "taking back",
                 ", ".join(gone or [s for s in self.shed if s not in shed]), why)
        self.shed = shed
        for name in gone:
            if name not in self.ever_shed:
                self.ever_shed.append(name)
        assert self.use_skip is not None
        self.use_skip(frozenset(shed))
        self.shed_changes += 1

    def _set(self, every: int, why: str) -> None:
        log.info("detection every %d frames (%s)", every, why)
        self.tracker.detect_every = every
        self.changes += 1
        self.highest = max(self.highest, every)
