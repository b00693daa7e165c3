"""What swapping at a cadence costs: a run that swaps each face every N frames and carries the
swap between (`models.swap_every`, stream/stages/carry.py) against the same run swapping every
frame (N = 1, the reference).

For each output at N > 1: the change of its identity distance and landmark shift from the
every-frame output's, its flicker (output / input, as the suite measures it) and that flicker
against the every-frame output's, and the PSNR of its face regions against the every-frame
output's (the carry's error, in dB; inf: the same pixels). The face regions are the ground
truth's face boxes grown by FACE_GROW about their centres, clipped to the frame: where a swap
pastes. On the suite's clips that box holds all of the classical swap's paste (of the pixels
it changes by more than 8 grey levels, at most 0.2% lie outside the box grown by 1.4; the
face-like clip's 1.4% are its drawn patterns' sharp colour edges, which the output's 4:2:0
chroma moves), and 97-99% of inswapper's (its soft mask reaches past the face; 89% on the
rotate clip, where the upright box of a face rolled 30 degrees misses the corners of its
turned crop).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tools.quality.measure import MeasureError, QualityReport, read_frames
from tools.quality.truth import ClipTruth, FrameTruth, clip_box, grow

# The face region whose pixels the PSNR compares: the truth's face box grown by this.
FACE_GROW = 1.6
# The goals for swap_every 4 against every frame (issue 56): identity distance within
# 0.02, landmark shift within 1% of the inter-ocular distance (the shift's unit), flicker
# (output / input) at most 1.15.
IDENTITY_GOAL = 0.02
SHIFT_GOAL = 0.01
FLICKER_GOAL = 1.15


def parse_cadences(text: str) -> tuple[int, ...]:
    """`--swap-every`'s list ("4,8"): whole numbers >= 1, sorted, with 1 (the reference) first
    whether named or not. ValueError quoting the bad value."""
    values = set()
    for part in (p.strip() for p in text.split(",")):
        if not part.isdigit() or int(part) < 1:
            raise ValueError(f"--swap-every: {part!r} is not a whole number >= 1")
        values.add(int(part))
    return tuple(sorted(values | {1}))


def label(config: str, every: int) -> str:
    """A cadence's config label in the tables: `default@4`."""
    return f"{config}@{every}"


def split_label(text: str) -> tuple[str, int] | None:
    """(config, N) of a label made by `label`; None for a label without a cadence."""
    config, at, every = text.rpartition("@")
    return (config, int(every)) if at and every.isdigit() else None


def face_mask(truth: FrameTruth, shape: tuple[int, ...]) -> np.ndarray:
    """The frame's face regions (boolean, the frame's height x width): each face box of the
    truth grown by FACE_GROW, clipped to the frame."""
    h, w = shape[:2]
    mask = np.zeros((h, w), bool)
    for box in truth.faces:
        x0, y0, x1, y1 = clip_box(grow(box, FACE_GROW), (w, h))
        if x1 > x0 and y1 > y0:
            mask[y0:y1, x0:x1] = True
    return mask


def psnr(squared: float, count: int) -> float:
    """PSNR in dB of a summed squared error over `count` 8-bit samples (inf when it is 0)."""
    if count == 0:
        return math.nan
    mse = squared / count
    return math.inf if mse == 0 else 10.0 * math.log10(255.0 ** 2 / mse)


@dataclass
class FacePsnr:
    """Squared error in the face regions, summed over frames: the whole clip's PSNR, the
    worst frame's and which frame that is; `carried`: over the frames named carried only."""

    squared: float = 0.0
    count: int = 0
    carried_squared: float = 0.0
    carried_count: int = 0
    worst: float = math.inf
    worst_frame: int = -1
    frames: int = 0

    def add(self, reference: np.ndarray, other: np.ndarray, mask: np.ndarray, carried: bool = False) -> None:
        """One frame of both outputs (`mask`: its face regions); `carried`: a face of it was
        carried (not swapped on this frame)."""
        i = self.frames
        self.frames += 1
        if not mask.any():
            return
        diff = reference[mask].astype(np.float32) - other[mask].astype(np.float32)
        squared, count = float(np.square(diff).sum()), diff.size
        self.squared += squared
        self.count += count
        if carried:
            self.carried_squared += squared
            self.carried_count += count
        frame_psnr = psnr(squared, count)
        if frame_psnr < self.worst:
            self.worst, self.worst_frame = frame_psnr, i

    @property
    def psnr(self) -> float:
        return psnr(self.squared, self.count)

    @property
    def carried_psnr(self) -> float | None:
        return psnr(self.carried_squared, self.carried_count) if self.carried_count else None


