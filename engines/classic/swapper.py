"""The embedded default's swapper: piecewise-affine warp of the source face, then composite.

`forward` (the swap stage) warps the source onto a target face's landmarks over that face's
bounding region; `paste` (the composite stage) masks, colour-matches and blends the result
into the frame, touching that region only. The two may run on different threads: neither
keeps per-call state in the instance beyond counters, and every SwapResult owns its arrays.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias, TypeVar

import cv2
import numpy as np
import numpy.typing as npt

from engines.classic.blend import (
    FaceMasks,
    apply_color,
    blend_bands,
    blend_feather,
    blend_poisson,
    color_matrix,
    detail_mix,
    lip_band,
    lip_shift,
    match_shading,
    prepare_masks,
    shift_lips,
    soften_by,
)
from engines.classic.occlusion import cut_occlusion
from engines.classic.source_views import SourceViews, view_for
from engines.errors import EngineError
from engines.face import AREAS, BROWS, OUTER_LIPS, Face, ImageBGR, Landmarks68, SwapResult
from engines.geometry.carry import MAX_RESIDUAL, carry_warp, residual, ring, similarity
from engines.geometry.face_align import fit_similarity
from engines.geometry.head_pose import head_pose
from engines.geometry.measures import face_size, face_turn, mouth_open_ratio
from engines.geometry.piecewise_affine import (
    Points,
    SourceMesh,
    Triangles,
    forward_warp,
    prepare_mesh,
    prepare_triangulation,
)
from engines.protocols import BatchSpec

log = logging.getLogger(__name__)
T = TypeVar("T")

SOURCE_MARGIN = 0.25  # crop margin around the source landmarks, as a fraction of face size
REGION_MARGIN = 0.04  # target region margin, as a fraction of face size (plus 2 px)
MIN_FACE_PX = 4.0  # target faces with a landmark span below this are skipped
# The source pyramid: levels 1/sqrt(2) apart, each area-averaged from the full-resolution crop,
# down to this face size. A target samples the smallest level at least LEVEL_MARGIN times its
# own size, so the warp's bilinear samples shrink it 1.25-1.8x: a 40 px face keeps the source's
# detail down to its own pixels. (pyrDown's 5x5 Gaussian levels, sampled at 1-2x, left 40 px
# faces visibly soft. On the suite's small clip, margin 1.0 / 1.25 / 1.5 gave dlib distance
# 0.641 / 0.630 / 0.627 and flicker 1.08 / 1.10 / 1.11: more detail, more visible jitter.)
LEVEL_STEP = float(np.sqrt(2.0))
LEVEL_MARGIN = 1.25
MIN_LEVEL_PX = 16.0
MAX_LEVELS = 12

# A small face is warped at k = round(SUPERSAMPLE_FACE / its size) times its size (1 to
# MAX_SUPERSAMPLE) and area-averaged down: each pixel the mean of k x k bilinear samples, not
# one. A single bilinear sample per pixel, from a level 1.25-1.8x the face's size, blurs and
# aliases the few pixels a 40 px face's eyes and mouth have (quality suite, small clip:
# distance 0.614 -> 0.605, flicker 0.98x either way); faces from about 100 px get k = 1.
SUPERSAMPLE_FACE = 120.0
MAX_SUPERSAMPLE = 3

BLENDS = ("feather", "poisson")
SHADING_SCALE = 0.06  # the blur (sigma) of a face's light and shade, as a fraction of its size
SHADING_FROM = 0.3  # face_turn from which the target's shading comes in (ramping up to 1)
# The two bands' split (swap.fine_feather): a Gaussian blur over this fraction of the face's
# size, about the width of an eye's lids or a brow.
BAND_SIGMA = 0.04
SHAPE_TURN_FROM, SHAPE_TURN_TO = 0.3, 0.8  # face_turn over which `shape` gives way to `shape_turned`
LIPS_MARGIN = 0.05  # swap.keep_lips: how much wider the source's mouth must be open
LIPS_GROW = 0.1  # the target's lips are kept grown by this share of the mouth's width


@dataclass
class ClassicalOptions:
    """The classical swapper's mask, colour transfer and blend (the `swap:` config section)."""

    blend: str = "feather"  # feather (alpha) | poisson (seamlessClone)
    # Width of the soft mask edge, as a fraction of the face's size. The ramp lies inside the
    # jaw/brow hull, so every bit of it is source features given back to the target: 0.12
    # left the cheeks, jaw line and brows half the target's (dlib distance 0.61 -> 0.57).
    feather: float = 0.06
    color_transfer: bool = True  # match the source's colours to the target's skin
    # Frames between measurements of a followed face's colour statistics (1: every frame): its
    # colour transfer, its lips' colour shift and its softening (detail). In between, the
    # last ones measured are applied (the skin's light changes over seconds, not frames).
    # The faces of a frame take turns. Measuring the colour transfer is 0.6-0.8 ms a face on
    # the six-face bench clip, applying it 0.1-0.2 ms; the lips' medians 0.15 ms, the
    # softening's 0.1 ms. 2 by default (`quality`: 1, `fast`: 4).
    color_every: int = 2
    # At most how much fine detail the pasted face keeps, against the target face's (the mean
    # absolute Laplacian of the inner face): a sharper swap is softened to it (0: never). A
    # source photo is sharper than most video; pasted as it is, the face stands out from the
    # head around it and flickers more than the face it replaces (1.15-1.20x the input's frame
    # to frame change on four of the quality clips, 1.08-1.11x matched; identity distance
    # within 0.006).
    detail: float = 1.0
    # How far the warped face reaches above the brows, as a fraction of the brows-to-chin
    # distance (0: the jaw/brow hull only). The 68 points stop at the brows, so without it the
    # lower forehead and the brows' upper edge stay the target's.
    forehead: float = 0.3
    # How far the brows, the nose and the eyes' positions move towards the source's proportions
    # (the source's landmarks fitted onto the target's by a similarity: pose kept), 0: the
    # target's landmarks exactly. The jaw line, the mouth and the eyelids stay the target's, so
    # expression and blinks are kept; at 0.3 dlib's landmarks on the result move by about 0.01
    # of the distance between the eyes' centres and the identity distance drops by about 0.03.
    shape: float = 0.3
    # The shape blend of a face turned sideways (None: `shape` on every face). From a turn of
    # SHAPE_TURN_FROM (engines.geometry.measures.face_turn) it goes from `shape` to this, reached
    # at SHAPE_TURN_TO: a frontal source's proportions fitted onto a turned face move dlib's
    # points on it more and bring less of the identity (`quality` at 0.45 everywhere: the faces
    # turned 0.86-0.88 on the suite's clips lost up to 0.013 of distance and gained up to 0.010
    # of shift against 0.3, the frontal ones won 0.005 for 0.002; docs/quality.md).
    shape_turned: float | None = None
    # The blend in two bands (engines.classic.blend.blend_bands), 0: one band. The source's
    # fine detail (the features' edges, the skin's texture) fades out over this fraction of the
    # face's size at the area's edge, its light and colour over `feather`: with a narrow fine
    # edge and a wide coarse one, more of the source's features reach the result with no
    # sharper seam.
    fine_feather: float = 0.0
    # `feather` on a face turned sideways (None: `feather` on every face), from a turn of
    # SHAPE_TURN_FROM to SHAPE_TURN_TO as `shape_turned`: a wide coarse edge on a turned face
    # moved dlib's points on it (docs/quality.md).
    feather_turned: float | None = None
    # How much of the target's own light and shade (its luma blurred over SHADING_SCALE of the
    # face's size) the swap takes, on a face turned fully sideways; from engines.classic.blend.face_turn
    # SHADING_FROM (0.3) it ramps up to that, and a face turned less is left as it was. A
    # source lit from the front cannot carry the side light on a turned face: without it the
    # swap comes out flat and pale, and dlib's points on it move (quality suite, 0 -> 0.5:
    # shift on the clips with turned faces 0.057-0.089 -> 0.053-0.080, flicker and jitter
    # down). 0: never.
    shading: float = 0.5
    keep_mouth: bool = True  # keep the target's mouth interior when the mouth is open
    mouth_open: float = 0.12  # lip gap / mouth width above which the mouth counts as open
    # Keep the target's own lips (and what is between them) wherever the source's mouth is
    # open wider than the target's (by LIPS_MARGIN of engines.classic.blend.mouth_open_ratio): a
    # smiling source's teeth otherwise show between a target's closed lips, and its lips
    # never close. Off by default: dlib's identity reads the source's mouth, and on the
    # quality suite keeping the target's lips took a grey-source distance of 0.531 to 0.597.
    keep_lips: bool = False
    # The lips take the target's colour (their median chroma; the source's lip shape and
    # shading stay), with `color_transfer`: matched to the target's skin as a whole, a grey or
    # low-chroma source's lips came out skin-coloured on a face whose own are red.
    lip_color: bool = True
    # Triangles that squeeze the source hard (a turned face's far cheek) take several samples
    # a pixel, and creases their neighbours' mean (piecewise_affine.resample_squeezed): about
    # 60% of the warp's time on the bench clips (1.3 of 2.2 ms a face). Off (`fast`): one
    # bilinear sample a pixel, as before it existed; a dotted line can show down a far cheek.
    resample: bool = True

    def __post_init__(self) -> None:
        if self.blend not in BLENDS:
            raise ValueError(f"swap.blend must be one of {', '.join(BLENDS)}, got {self.blend!r}")
        if not 0.0 <= self.feather <= 0.5:
            raise ValueError(f"swap.feather must be in [0, 0.5], got {self.feather}")
        if not 0.0 <= self.shape <= 1.0:
            raise ValueError(f"swap.shape must be in [0, 1], got {self.shape}")
        if self.shape_turned is not None and not 0.0 <= self.shape_turned <= 1.0:
            raise ValueError(f"swap.shape_turned must be in [0, 1] (or null), got {self.shape_turned}")
        for name in ("fine_feather", "feather_turned"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 0.5:
                raise ValueError(f"swap.{name} must be in [0, 0.5], got {value}")
        if not 0.0 <= self.forehead <= 0.6:
            raise ValueError(f"swap.forehead must be in [0, 0.6], got {self.forehead}")
        if not 0.0 <= self.shading <= 1.0:
            raise ValueError(f"swap.shading must be in [0, 1], got {self.shading}")
        if not 0.0 <= self.detail <= 4.0:
            raise ValueError(f"swap.detail must be in [0, 4], got {self.detail}")
        if self.mouth_open <= 0:
            raise ValueError(f"swap.mouth_open must be > 0, got {self.mouth_open}")
        if isinstance(self.color_every, bool) or not isinstance(self.color_every, int) \
                or not 1 <= self.color_every <= 30:
            raise ValueError(f"swap.color_every must be a whole number from 1 to 30, got {self.color_every!r}")


@dataclass(frozen=True, eq=False)
class SourceFace:
    """A source face prepared once per photo.

    `levels[k]` is the face at scale about 1 / sqrt(2)**k: the crop around the face (with
    margin, edge-replicated where the photo ends), the 68 landmarks in the crop's pixels and
    the shared triangulation. Smaller levels exist so a small target samples a pre-filtered
    source instead of aliasing. `sizes[k]` is the face size at level k; `origin` is the
    crop's top-left corner in the photo.
    """

    levels: tuple[SourceMesh, ...]
    sizes: tuple[float, ...]
    origin: tuple[int, int]
    forehead: npt.NDArray[np.float32] = field(default_factory=lambda: np.zeros(0, np.float32))

    @property
    def image(self) -> ImageBGR:
        """The full-resolution crop."""
        return self.levels[0].image

    @property
    def landmarks(self) -> Landmarks68:
        """The landmarks in the full-resolution crop's pixels."""
        return self.levels[0].points

    @property
    def triangles(self) -> Triangles:
        """The Delaunay triangulation of the source landmarks, as (T, 3) index triples."""
        return self.levels[0].triangles

    def level_for(self, size: float) -> int:
        """The smallest level whose face is still at least LEVEL_MARGIN x `size` pixels (0 if
        none is)."""
        best = 0
        for k, level_size in enumerate(self.sizes):
            if level_size >= LEVEL_MARGIN * size:
                best = k
        return best


# What a source prepares into: one photo's face, or several views of one person.
AnySource: TypeAlias = "SourceFace | SourceViews[SourceFace]"


@dataclass(frozen=True, eq=False)
class ClassicalBatch:
    """A frame's faces for the warp: the frame's shape and each face with its source."""

    frame_shape: tuple[int, ...]
    pairs: tuple[tuple[Face, SourceFace], ...]


def _check_landmarks(landmarks: object) -> Landmarks68 | None:
    lm = np.asarray(landmarks, dtype=np.float32)
    if lm.shape != (68, 2) or not np.isfinite(lm).all():
        return None
    return lm


def extend_forehead(landmarks: Landmarks68, reach: float | npt.NDArray[np.float32]) -> Points:
    """The 68 landmarks plus, where `reach` > 0, ten forehead points: each brow point moved
    up the face (chin -> brows direction, so it follows roll) by its `reach` (one for all or
    one per brow point) x the brows-to-chin distance. Source and target are extended alike,
    so the mesh maps forehead to forehead."""
    reach = np.asarray(reach, np.float32)
    if reach.size == 0 or float(reach.max()) <= 0:
        return landmarks
    brows = landmarks[BROWS]
    up = brows.mean(axis=0) - landmarks[8]
    return np.concatenate([landmarks, brows + reach.reshape(-1, 1) * up]).astype(np.float32)


_SHAPE_POINTS = slice(17, 36)  # brows and nose: moved point by point
_EYES = (slice(36, 42), slice(42, 48))  # each eye moved as a whole (its lids stay the target's)


def blend_shape(target: Landmarks68, source: Landmarks68, amount: float) -> Landmarks68:
    """The target's landmarks with the brows, nose and eye positions moved `amount` of the way
    to the source's, after a least-squares similarity of the source's brows, nose and eyes
    onto the target's: the target's pose stays, the source's proportions come in. Jaw and
    mouth are untouched."""
    if amount <= 0:
        return target
    linear, mu_s, mu_t = fit_similarity(source[17:48], target[17:48])
    fitted = (source.astype(np.float64) - mu_s) @ linear + mu_t
    out = target.astype(np.float64).copy()
    out[_SHAPE_POINTS] += amount * (fitted[_SHAPE_POINTS] - out[_SHAPE_POINTS])
    for eye in _EYES:
        out[eye] += amount * (fitted[eye].mean(axis=0) - out[eye].mean(axis=0))
    return out.astype(np.float32)


def place_forehead(target: Landmarks68, source: Points) -> Points:
    """The target's 68 landmarks plus the source's forehead points (those past the 68th),
    each kept at its offset from its brow point, turned and scaled by the similarity of all
    68 source points onto the target's. A fit over 68 points barely moves with one frame's
    landmark noise, where a direction from two points (chin, brows) wobbles the whole band."""
    if len(source) <= 68:
        return target
    linear, _, _ = fit_similarity(source[:68], target[:68])
    offsets = (source[68:].astype(np.float64) - source[BROWS]) @ linear
    return np.concatenate([target[:68], target[BROWS] + offsets]).astype(np.float32)


_CHEEKS = np.array([2, 3, 13, 14, 29, 31, 35])  # a polygon of bare skin on any face
_FOREHEAD_START = 0.04  # brows-to-chin fractions above the brow before skin is looked for
_FOREHEAD_STEP = 0.01
_OPEN_KERNEL = np.ones((3, 3), np.uint8)


def _skin_tolerance(std: np.ndarray) -> np.ndarray:
    """How far (Y, Cr, Cb) a pixel may be from the cheeks' mean and still count as skin."""
    return np.maximum(np.array([14.0, 6.0, 6.0]), 1.5 * np.asarray(std, np.float64).ravel())


def _clip_rect(x0: int, y0: int, x1: int, y1: int, w: int, h: int) -> tuple[int, int, int, int]:
    return max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)


