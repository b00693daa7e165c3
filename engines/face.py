"""Typed records shared by every engine: a detected or tracked face, and named array shapes."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from engines.errors import EngineError

ImageBGR: TypeAlias = npt.NDArray[np.uint8]  # (H, W, 3), BGR, uint8
Landmarks68: TypeAlias = npt.NDArray[np.float32]  # (68, 2), x, y in frame pixels
Box: TypeAlias = tuple[float, float, float, float]  # x0, y0, x1, y1 in frame pixels
Keypoints5: TypeAlias = npt.NDArray[np.float32]  # (5, 2): eyes, nose, mouth corners, frame pixels

# Index ranges of dlib's 68-point layout (iBUG 300-W).
JAW = slice(0, 17)
BROWS = slice(17, 27)
NOSE = slice(27, 36)
EYES = slice(36, 48)
OUTER_LIPS = slice(48, 60)
INNER_LIPS = slice(60, 68)
# The face's areas by their 68 points (FaceFusion's published index lists), each the convex
# hull of its points: `mask.types area` swaps only the areas chosen (the neural swappers'
# crop mask, engines.models.masks.area_mask; the classical swapper's warp, which leaves the
# others' target pixels in place).
AREAS: dict[str, tuple[int, ...]] = {
    "upper-face": (0, 1, 2, 31, 32, 33, 34, 35, 14, 15, 16, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17),
    "lower-face": (3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 35, 34, 33, 32, 31),
    "mouth": tuple(range(48, 68)),
}


@dataclass(frozen=True, eq=False)
class Occlusion:
    """What stands in front of a face: `mask` (SIZE x SIZE, 255 on an occluder) in the face's
    canonical frame and `to_frame`, the 2x3 map of its pixels to frame pixels
    (engines.classic.occlusion)."""

    mask: npt.NDArray[np.uint8]
    to_frame: npt.NDArray[np.float32]


@dataclass(frozen=True, eq=False)
class Look:
    """A face's look for occluders, taken where its swap is pasted (engines.classic.occlusion.
    find_occluders): `reference` is its track's remembered appearance (an
    engines.classic.occlusion.AppearanceReference, made by the tracker), `clean` whether the tracker
    saw the face clean this frame (detected, not held or coasting behind something), so that
    the reference learns from it."""

    reference: Any
    clean: bool


@dataclass(frozen=True, eq=False)
class Face:
    """One target face in one frame: its box, its 68 landmarks and the detector's score.

    `kps5` is the detector's own five points when the run aligns with them (the reference
    mode); None: alignment uses five points made from the 68 landmarks. `look`: the tracker's
    handle for looking for occluders (None: not looked for); `occlusion`: what was found in
    front of the face this frame (engines.classic.occlusion.find_occluders; None: nothing). `skip`:
    optional steps the swapper leaves out for this face this frame (names from its
    `optional_steps`; a live run that falls behind sheds them). `memo`: the track's own store,
    the same dict on each of its frames (None: a face without a track, a photo's), where the
    composite keeps what need not be measured anew each frame; only the composite stage
    writes it, but for the classical swapper's choice among several source views, written
    under its own key where the frame's faces are prepared (engines.classic.source_views)."""

    box: Box
    landmarks: Landmarks68
    score: float = 1.0
    track_id: int = -1
    kps5: Keypoints5 | None = None
    occlusion: Occlusion | None = None
    look: Look | None = None
    skip: frozenset[str] = frozenset()
    memo: dict[str, Any] | None = None

    @property
    def width(self) -> float:
        return self.box[2] - self.box[0]

    @property
    def height(self) -> float:
        return self.box[3] - self.box[1]

    @property
    def area(self) -> float:
        return max(0.0, self.width) * max(0.0, self.height)


def iou(a: Box, b: Box) -> float:
    """Intersection over union of two boxes (x0, y0, x1, y1); 0 when they do not meet."""
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


@dataclass(frozen=True, eq=False)
class SwapResult:
    """The swap stage's output for one face: the warped source in a frame region.

    `patch` and `valid` cover the frame rectangle `region` = (x0, y0, x1, y1), integer
    pixels, clipped to the frame; `valid` is 255 where the warp is defined.
    """

    region: tuple[int, int, int, int]
    patch: ImageBGR
    valid: npt.NDArray[np.uint8]

    def region_of(self, frame: ImageBGR) -> ImageBGR:
        """The view of `frame` this result covers; EngineError if the shapes disagree."""
        x0, y0, x1, y1 = self.region
        roi = frame[y0:y1, x0:x1]
        if roi.shape[:2] != self.patch.shape[:2] or self.valid.shape != self.patch.shape[:2]:
            raise EngineError(
                f"result for region {self.region} has patch {self.patch.shape[:2]} and valid "
                f"{self.valid.shape} but the frame region is {roi.shape[:2]}")
        return roi

    def paste_into(self, frame: ImageBGR) -> None:
        """Copy the patch into `frame` in place, where `valid` is set, inside the region only."""
        np.copyto(self.region_of(frame), self.patch, where=self.valid[:, :, None] > 0)
