"""Detection cadence that adapts to load in live runs."""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from stream.analysis.tracklets import Tracker
from stream.runtime.ring import Ring

log = logging.getLogger(__name__)

CADENCE_WINDOW_S = 1.0  # seconds between cadence decisions
CADENCE_MAX_FACTOR = 4


class AdaptiveCadence:
    """Raises the tracker's detection interval while the pipeline drops frames, lowers it
    back when it keeps up (three calm seconds halve it). Called for every frame delivered."""

    def __init__(self, tracker: Tracker, rings: Sequence[Ring], base_every: int) -> None:
        self.tracker = tracker
        self.rings = list(rings)
        self.base = base_every
        self.max_every = base_every * CADENCE_MAX_FACTOR
        self.changes = 0
        self.highest = base_every
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
            if every < self.max_every:
                self._set(min(every * 2, self.max_every), f"{new_drops} frames dropped")
        else:
            self._calm += 1
            if self._calm >= 3 and every > self.base:
                self._calm = 0
                self._set(max(every // 2, self.base), "keeping up")

    def _set(self, every: int, why: str) -> None:
        log.info("detection every %d frames (%s)", every, why)
        self.tracker.detect_every = every
        self.changes += 1
        self.highest = max(self.highest, every)
