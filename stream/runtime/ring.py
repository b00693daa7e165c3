"""Bounded rings of preallocated slots joining two pipeline stages.

A ring owns `capacity` slots whose buffers are allocated once. The producer takes a
free slot (`acquire`), fills it and `publish`es it; the consumer `take`s the oldest
published slot and, when done with it, `release`s it back to the free list. Nothing
frame-sized is allocated per frame.

Back-pressure is the ring's policy:
- `block`: `acquire` waits for a free slot; every frame is processed, in order.
- `drop_oldest`: `acquire` never waits; with no free slot it reclaims the oldest
  published-but-unread slot (counted in `drops`), so a live pipeline keeps showing the
  newest frames instead of building a standing queue. With `max_ready`, publishing
  also drops the oldest unread slots beyond that many: the consumer always takes one of
  the newest (a live pipeline's entry).

Shutdown: `close()` (the producer is done) lets the consumer drain what is published and
then raises `EndOfStream`; `abort()` wakes every waiter at once with `PipelineAborted`, so
no thread waits forever on a ring whose other side has died.
"""
from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from enum import Enum

import numpy as np

from stream.errors import EndOfStream, PipelineAborted
from stream.runtime.allocator import Allocator, NumpyAllocator
from stream.runtime.slot import Slot

BufferSpec = Mapping[str, tuple[tuple[int, ...], np.dtype | type]]


class Policy(str, Enum):
    BLOCK = "block"
    DROP_OLDEST = "drop_oldest"


class Ring:
    """A bounded ring of reusable slots with a back-pressure policy (see module doc)."""

    def __init__(
        self,
        name: str,
        capacity: int,
        spec: BufferSpec | None = None,
        *,
        policy: Policy = Policy.BLOCK,
        allocator: Allocator | None = None,
        on_drop: Callable[[Slot], None] | None = None,
        max_ready: int | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"ring {name!r}: capacity must be >= 1, got {capacity}")
        self.name = name
        self.capacity = capacity
        self.policy = Policy(policy)
        self.on_drop = on_drop
        if max_ready is not None and (max_ready < 1 or self.policy is not Policy.DROP_OLDEST):
            raise ValueError(f"ring {name!r}: max_ready needs drop_oldest and >= 1, got {max_ready}")
        self.max_ready = max_ready
        alloc = allocator or NumpyAllocator()
        spec = spec or {}
        self.slots = [
            Slot(i, {key: alloc.empty(shape, dtype) for key, (shape, dtype) in spec.items()})
            for i in range(capacity)
        ]
        self._free: deque[Slot] = deque(self.slots)
        self._ready: deque[Slot] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._abort: BaseException | None = None
        self.drops = 0
        self.published = 0
        self._occupancy_sum = 0
        self.occupancy_max = 0

    # -- producer side -----------------------------------------------------------------

    def acquire(self) -> Slot | None:
        """A free slot to fill. Under `drop_oldest` this never waits: it reclaims the
        oldest unread slot, or returns None (the caller drops its frame) when every slot
        is held downstream."""
        with self._cond:
            while True:
                if self._abort is not None:
                    raise PipelineAborted(f"ring {self.name} aborted") from self._abort
                if self._free:
                    return self._free.popleft()
                if self.policy is Policy.DROP_OLDEST:
                    self.drops += 1
                    if not self._ready:
                        return None
                    victim = self._ready.popleft()
                    if self.on_drop is not None:
                        self.on_drop(victim)
                    victim.clear()
                    return victim
                self._cond.wait()

    def publish(self, slot: Slot) -> None:
        """Hand a filled slot to the consumer."""
        with self._cond:
            if self._abort is not None:
                raise PipelineAborted(f"ring {self.name} aborted") from self._abort
            self._ready.append(slot)
            self.published += 1
            while self.max_ready is not None and len(self._ready) > self.max_ready:
                victim = self._ready.popleft()
                self.drops += 1
                if self.on_drop is not None:
                    self.on_drop(victim)
                victim.clear()
                self._free.append(victim)
            depth = len(self._ready)
            self._occupancy_sum += depth
            self.occupancy_max = max(self.occupancy_max, depth)
            self._cond.notify_all()

    def close(self) -> None:
        """The producer is done: the consumer drains, then gets EndOfStream."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- consumer side -----------------------------------------------------------------

    def take(self, timeout: float | None = None) -> Slot:
        """The oldest published slot; waits for one. Raises EndOfStream after `close()`
        once drained, PipelineAborted after `abort()`, TimeoutError after `timeout` s."""
        with self._cond:
            while not self._ready:
                if self._abort is not None:
                    raise PipelineAborted(f"ring {self.name} aborted") from self._abort
                if self._closed:
                    raise EndOfStream(f"ring {self.name} ended")
                if not self._cond.wait(timeout):
                    raise TimeoutError(f"ring {self.name}: nothing published in {timeout} s")
            if self._abort is not None:
                raise PipelineAborted(f"ring {self.name} aborted") from self._abort
            return self._ready.popleft()

    def release(self, slot: Slot) -> None:
        """Give a consumed slot back to the free list."""
        with self._cond:
            slot.clear()
            self._free.append(slot)
            self._cond.notify_all()

    # -- both --------------------------------------------------------------------------

    def abort(self, cause: BaseException | None = None) -> None:
        """Wake every waiter with PipelineAborted (a stage failed or the user stopped)."""
        with self._cond:
            if self._abort is None:
                self._abort = cause or PipelineAborted(f"ring {self.name} aborted")
            self._cond.notify_all()

    @property
    def aborted(self) -> bool:
        return self._abort is not None

    @property
    def mean_occupancy(self) -> float:
        return self._occupancy_sum / self.published if self.published else 0.0