def keep_target_hair(roi: ImageBGR, landmarks: Points, masks: FaceMasks, radius: int) -> FaceMasks:
    """The masks, narrowed above the brows to where the target shows skin (colour near its
    cheeks'): a fringe or a hat over the target's forehead stays in front of the swap. Inside
    the 68 points' hull nothing changes. `radius` softens the cut's edge.

    Only the band the masks cover outside the 68 points' hull (the forehead) can change, so
    the skin test, its softening and the fade are computed on that band's bounding box (plus
    the blur's reach) and the cheeks' colour on the cheeks' box: the same masks as over the
    whole region, at a fraction of the cost."""
    h, w = roi.shape[:2]
    inner = np.zeros((h, w), np.uint8)
    cv2.fillConvexPoly(inner, cv2.convexHull(np.round(landmarks[:68]).astype(np.int32)), 255)
    # Where either mask is set outside the hull: the only pixels this function may change.
    outside_hull = cv2.subtract(cv2.max(masks.alpha, masks.core), inner)
    bx, by, bw, bh = cv2.boundingRect(outside_hull)
    if bw == 0 or bh == 0:
        return masks
    cheek_poly = np.round(landmarks[_CHEEKS]).astype(np.int32)
    cx, cy, cw, ch = cv2.boundingRect(cheek_poly)
    cx0, cy0, cx1, cy1 = _clip_rect(cx, cy, cx + cw, cy + ch, w, h)
    if cx1 <= cx0 or cy1 <= cy0:
        return masks
    cheeks = np.zeros((cy1 - cy0, cx1 - cx0), np.uint8)
    cv2.fillConvexPoly(cheeks, cheek_poly - np.array([cx0, cy0], np.int32), 255)
    if cv2.countNonZero(cheeks) < 16:
        return masks
    ycc_cheeks = cv2.cvtColor(roi[cy0:cy1, cx0:cx1], cv2.COLOR_BGR2YCrCb)
    mean, std = cv2.meanStdDev(ycc_cheeks, mask=cheeks)
    tol = _skin_tolerance(std)
    lo, hi = mean.ravel() - tol, mean.ravel() + tol

    k = 2 * max(radius, 1) + 1
    # The opening (3x3) and the blur reach k // 2 + 2 pixels: with that margin the band's box
    # gets exactly the values a whole-region pass gives it.
    pad = k // 2 + 2
    x0, y0, x1, y1 = _clip_rect(bx - pad, by - pad, bx + bw + pad, by + bh + pad, w, h)
    ycc = cv2.cvtColor(roi[y0:y1, x0:x1], cv2.COLOR_BGR2YCrCb)
    keep = cv2.inRange(ycc, tuple(float(v) for v in lo), tuple(float(v) for v in hi))
    inner_box = inner[y0:y1, x0:x1]
    cv2.max(keep, inner_box, dst=keep)
    keep = cv2.morphologyEx(keep, cv2.MORPH_OPEN, _OPEN_KERNEL)
    soft = cv2.GaussianBlur(keep, (k, k), 0)
    # Past the brows the swap fades out over the forehead band's height: the source's forehead
    # meets the target's hairline or light as a gradient, never as a strip with an edge.
    band = max(math.hypot(*(landmarks[68:].mean(axis=0) - landmarks[BROWS].mean(axis=0)).tolist()), 1.0)
    outside = cv2.distanceTransform(cv2.bitwise_not(inner_box), cv2.DIST_L2, 3)
    fade = cv2.convertScaleAbs(outside, alpha=-255.0 / band, beta=255.0)
    cv2.min(soft, fade, dst=soft)
    cv2.max(soft, inner_box, dst=soft)
    alpha, core = masks.alpha.copy(), masks.core.copy()
    sub = alpha[y0:y1, x0:x1]
    cv2.min(sub, soft, dst=sub)
    sub = core[y0:y1, x0:x1]
    cv2.min(sub, keep, dst=sub)
    return FaceMasks(alpha=alpha, core=core)


