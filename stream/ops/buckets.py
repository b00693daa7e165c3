"""A histogram's running counts (fixed bounds, cumulative only at exposition), fed either
from a pipeline's own per-frame time records at scrape time or by a timed model call."""
from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable

# Seconds: a frame's stage takes a millisecond to a few tens; a whole frame's latency tens to
# hundreds; a slow CPU's neural swap up to a second or more.
BOUNDS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Buckets:
    """Counts of durations per bound (not cumulative), their sum and count. `add` may be
    called from any thread (a lock held for a few hundred nanoseconds)."""

    def __init__(self, bounds: tuple[float, ...] = BOUNDS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound
        self.sum = 0.0
        self._lock = threading.Lock()

    def add(self, seconds: float) -> None:
        at = bisect.bisect_left(self.bounds, seconds)
        with self._lock:
            self.counts[at] += 1
            self.sum += seconds

    def add_many(self, values: Iterable[float]) -> None:
        bounds = self.bounds
        counts = [0] * len(self.counts)
        total = 0.0
        for seconds in values:
            counts[bisect.bisect_left(bounds, seconds)] += 1
            total += seconds
        with self._lock:
            for i, n in enumerate(counts):
                self.counts[i] += n
            self.sum += total

    @property
    def count(self) -> int:
        return sum(self.counts)

    def exposed(self) -> tuple[list[tuple[str, float]], float]:
        """Cumulative (le, count) pairs ending with +Inf, and the sum: a Prometheus histogram."""
        with self._lock:
            counts, total = list(self.counts), self.sum
        rows: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip(self.bounds, counts):
            running += n
            rows.append((repr(float(bound)), running))
        rows.append(("+Inf", running + counts[-1]))
        return rows, total
