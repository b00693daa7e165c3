"""A ring slot: preallocated buffers reused for the life of the pipeline, plus the frame's timing."""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np


@dataclass(eq=False)
class Slot:
    """One reusable slot of a ring.

    `buffers` are allocated once (by the ring's allocator) and written in place. The
    timing fields travel with the frame so order and latency are never guessed:
    `seq` (0, 1, 2, ... in decode order), `pts` in `time_base` units, and
    `capture_time` (time.monotonic() when the frame entered the pipeline).
    `frame` points to the ring-A slot holding this record's picture (itself for ring A);
    `payload` is the stage's typed record for this frame (e.g. a tuple of faces).
    """

    index: int
    buffers: dict[str, np.ndarray] = field(default_factory=dict)
    seq: int = -1
    pts: int | None = None
    time_base: Fraction | None = None
    capture_time: float = 0.0
    frame: Slot | None = None
    payload: Any = None

    @property
    def image(self) -> np.ndarray:
        """The BGR picture this record belongs to."""
        owner = self.frame if self.frame is not None else self
        return owner.buffers["image"]

    def stamp_from(self, other: Slot) -> None:
        """Copy the timing of `other` (the slot this one was computed from)."""
        self.seq = other.seq
        self.pts = other.pts
        self.time_base = other.time_base
        self.capture_time = other.capture_time
        self.frame = other.frame if other.frame is not None else other

    def clear(self) -> None:
        self.seq = -1
        self.pts = None
        self.time_base = None
        self.capture_time = 0.0
        self.frame = None
        self.payload = None


@dataclass(frozen=True, eq=False)
class Pasted:
    """The composite stage's record, the one the sink gets: the boxes (x0, y0, x1, y1) of the
    faces pasted into the frame (file and RTSP encoders spend more bits there:
    `encode.face_qp`)."""

    boxes: tuple[tuple[float, float, float, float], ...] = ()

    @property
    def count(self) -> int:
        return len(self.boxes)