def measure_forehead(image: ImageBGR, landmarks: Landmarks68, reach: float) -> npt.NDArray[np.float32]:
    """How far up from each brow point the source photo shows bare skin, up to `reach`.

    A fringe or a hat over the forehead would otherwise be painted onto the target as a band
    of hair: each ray from a brow point stops at the first pixel whose colour (YCrCb) is far
    from the cheeks'. Rays are then evened out with their neighbours.
    """
    if reach <= 0:
        return np.zeros(0, np.float32)
    ycc = cv2.cvtColor(image, cv2.COLOR_BGR2YCrCb)
    cheeks = np.zeros(image.shape[:2], np.uint8)
    cv2.fillConvexPoly(cheeks, np.round(landmarks[_CHEEKS]).astype(np.int32), 255)
    if cv2.countNonZero(cheeks) < 16:
        return np.full(10, reach, np.float32)
    mean, std = cv2.meanStdDev(ycc, mask=cheeks)
    tol = _skin_tolerance(std)
    brows = landmarks[BROWS]
    up = brows.mean(axis=0) - landmarks[8]
    steps = np.arange(_FOREHEAD_START, reach + 1e-6, _FOREHEAD_STEP, dtype=np.float32)
    pts = np.round(brows[:, None, :] + steps[None, :, None] * up).astype(int)  # (10, S, 2)
    h, w = image.shape[:2]
    inside = (pts[..., 0] >= 0) & (pts[..., 0] < w) & (pts[..., 1] >= 0) & (pts[..., 1] < h)
    colour = ycc[np.clip(pts[..., 1], 0, h - 1), np.clip(pts[..., 0], 0, w - 1)].astype(np.float32)
    skin = inside & (np.abs(colour - mean.ravel()) <= tol).all(axis=-1)
    # Brows first: a ray counts from its first skin sample (the brow's own hairs are dark).
    out = np.zeros(10, np.float32)
    for i in range(10):
        seen = np.flatnonzero(skin[i])
        if seen.size == 0:
            continue
        first = seen[0]
        stop = np.flatnonzero(~skin[i, first:])
        last = first + (stop[0] if stop.size else skin.shape[1] - first) - 1
        out[i] = steps[last] if last >= first else 0.0
    # Neighbours agree: a lone long ray between short ones (a parting in a fringe) is cut.
    padded = np.r_[out[0], out, out[-1]]
    out = np.minimum(out, np.maximum(padded[:-2], padded[2:]))
    return np.maximum(out, _FOREHEAD_START / 2).astype(np.float32)


