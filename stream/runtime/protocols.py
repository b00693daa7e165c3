"""The three roles of a run, one per-frame method each: a source fills a slot, a worker
computes one slot from another, a sink delivers a finished slot."""
from __future__ import annotations

from typing import Protocol

from stream.runtime.slot import Slot


class Source(Protocol):
    # Seconds the last `read_into` spent waiting for its frame to exist (a camera's pace, a
    # peer's network): not decoding time. 0 for sources whose frames are always there.
    wait_s: float

    def read_into(self, slot: Slot) -> bool:
        """Fill `slot` with the next frame; False at the end of the stream."""
        ...

    def close(self) -> None: ...


class Worker(Protocol):
    name: str

    def process(self, item: Slot, out: Slot) -> None:
        """Compute `out` (already stamped with item's timing and frame) from `item`."""
        ...

    def close(self) -> None: ...


class Sink(Protocol):
    def write(self, slot: Slot) -> None:
        """Deliver the finished frame of `slot` (its picture is `slot.image`)."""
        ...

    def close(self) -> None: ...