def output_psnr(reference: Path, other: Path, truth: ClipTruth) -> FacePsnr:
    """The face regions of output `other` against those of `reference`, frame by frame."""
    figures = FacePsnr()
    others = read_frames(other)
    for i, ref in enumerate(read_frames(reference)):
        out = next(others, None)
        if out is None or i >= len(truth.frames) or out.shape != ref.shape:
            raise MeasureError(f"{other}: does not match {reference} frame for frame (frame {i})")
        figures.add(ref, out, face_mask(truth.frames[i], ref.shape))
    if next(others, None) is not None:
        raise MeasureError(f"{other}: more frames than {reference}")
    return figures


@dataclass
class CadenceRow:
    """One output swapped every N frames, against the same config every frame. The identity,
    shift and flicker figures are None where the run was not measured for them (the neural
    stand-in: its random weights make no face to measure)."""

    clip: str
    config: str  # the config's label without its cadence
    every: int
    psnr: float
    worst_psnr: float
    worst_frame: int
    carried_psnr: float | None = None  # the frames with a carried face only (where known)
    dist_delta: float | None = None  # identity distance after, N's minus every frame's
    shift_delta: float | None = None  # landmark shift, N's minus every frame's
    flicker: float | None = None  # N's output / input
    flicker_vs_every: float | None = None  # N's flicker / every frame's
    jitter_vs_every: float | None = None  # N's jitter / every frame's
    swaps: int | None = None  # swapper runs (where known)
    carried: int | None = None  # faces pasted from an earlier frame's swap (where known)
    misses: list[str] = field(default_factory=list)  # the goals missed: identity, shift, flicker


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def compare(reference: QualityReport, report: QualityReport, config: str, every: int,
            figures: FacePsnr) -> CadenceRow:
    """`report` (`config` swapped every `every` frames) against `reference` (every frame),
    with the face regions' PSNR between their outputs."""
    row = CadenceRow(report.clip, config, every, figures.psnr, figures.worst, figures.worst_frame,
                     dist_delta=_diff(report.dist_after, reference.dist_after),
                     shift_delta=_diff(report.landmark_shift, reference.landmark_shift),
                     flicker=report.flicker, flicker_vs_every=_ratio(report.flicker, reference.flicker),
                     jitter_vs_every=_ratio(report.jitter, reference.jitter))
    row.misses = [name for name, missed in (
        ("identity", row.dist_delta is not None and abs(row.dist_delta) > IDENTITY_GOAL),
        ("shift", row.shift_delta is not None and row.shift_delta > SHIFT_GOAL),
        ("flicker", row.flicker is not None and row.flicker > FLICKER_GOAL)) if missed]
    return row


def suite_rows(workdir: Path, reports: Sequence[QualityReport]) -> list[CadenceRow]:
    """Each suite output at a cadence N > 1 (config label `name@N`, written by the suite as
    `<clip>.<name>@N.mp4` in `workdir`) against its clip's `name@1` output."""
    by_label = {(r.clip, r.config): r for r in reports}
    rows = []
    for r in reports:
        parsed = split_label(r.config)
        if parsed is None or parsed[1] == 1:
            continue
        config, every = parsed
        ref = by_label.get((r.clip, label(config, 1)))
        if ref is None:
            raise MeasureError(f"{r.clip} / {r.config}: no every-frame output ({label(config, 1)}) to compare with")
        truth = ClipTruth.load(workdir / f"{r.clip}.json")
        figures = output_psnr(workdir / f"{r.clip}.{ref.config}.mp4", workdir / f"{r.clip}.{r.config}.mp4", truth)
        rows.append(compare(ref, r, config, every, figures))
    return rows


def mean_by_cadence(rows: Iterable[CadenceRow]) -> dict[tuple[str, int], dict[str, float]]:
    """The curve: per (config, N), the mean over clips of the PSNR and of each delta."""
    groups: dict[tuple[str, int], list[CadenceRow]] = {}
    for row in rows:
        groups.setdefault((row.config, row.every), []).append(row)
    curve = {}
    for key, group in sorted(groups.items()):
        means: dict[str, float] = {}
        for name in ("psnr", "carried_psnr", "dist_delta", "shift_delta", "flicker", "flicker_vs_every",
                     "jitter_vs_every"):
            values = [getattr(r, name) for r in group if getattr(r, name) is not None]
            if values:
                means[name] = float(np.mean(values))
        curve[key] = means
    return curve