def _without_lips(valid: npt.NDArray[np.uint8], landmarks: Landmarks68) -> npt.NDArray[np.uint8]:
    """`valid` (region pixels) less the target's lips (outer lip points, grown by LIPS_GROW of
    the mouth's width): there the target's own pixels stay, behind the mask's soft edge."""
    lips = np.zeros_like(valid)
    cv2.fillPoly(lips, [np.round(landmarks[OUTER_LIPS]).astype(np.int32)], 255)
    grow = int(round(LIPS_GROW * float(np.linalg.norm(landmarks[54] - landmarks[48]))))
    if grow > 0:
        lips = cv2.dilate(lips, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * grow + 1,) * 2))
    return cv2.bitwise_and(valid, cv2.bitwise_not(lips))


def _without_areas(valid: npt.NDArray[np.uint8], landmarks: Landmarks68,
                   areas: Sequence[tuple[int, ...]]) -> npt.NDArray[np.uint8]:
    """`valid` (region pixels) less each area's hull (its 68-point indices, engines.face.AREAS):
    there the target's own pixels stay exactly, and the mask's soft edge lies outside it."""
    out = valid.copy()
    for index in areas:
        cv2.fillConvexPoly(out, cv2.convexHull(np.round(landmarks[list(index)]).astype(np.int32)), 0)
    return out


