"""The typed records the stages hand on: ring B's prepared faces, ring C's swapped ones."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engines.face import Face, SwapResult


@dataclass(frozen=True, eq=False)
class PreparedFaces:
    """Ring B: the faces of a frame to swap, and the swapper's prepared batch for them (its
    model inputs are in the ring slot's buffers)."""

    faces: tuple[Face, ...]
    batch: Any


@dataclass(frozen=True, eq=False)
class SwappedFaces:
    """Ring C: the swap stage's work on a frame's faces. Without an enhancer, `output` is
    the swapper's model output (in the ring slot's buffers where the runtime wrote there),
    which the composite stage finishes; with one, `results` are final (the enhancer's)."""

    faces: tuple[Face, ...]
    batch: Any
    output: Any = None
    results: tuple[tuple[Face, SwapResult], ...] | None = None
