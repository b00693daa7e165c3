"""Ground truth of a quality clip: where its faces and its face-like non-faces are, frame by frame.

Saved as JSON beside the clip (`clip.json` for `clip.mp4`). Boxes are (x0, y0, x1, y1) in
frame pixels. A face box is upright and sized like dlib's HOG box of that face (the
68-point predictor expects one), and is not clipped to the frame: a face leaving the
frame keeps its whole box, and `visible` says how much of it is inside.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class Patch:
    """A region that is not a face: a badge, a print, an occluder in front of a face."""

    kind: str
    box: Box


@dataclass(frozen=True)
class FrameTruth:
    faces: tuple[Box, ...] = ()
    angles: tuple[float, ...] = ()  # each face's in-plane rotation, degrees
    nonfaces: tuple[Patch, ...] = ()  # face-like patterns: a swap there is an error
    occluders: tuple[Patch, ...] = ()  # things in front of a face: they should stay as they are


@dataclass(frozen=True)
class ClipTruth:
    name: str
    description: str
    fps: int
    size: tuple[int, int]  # width, height
    source: str  # the source photo's file name, beside the clip
    frames: tuple[FrameTruth, ...] = field(default_factory=tuple)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=None))

    @staticmethod
    def load(path: str | Path) -> ClipTruth:
        raw = json.loads(Path(path).read_text())
        frames = tuple(
            FrameTruth(faces=tuple(tuple(b) for b in f["faces"]), angles=tuple(f["angles"]),
                       nonfaces=tuple(Patch(p["kind"], tuple(p["box"])) for p in f["nonfaces"]),
                       occluders=tuple(Patch(p["kind"], tuple(p["box"])) for p in f["occluders"]))
            for f in raw["frames"])
        return ClipTruth(raw["name"], raw["description"], int(raw["fps"]), tuple(raw["size"]),
                         raw["source"], frames)


def clip_box(box: Box, size: tuple[int, int]) -> tuple[int, int, int, int]:
    """`box` rounded outwards and clipped to a frame of `size` (width, height); may be empty."""
    w, h = size
    x0, y0, x1, y1 = box
    return (max(0, int(x0)), max(0, int(y0)), min(w, int(-(-x1 // 1))), min(h, int(-(-y1 // 1))))


def visible(box: Box, size: tuple[int, int]) -> float:
    """The share of `box` inside a frame of `size`."""
    w, h = size
    x0, y0, x1, y1 = max(0.0, box[0]), max(0.0, box[1]), min(float(w), box[2]), min(float(h), box[3])
    area = (box[2] - box[0]) * (box[3] - box[1])
    return max(0.0, x1 - x0) * max(0.0, y1 - y0) / area if area > 0 else 0.0


def grow(box: Box, factor: float) -> Box:
    """`box` scaled about its centre."""
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    hw, hh = (box[2] - box[0]) * factor / 2, (box[3] - box[1]) * factor / 2
    return (cx - hw, cy - hh, cx + hw, cy + hh)