@dataclass(frozen=True, eq=False)
class ClassicalCut:
    """A face to warp off the frame path: the warp reads the frame's size only."""

    frame_shape: tuple[int, ...]
    face: Face
    source: SourceFace


@dataclass(frozen=True, eq=False)
class ClassicalSwap:
    """A face's warp on one frame, and the landmarks it was made for (frame pixels)."""

    result: SwapResult
    points: Landmarks68


class ClassicalSwapper:
    """Landmark-driven piecewise-affine face swap with colour transfer and soft/Poisson blend."""

    name = "classical"
    cuts_occluders = True  # paste leaves out a face's `occlusion` (engines.classic.occlusion.find_occluders)
    # Steps a face's `skip` may leave out (a live run sheds them when it falls behind), the
    # costliest a face first: the squeezed-triangle sampling, the blend's second band, shading,
    # lip colour, detail.
    optional_steps = ("resample", "bands", "shading", "lip_color", "detail")

    def __init__(self, config: ClassicalOptions | None = None, keep_areas: Sequence[str] = ()) -> None:
        """`keep_areas`: the face's areas (engines.face.AREAS: upper-face, lower-face, mouth)
        whose target pixels are kept, not swapped (`mask.types area`, the areas left out of
        `mask.areas`): keeping the mouth keeps the target's own lips and teeth, live."""
        self.config = config or ClassicalOptions()
        unknown = [a for a in keep_areas if a not in AREAS]
        if unknown:
            raise ValueError(f"unknown mask area {unknown[0]!r}; known: {', '.join(AREAS)}")
        self.keep_areas = tuple(keep_areas)
        self._kept = tuple(AREAS[a] for a in self.keep_areas)
        # Lips the target keeps need no colour of their own.
        self._own_lips = bool({"mouth", "lower-face"} & set(self.keep_areas))
        self.calls = 0  # faces warped (the swap itself)
        self.pastes = 0
        self.skipped = 0  # faces with no usable region (off-frame, degenerate landmarks)

    def open(self) -> None:
        """Nothing to load: the classical swapper has no model file."""

    def prepare_source(self, image: ImageBGR, landmarks: Landmarks68) -> SourceFace:
        """Crop the source face with a margin, build its pyramid and its triangulation.

        Raises EngineError for an image that is not HxWx3 uint8 or landmarks that are not
        (68, 2) finite points spanning a face.
        """
        if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 \
                or image.shape[2] != 3 or image.shape[0] < 2 or image.shape[1] < 2:
            shape = getattr(image, "shape", None)
            raise EngineError(f"source image must be HxWx3 uint8 BGR, got shape {shape}")
        lm = _check_landmarks(landmarks)
        if lm is None:
            raise EngineError(
                f"source landmarks must be (68, 2) finite points, got {np.shape(landmarks)}")
        size = face_size(lm)
        span = lm.max(axis=0) - lm.min(axis=0)
        if span.min() < MIN_FACE_PX:
            raise EngineError(f"source landmarks span only {span.min():.1f} px: no usable face")

        forehead = measure_forehead(image, lm, self.config.forehead)
        lm = extend_forehead(lm, forehead)
        margin = SOURCE_MARGIN * size + 4
        x0, y0 = np.floor(lm.min(axis=0) - margin).astype(int)
        x1, y1 = np.ceil(lm.max(axis=0) + margin).astype(int) + 1
        h, w = image.shape[:2]
        inner = image[max(y0, 0):min(y1, h), max(x0, 0):min(x1, w)]
        if inner.size == 0:
            raise EngineError("source landmarks lie outside the source image")
        # Edge-replicate where the crop leaves the photo, so every triangle has pixels.
        crop = cv2.copyMakeBorder(
            inner, max(-y0, 0), max(y1 - h, 0), max(-x0, 0), max(x1 - w, 0), cv2.BORDER_REPLICATE)
        crop_lm = (lm - np.array([x0, y0], np.float32)).astype(np.float32)
        triangles = prepare_triangulation(crop_lm)

        crop = np.ascontiguousarray(crop)
        levels = [prepare_mesh(crop, crop_lm, triangles)]
        sizes = [size]
        ch, cw = crop.shape[:2]
        while len(levels) < MAX_LEVELS and size / LEVEL_STEP ** len(levels) >= MIN_LEVEL_PX:
            scale = LEVEL_STEP ** -len(levels)
            lw, lh = max(round(cw * scale), 2), max(round(ch * scale), 2)
            # Area averaging keeps the detail a Gaussian pyramid blurs away. Pixel centres:
            # x' + 0.5 = (x + 0.5) * lw / cw.
            fx, fy = lw / cw, lh / ch
            level_lm = ((crop_lm + 0.5) * np.array([fx, fy], np.float32) - 0.5).astype(np.float32)
            levels.append(prepare_mesh(cv2.resize(crop, (lw, lh), interpolation=cv2.INTER_AREA),
                                       level_lm, triangles))
            sizes.append(face_size(level_lm[:68]))
        log.debug("source prepared: face %.0f px, %d triangles, %d levels",
                  size, len(triangles), len(levels))
        return SourceFace(levels=tuple(levels), sizes=tuple(sizes), origin=(int(x0), int(y0)),
                          forehead=forehead)

    def prepare_views(self, views: Sequence[tuple[ImageBGR, Landmarks68]]) -> AnySource:
        """Several photos of one source person: each prepared as `prepare_source` does, with
        its pose, so that each target face is warped from the view nearest its own pose
        (engines.classic.source_views). One photo gives exactly what `prepare_source` gives."""
        if len(views) == 1:
            return self.prepare_source(*views[0])
        faces = tuple(self.prepare_source(image, landmarks) for image, landmarks in views)
        return SourceViews(faces, tuple(head_pose(f.landmarks[:68]) for f in faces))

    def _view(self, face: Face, source: AnySource) -> SourceFace:
        """The source face to warp onto `face`: `source` itself, or of several views the one
        chosen for this face (kept per track in its memo, with hysteresis)."""
        if not isinstance(source, SourceViews):
            return source
        lm = _check_landmarks(face.landmarks)
        if lm is None:
            return source.faces[0]
        return view_for(source, head_pose(lm), face.memo)

    def face_region(self, frame_shape: tuple[int, ...], landmarks: Landmarks68
                    ) -> tuple[int, int, int, int] | None:
        """The landmarks' bounding box plus a small margin, clipped to the frame (or None)."""
        lo, hi = landmarks.min(axis=0), landmarks.max(axis=0)
        if (hi - lo).min() < MIN_FACE_PX:
            return None
        margin = 2 + REGION_MARGIN * face_size(landmarks)
        h, w = frame_shape[:2]
        x0 = int(max(np.floor(lo[0] - margin), 0))
        y0 = int(max(np.floor(lo[1] - margin), 0))
        x1 = int(min(np.ceil(hi[0] + margin) + 1, w))
        y1 = int(min(np.ceil(hi[1] + margin) + 1, h))
        if x1 - x0 < 2 or y1 - y0 < 2:
            return None
        return x0, y0, x1, y1

    def forward(self, frame: ImageBGR, face: Face, source: AnySource) -> SwapResult | None:
        """The swap stage: warp the source onto `face`'s landmarks, over the face region only.

        Returns None (and counts a skip) when the region is empty or degenerate: face
        off-frame, collapsed or non-finite landmarks. Reads only `frame.shape`.
        """
        return self._warp(frame.shape, face, self._view(face, source))

    def _shape_of(self, face: Face, landmarks: Landmarks68) -> float:
        """The shape blend for `face` (of these landmarks): `shape`, giving way to
        `shape_turned` as the face turns, and `shape_turned` while something is in front of it."""
        cfg = self.config
        if cfg.shape_turned is None:
            return cfg.shape
        if face.occlusion is not None:
            return cfg.shape_turned
        return cfg.shape + (cfg.shape_turned - cfg.shape) * self._turned(landmarks)

    def _turned(self, landmarks: Landmarks68) -> float:
        """How far a face's turn is along the way from SHAPE_TURN_FROM (0) to SHAPE_TURN_TO (1)."""
        return min(max((face_turn(landmarks[:68]) - SHAPE_TURN_FROM) / (SHAPE_TURN_TO - SHAPE_TURN_FROM), 0.0), 1.0)

    def _feather_of(self, landmarks: Landmarks68) -> float:
        """The (coarse band's) feather for a face of these landmarks."""
        cfg = self.config
        if cfg.feather_turned is None:
            return cfg.feather
        return cfg.feather + (cfg.feather_turned - cfg.feather) * self._turned(landmarks)

    def _warp(self, frame_shape: tuple[int, ...], face: Face, source: SourceFace) -> SwapResult | None:
        lm = _check_landmarks(face.landmarks)
        points = None if lm is None else place_forehead(
            blend_shape(lm, source.landmarks[:68], self._shape_of(face, lm)), source.landmarks)
        region = None if points is None else self.face_region(frame_shape, points)
        if lm is None or points is None or region is None:
            self.skipped += 1
            return None
        x0, y0, x1, y1 = region
        size = face_size(lm)
        resample = self.config.resample and "resample" not in face.skip
        k = int(min(max(round(SUPERSAMPLE_FACE / size), 1), MAX_SUPERSAMPLE))
        level = source.level_for(k * size)
        origin = np.array([x0, y0], np.float32)
        if k == 1:
            patch, valid = forward_warp(source.levels[level], points - origin, (x1 - x0, y1 - y0),
                                        squeezed=resample)
        else:
            # Pixel centres: x + 0.5 in the region is k (x + 0.5) in the k-times larger one.
            big, big_valid = forward_warp(source.levels[level], (points - origin + 0.5) * k - 0.5,
                                          ((x1 - x0) * k, (y1 - y0) * k),
                                          squeezed=resample)
            cover = cv2.resize(big_valid, (x1 - x0, y1 - y0), interpolation=cv2.INTER_AREA)
            # The mean of the covered samples only (the others are black): no dark rim at the
            # warp's edge. A pixel counts as covered where most of its samples are.
            mean = cv2.resize(big, (x1 - x0, y1 - y0), interpolation=cv2.INTER_AREA).astype(np.float32)
            mean *= (255.0 / np.maximum(cover, 1).astype(np.float32))[..., None]
            patch = np.clip(mean + 0.5, 0, 255).astype(np.uint8)
            valid = cv2.threshold(cover, 127, 255, cv2.THRESH_BINARY)[1]
        if self.config.keep_lips and \
                mouth_open_ratio(source.landmarks[:68]) - mouth_open_ratio(lm) >= LIPS_MARGIN:
            valid = _without_lips(valid, lm - origin)
        if self._kept:
            valid = _without_areas(valid, lm - origin, self._kept)
        if cv2.countNonZero(valid) == 0:
            self.skipped += 1
            return None
        self.calls += 1
        return SwapResult(region=region, patch=patch, valid=valid)

    def forward_many(self, frame: ImageBGR, faces: Sequence[Face],
                     sources: Sequence[AnySource]) -> list[SwapResult | None]:
        """`forward` for each face of one frame (the warp has nothing to batch)."""
        return [self.forward(frame, face, source) for face, source in zip(faces, sources)]

    # The three phases (engines.protocols.Swapper): there is no model, so nothing is staged in
    # buffers; the warp stays in the middle phase (the swap stage, as with `forward`) and the
    # mask, colour transfer and blend stay in `paste` (the composite stage).

    def batch_spec(self, max_faces: int) -> BatchSpec:
        """No buffers: the warp writes each face's own patch."""
        return BatchSpec()

    def prepare_batch(self, frame: ImageBGR, faces: Sequence[Face], sources: Sequence[AnySource],
                      inputs: Mapping[str, np.ndarray]) -> ClassicalBatch:
        """Only what the warp needs later: the frame's size and each face with its source
        (of several views, the one chosen for the face)."""
        if len(faces) != len(sources):
            raise ValueError(f"{len(faces)} faces but {len(sources)} sources")
        return ClassicalBatch(frame.shape, tuple((face, self._view(face, source))
                                                 for face, source in zip(faces, sources)))

    def forward_batch(self, batch: ClassicalBatch, inputs: Mapping[str, np.ndarray],
                      outputs: Mapping[str, np.ndarray]) -> list[SwapResult | None]:
        """The warp of each face (what `forward_many` does)."""
        return [self._warp(batch.frame_shape, face, source) for face, source in batch.pairs]

    def finish_batch(self, frame: ImageBGR, batch: ClassicalBatch,
                     swapped: list[SwapResult | None]) -> list[SwapResult | None]:
        """The warps are the results: blending is `paste`'s."""
        return list(swapped)

    def _measured(self, face: Face, key: str, measure: Callable[[], T]) -> T:
        """`measure()`, or on a followed face between its measurements (swap.color_every) what
        it last gave, kept in its track's memo under `key`: the face's colour statistics
        (its colour transfer matrix, its lips' shift, its softening) change slowly."""
        every, memo = self.config.color_every, face.memo
        if every <= 1 or memo is None:
            return measure()
        # Counted from the track's id, so the faces of a frame take turns.
        n = memo.get(key + "_n", face.track_id % every)
        memo[key + "_n"] = n + 1
        if n % every == 0 or key not in memo:
            memo[key] = measure()
        return memo[key]

    def paste(self, frame: ImageBGR, face: Face, result: SwapResult) -> None:
        """The composite stage: mask, colour transfer, blend, in place in `result.region` only."""
        x0, y0 = result.region[:2]
        roi = result.region_of(frame)
        cfg = self.config
        # The mask's outline reaches past the warped forehead (the warp's own edge, `valid`,
        # bounds it there), so the forehead's edge is the warp's, steady from frame to frame.
        lm = extend_forehead(np.asarray(face.landmarks, np.float32), 1.5 * cfg.forehead) \
            - np.array([x0, y0], np.float32)
        # Shed live (face.skip), the blend is one band, over the coarse band's feather.
        fine_feather = cfg.fine_feather if cfg.blend == "feather" and "bands" not in face.skip else 0.0
        feather = self._feather_of(lm[:68])
        masks = prepare_masks(lm, result.valid, feather, cfg.keep_mouth, cfg.mouth_open, fine_feather)
        prepared, fine = masks.alpha, masks.fine
        size = face_size(lm[:68])
        # The soft edge of a cut (hair, an occluder): half the edge of the swap's detail.
        edge = int(round((fine_feather or feather) * size / 2))
        if len(lm) > 68:
            masks = keep_target_hair(roi, lm, masks, edge)
        if face.occlusion is not None:
            # Something in front of the face (found where the swap is pasted): it stays in
            # front, and the colour statistics leave it out.
            masks = cut_occlusion(masks, face.occlusion, (x0, y0), edge)
        patch = result.patch
        skip = face.skip
        if cfg.color_transfer:
            matrix = self._measured(face, "color", lambda: color_matrix(patch, roi, masks.core))
            if matrix is not None:
                patch = apply_color(patch, matrix)
            lips = lip_band(lm[:68], patch.shape) \
                if cfg.lip_color and "lip_color" not in skip and not self._own_lips else None
            if lips is not None:
                shift = self._measured(face, "lips", lambda: lip_shift(patch, roi, lips, masks.alpha, masks.core))
                patch = shift_lips(patch, lips, shift)
        if "shading" not in skip and cfg.shading > 0:
            # A face turned less than SHADING_FROM gets weight 0: match_shading leaves it as it is.
            shading = cfg.shading * max(face_turn(lm[:68]) - SHADING_FROM, 0.0) / (1.0 - SHADING_FROM)
            patch = match_shading(patch, roi, masks.core, SHADING_SCALE * size, shading)
        if "detail" not in skip and cfg.detail > 0:
            mix = self._measured(face, "detail", lambda: detail_mix(patch, roi, masks.core, cfg.detail))
            patch = soften_by(patch, mix)
        if cfg.blend == "poisson":
            blend_poisson(roi, patch, masks)
        elif fine is not None:
            if masks.alpha is not prepared:
                # Where the target's hair or an occluder was cut out of the area, the fine
                # detail is cut alike (the cut weight is the lower one there); prepare_masks
                # cut a kept mouth out of both already.
                fine = np.where(masks.alpha < prepared, masks.alpha, fine)
            blend_bands(roi, patch, result.valid, masks.alpha, fine, BAND_SIGMA * size)
        else:
            blend_feather(roi, patch, masks.alpha)
        self.pastes += 1

    # ---- warped at a cadence, carried between (engines.protocols.CarrySwapper): the
    # classical swapper as a stand-in for a slow one, so the carry's cost reads in the
    # quality suite's identity and landmark measures ----

    def cut(self, frame: ImageBGR, face: Face, source: AnySource) -> ClassicalCut | None:
        if _check_landmarks(face.landmarks) is None:
            return None
        return ClassicalCut(frame.shape, face, self._view(face, source))

    def swap_cut(self, cut: ClassicalCut) -> ClassicalSwap | None:
        result = self._warp(cut.frame_shape, cut.face, cut.source)
        return None if result is None else ClassicalSwap(result, np.asarray(cut.face.landmarks, np.float32))

    def carry_many(self, frame: ImageBGR, faces: Sequence[Face],
                   swaps: Sequence[ClassicalSwap | None]) -> list[SwapResult | None]:
        """Each face's warp, made on an earlier frame, moved from its landmarks then onto the
        face's now (engines.geometry.carry), the region moving with the face; `paste` then
        blends it as it blends a warp of this frame."""
        h, w = frame.shape[:2]
        out: list[SwapResult | None] = []
        for face, swap in zip(faces, swaps):
            now = _check_landmarks(face.landmarks)
            if swap is None or now is None or residual(swap.points, now) > MAX_RESIDUAL:
                out.append(None)
                continue
            x0, y0, x1, y1 = swap.result.region
            # The region now: the swap's moved as the face moved as a whole, grown to hold the
            # points now with the region's margin (a mouth opened wide drops the chin past the
            # old region); its ring of anchors sits there now, and where that motion undone
            # puts it on the swap.
            m = similarity(swap.points, now)
            moved = ring(x0 - 1.0, y0 - 1.0, float(x1), float(y1)) @ m[:, :2].T + m[:, 2]
            pad = 2 + REGION_MARGIN * face_size(now)
            lo = np.floor(np.minimum(moved.min(axis=0), now.min(axis=0) - pad)).astype(int)
            hi = np.ceil(np.maximum(moved.max(axis=0), now.max(axis=0) + pad)).astype(int) + 1
            anchors_now = ring(lo[0] - 1.0, lo[1] - 1.0, float(hi[0]), float(hi[1]))
            back = cv2.invertAffineTransform(m)
            anchors_then = (anchors_now @ back[:, :2].T + back[:, 2]).astype(np.float32)
            warped = carry_warp(swap.result.patch, np.concatenate([swap.points, anchors_then]) - [x0, y0],
                                np.concatenate([now, anchors_now]) - lo, (int(hi[0] - lo[0]), int(hi[1] - lo[1])),
                                (swap.result.valid,))
            if warped is None:
                out.append(None)
                continue
            patch, covered, (valid,) = warped
            valid = np.where((valid > 127) & (covered > 0), np.uint8(255), np.uint8(0))
            cx0, cy0 = max(int(lo[0]), 0), max(int(lo[1]), 0)
            cx1, cy1 = min(int(hi[0]), w), min(int(hi[1]), h)
            if cx1 - cx0 < 2 or cy1 - cy0 < 2:
                out.append(None)
                continue
            cut = (slice(cy0 - int(lo[1]), cy1 - int(lo[1])), slice(cx0 - int(lo[0]), cx1 - int(lo[0])))
            if not valid[cut].any():
                out.append(None)
                continue
            out.append(SwapResult(region=(cx0, cy0, cx1, cy1), patch=np.ascontiguousarray(patch[cut]),
                                  valid=np.ascontiguousarray(valid[cut])))
        return out
