"""What each model family may lose to INT8, and the verdict on a set of drift figures.

Every figure is measured on held-out inputs (not the calibration set), comparing the INT8
file's outputs with its float original's on the same inputs:

- swapper: PSNR of the pasted face region (the swapped crop inside the paste mask) >= 30 dB,
  and cosine of the two swapped faces' identity embeddings (ArcFace, where its file is
  found) >= 0.98;
- detector: recall of the float model's faces >= 99% (IoU >= 0.5), median box IoU >= 0.95;
- embedder and the swappers' embedding converter: 1 - cosine, median <= 0.01, p95 <= 0.03;
- enhancer: PSNR >= 30 dB;
- occluder (XSeg) and parser (BiSeNet): mask IoU >= 0.95;
- landmarker (2dfan4): mean point error, median <= 1% of the 256 px crop (2.56 px).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limit:
    """One measure's bound: `at_least` for a floor (PSNR), else a ceiling (drift)."""

    measure: str
    bound: float
    at_least: bool
    unit: str = ""

    def text(self) -> str:
        return f"{self.measure} {'>=' if self.at_least else '<='} {self.bound:g}{self.unit}"

    def missed(self, value: float) -> str:
        """'' when `value` is within the limit, else the miss in words, by how much."""
        ok = value >= self.bound if self.at_least else value <= self.bound
        if ok:
            return ""
        return (f"{self.measure} {value:.4g}{self.unit} {'<' if self.at_least else '>'} "
                f"{self.bound:g}{self.unit} (by {abs(value - self.bound):.3g}{self.unit})")


_EMBEDDING = (Limit("drift_median", 0.01, False), Limit("drift_p95", 0.03, False))
_MASK = (Limit("mask_iou", 0.95, True),)
BUDGETS: dict[str, tuple[Limit, ...]] = {
    "swapper": (Limit("psnr", 30.0, True, " dB"), Limit("identity_cosine", 0.98, True)),
    "detector": (Limit("recall", 0.99, True), Limit("box_iou_median", 0.95, True)),
    "embedder": _EMBEDDING,
    "converter": _EMBEDDING,
    "enhancer": (Limit("psnr", 30.0, True, " dB"),),
    "occluder": _MASK,
    "parser": _MASK,
    "landmarker": (Limit("point_error_median", 0.01, False),),
}


def budget(kind: str) -> tuple[Limit, ...]:
    """The limits of a catalog kind; a ValueError naming the known kinds otherwise."""
    try:
        return BUDGETS[kind]
    except KeyError:
        raise ValueError(f"no drift budget for model kind {kind!r}; known: {', '.join(BUDGETS)}") from None


def verdict(kind: str, measures: dict[str, float]) -> str:
    """'' when every measured limit holds, else the first miss in words. A limit whose measure
    was not taken (identity without an ArcFace file) is not judged: the report says so."""
    for limit in budget(kind):
        if limit.measure in measures:
            miss = limit.missed(measures[limit.measure])
            if miss:
                return miss
    return ""


def budget_words(kind: str) -> dict[str, str]:
    return {limit.measure: limit.text() for limit in budget(kind)}
