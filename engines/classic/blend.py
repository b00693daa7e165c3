"""Compositing of a warped face patch: soft mask, colour transfer, feather (in one band or two) or Poisson blend.

Everything here works on one face's region (a small rectangle of the frame), never on a
whole frame. Landmarks are given in region coordinates.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TypeAlias

import cv2
import numpy as np
import numpy.typing as npt

from engines.face import BROWS, INNER_LIPS, JAW, OUTER_LIPS, ImageBGR, Landmarks68
from engines.geometry.measures import face_size, mouth_open_ratio

Mask: TypeAlias = npt.NDArray[np.uint8]  # (H, W) uint8, 0..255

_SHIFT = 4
_ONE = 1 << _SHIFT
_OUTLINE = np.r_[np.arange(68)[JAW], np.arange(68)[BROWS]]
_MIN_STAT_PIXELS = 32  # fewer masked pixels than this give meaningless colour statistics
_STAT_SAMPLE = 4000  # colour statistics from this many masked pixels or more are subsampled
# Colour transfer keeps at least 0.7 of the source's luma contrast (its features) and at most
# doubles it. A soft, flatly lit target (a small or a turned face in video: luma spread 10
# against a photo's 33) cut the source's features to half: on the quality suite's turned faces
# 0.5 -> 0.7 gave dlib distance 0.537 -> 0.510 and landmark shift 0.074 -> 0.062 (low-chroma),
# 0.540 -> 0.524 and 0.090 -> 0.084 (overlap); frontal faces are not clamped and kept their
# figures. The chroma spread only ever shrinks, down to the target skin's: a source's own
# colour variation (strong or tinted light, make-up) kept at even half strength shows as grey
# or green patches on the target's skin, and a grey source's flat chroma takes the target's mean.
_LUMA_RATIO = (0.7, 2.0)
_CHROMA_RATIO = (0.0, 1.0)


@dataclass(frozen=True, eq=False)
class FaceMasks:
    """The masks of one face, in region coordinates.

    `alpha` is the feathered blend weight (0..255); `core` is the binary (0/255) inner skin
    area: where colour statistics are taken, and the Poisson clone mask. `fine`, when the
    blend is in two bands (`blend_bands`), is the fine detail's weight: the same area with a
    narrower soft edge (None: one band).
    """

    alpha: Mask
    core: Mask
    fine: Mask | None = None


def _odd(radius: int) -> tuple[int, int]:
    k = 2 * radius + 1
    return (k, k)


def _disk(radius: int) -> npt.NDArray[np.uint8]:
    return cv2.getStructuringElement(cv2.MORPH_ELLIPSE, _odd(radius))


# smoothstep on 0..255: the linear distance ramp gets a soft start and end, so the seam has
# no visible kink where the ramp meets the fully opaque interior.
_t = np.arange(256, dtype=np.float64) / 255.0
_SMOOTHSTEP = np.round(255.0 * _t * _t * (3.0 - 2.0 * _t)).astype(np.uint8).reshape(1, 256)


@functools.cache
def _outline(points: int) -> npt.NDArray[np.intp]:
    """The jaw and brows, then every point past the 68th, of `points` landmarks (read only;
    kept: np.r_ built them afresh in 20 us, a face a frame)."""
    return np.r_[_OUTLINE, np.arange(68, points)]


def prepare_masks(
    landmarks: Landmarks68,
    valid: Mask,
    feather: float,
    keep_mouth: bool,
    mouth_open: float,
    fine_feather: float = 0.0,
) -> FaceMasks:
    """Build the face masks for landmarks in region coordinates over a region of valid's shape.

    The face area is the convex hull of the jaw and eyebrow points (and of any points past
    the 68th), intersected with `valid`.
    Its feathered edge is a smoothstep ramp over the first `feather` x face size pixels
    inside the area (distance transform: the same profile as erode + blur, at a third of the
    cost), so the soft edge ends at the hull instead of spilling past it. Where the area
    reaches the region's border (a face cut by the frame edge) it is not feathered.
    When `keep_mouth` and the mouth is open (ratio > `mouth_open`), the inner-mouth polygon
    (points 60-67) is cut out with a narrower feather, so the target's mouth interior stays.
    `fine_feather` > 0 adds `fine`: the same ramp over that fraction of the face's size, with
    the same mouth cut (for `blend_bands`).
    """
    h, w = valid.shape
    size = face_size(landmarks[:68])
    ramp = max(1.0, size * feather)
    # Points past the 68 (forehead points, see classical_swapper.extend_forehead) widen the area.
    hull = cv2.convexHull(np.round(landmarks[_outline(len(landmarks))] * _ONE).astype(np.int32))
    area = np.zeros((h, w), np.uint8)
    cv2.fillConvexPoly(area, hull, 255, cv2.LINE_8, _SHIFT)
    cv2.bitwise_and(area, valid, dst=area)
    # Distance to the nearest pixel outside the area (0 outside); pixels beyond the region
    # border count as inside, so a face cut by the frame edge stays opaque up to that edge.
    dist = cv2.distanceTransform(area, cv2.DIST_L2, 5)
    # Even with no feather, drop the outermost pixel (distance 1): valid's rasterised edge is
    # where the warp extrapolates.
    dist -= 1.0
    cv2.max(dist, 0.0, dst=dist)
    alpha = _ramp(dist, ramp)
    fine = _ramp(dist, max(1.0, size * fine_feather)) if fine_feather > 0 else None
    # The core (colour statistics, Poisson clone) is the inner half of the ramp and beyond.
    core = cv2.compare(dist, ramp / 2.0, cv2.CMP_GE)

    if keep_mouth and mouth_open_ratio(landmarks) > mouth_open:
        lips = landmarks[INNER_LIPS]
        width = float(np.linalg.norm(landmarks[54] - landmarks[48]))
        m_radius = int(round(width * feather / 2.0))
        # Work on the mouth's bounding box only: the cut is small next to the region.
        pad = 2 * m_radius + 2
        mx0, my0 = np.maximum(np.floor(lips.min(axis=0)).astype(int) - pad, 0)
        mx1, my1 = np.minimum(np.ceil(lips.max(axis=0)).astype(int) + pad + 1, (w, h))
        if mx1 > mx0 and my1 > my0:
            cut = np.zeros((my1 - my0, mx1 - mx0), np.uint8)
            poly = np.round((lips - (mx0, my0)) * _ONE).astype(np.int32)
            cv2.fillPoly(cut, [poly], 255, cv2.LINE_8, _SHIFT)
            # Dilate then blur by the same radius: the soft edge lies outside the polygon, so
            # the whole interior keeps the target's pixels exactly.
            if m_radius > 0:
                cut = cv2.dilate(cut, _disk(m_radius))
                keep = cv2.bitwise_not(cv2.GaussianBlur(cut, _odd(m_radius), 0))
            else:
                keep = cv2.bitwise_not(cut)
            for weight in (alpha, fine):
                if weight is not None:
                    sub = weight[my0:my1, mx0:mx1]
                    cv2.min(sub, keep, dst=sub)
            sub = core[my0:my1, mx0:mx1]
            sub[cut > 0] = 0
    return FaceMasks(alpha=alpha, core=core, fine=fine)


def _ramp(dist: npt.NDArray[np.float32], ramp: float) -> Mask:
    """The smoothstep weight (0..255) over the first `ramp` pixels of a distance map."""
    if ramp > 1.0:
        return cv2.LUT(cv2.convertScaleAbs(dist, alpha=255.0 / ramp), _SMOOTHSTEP)
    return cv2.compare(dist, 0.0, cv2.CMP_GT)


# OpenCV's BGR -> YCrCb (BT.601) as a matrix on (B, G, R), rows Y, Cr, Cb; offsets (0, 128, 128).
_YCC = np.array([
    [0.114, 0.587, 0.299],
    [-0.114 * 0.713, -0.587 * 0.713, (1 - 0.299) * 0.713],
    [(1 - 0.114) * 0.564, -0.587 * 0.564, -0.299 * 0.564],
])
_YCC_INV = np.linalg.inv(_YCC)
_YCC_OFFSET = np.array([0.0, 128.0, 128.0])


_ROBUST_SPREADS = 3.0  # robust standard deviations (1.4826 MAD) a pixel may be off the median
_ROBUST_MIN = (24.0, 8.0, 8.0)  # Y, Cr, Cb levels: never a tighter cut (an evenly lit face)
_ROBUST_KEEP = 0.5  # share of the mask the cut must leave, else the whole mask is used
# Share of the mask that must be far before any is left out: a bare face's own outliers (the
# eyes, brows, lips, a glint: up to about 9% on a strongly tinted face) are fewer, and its
# statistics stay exactly as they were (a cut that took them in some frames and not in others
# would make the swap's shade flicker).
_ROBUST_FROM = 0.12


def _median_and_spread(hist: np.ndarray) -> tuple[int, float]:
    """The median level of a 256-bin histogram and 1.4826 times the median absolute deviation."""
    cum = np.cumsum(hist)
    median = int(np.searchsorted(cum, cum[-1] / 2.0))
    levels = np.arange(256)
    # Counts at each absolute deviation d from the median: bins median - d and median + d.
    dev = np.bincount(np.abs(levels - median), weights=hist, minlength=256)
    mad = int(np.searchsorted(np.cumsum(dev), cum[-1] / 2.0))
    return median, 1.4826 * mad


def face_pixels(ycc: np.ndarray, mask: Mask) -> Mask:
    """`mask` less the pixels whose colour (YCrCb) is far from most of the mask's: the wall or
    the hair a face's mask takes in where its points overshoot the face (a turned face). A
    pixel more than 3 robust spreads (1.4826 MAD) from the median in any channel is left out
    when such pixels are at least 12% of the mask and under half of it; otherwise the mask is
    returned as it is. A dark or white thing of nearly neutral colour in front of the face may
    stay in (its luma widens the spread past it): occluders are engines.classic.occlusion's."""
    lo, hi = [], []
    for c in range(3):
        hist = cv2.calcHist([ycc], [c], mask, [256], [0, 256]).ravel()
        median, spread = _median_and_spread(hist)
        tol = max(_ROBUST_SPREADS * spread, _ROBUST_MIN[c])
        lo.append(float(np.floor(median - tol)))
        hi.append(float(np.ceil(median + tol)))
    inliers = cv2.bitwise_and(cv2.inRange(ycc, tuple(lo), tuple(hi)), mask)
    kept, total = cv2.countNonZero(inliers), cv2.countNonZero(mask)
    if kept < _ROBUST_KEEP * total or kept > (1.0 - _ROBUST_FROM) * total:
        return mask
    return inliers


def transfer_color(patch: ImageBGR, target: ImageBGR, mask: Mask) -> ImageBGR:
    """Reinhard colour transfer (`color_matrix`, applied): the patch's colours matched to
    the target's skin. Returns a new image; the patch itself when the mask has too few pixels."""
    matrix = color_matrix(patch, target, mask)
    return patch if matrix is None else apply_color(patch, matrix)


def apply_color(patch: ImageBGR, matrix: np.ndarray) -> ImageBGR:
    """`patch` through a colour transfer's 3x4 BGR matrix (saturated back to uint8)."""
    return cv2.transform(patch, matrix)


def color_matrix(patch: ImageBGR, target: ImageBGR, mask: Mask) -> np.ndarray | None:
    """The 3x4 BGR matrix of a Reinhard colour transfer: the patch's per-channel mean and
    spread matched to the target's.

    The channels are luma and the two chroma differences (YCrCb), which are far less
    correlated than B, G, R, so matching them one by one keeps hues. Statistics are taken
    over `mask` only (the inner skin of the face, in both images). The luma contrast ratio is
    clamped so that a nearly flat mask cannot blow it up or flatten the source's features;
    the chroma spread is matched but never widened, so the result's skin has the target's
    colour whatever the source's (grey, low-chroma or tinted). Because YCrCb is linear in
    BGR, the whole transfer is one 3x4 matrix applied to the BGR patch (no colour-space round
    trip): this returns it (None when the mask has too few pixels). In each image the
    statistics leave out a large share of pixels far from most of the mask's colours
    (`face_pixels`): the wall behind a turned face, taken in by its mask, would otherwise
    pull the mean and widen the spread, and the swap would come out tinted and harsher, its
    shade changing as the share of wall does.
    """
    count = cv2.countNonZero(mask)
    if count < _MIN_STAT_PIXELS:
        return None
    if count >= 4 * _STAT_SAMPLE:
        # A large face's statistics from every other pixel of every other row: the same means
        # and spreads to a fraction of a level, at a quarter of the cost (a 200 px face's
        # transfer 2.2 -> 0.9 ms). The transfer itself is applied to every pixel.
        patch_s, target_s, mask = (np.ascontiguousarray(a[::2, ::2]) for a in (patch, target, mask))
    else:
        patch_s, target_s = patch, target
    ycc_s = cv2.cvtColor(patch_s, cv2.COLOR_BGR2YCrCb)
    ycc_t = cv2.cvtColor(target_s, cv2.COLOR_BGR2YCrCb)
    mu_s, sd_s = cv2.meanStdDev(ycc_s, mask=face_pixels(ycc_s, mask))
    mu_t, sd_t = cv2.meanStdDev(ycc_t, mask=face_pixels(ycc_t, mask))
    ratio = sd_t.ravel() / np.maximum(sd_s.ravel(), 1.0)
    gain = np.r_[np.clip(ratio[:1], *_LUMA_RATIO), np.clip(ratio[1:], *_CHROMA_RATIO)]
    linear = _YCC_INV @ np.diag(gain) @ _YCC  # BGR -> BGR, acting on deviations from the mean
    mean_s = _YCC_INV @ (mu_s.ravel() - _YCC_OFFSET)
    mean_t = _YCC_INV @ (mu_t.ravel() - _YCC_OFFSET)
    matrix = np.empty((3, 4), np.float32)
    matrix[:, :3] = linear
    matrix[:, 3] = mean_t - linear @ mean_s
    return matrix


# The lips' colour: their soft edge (a Gaussian's sigma, as a share of the face's size, at
# least half a pixel) and the fewest lip pixels whose median is trusted.
LIP_EDGE = 0.02
_MIN_LIP_PIXELS = 8
_LIP_REDNESS_SLACK = 2.0  # Cr levels the lips may read under the skin and still count as lips


@dataclass(frozen=True, eq=False)
class LipBand:
    """Where a face's lips are in its region: the box (x0, y0, x1, y1) around them, the band
    between the outer and inner lip lines (0/255) and the inside of the inner line, in that
    box, and the soft edge's sigma."""

    box: tuple[int, int, int, int]
    band: Mask
    inner: Mask
    sigma: float


def lip_band(landmarks: Landmarks68, shape: tuple[int, ...]) -> LipBand | None:
    """The lips of a face with `landmarks` in a region of `shape`; None where they leave no
    room."""
    lm = np.asarray(landmarks, np.float32)[:68]
    h, w = shape[:2]
    size = face_size(lm)
    sigma = max(LIP_EDGE * size, 0.5)
    reach = int(math.ceil(3 * sigma)) + 1
    x0, y0 = np.floor(lm[OUTER_LIPS].min(axis=0)).astype(int) - reach
    x1, y1 = np.ceil(lm[OUTER_LIPS].max(axis=0)).astype(int) + reach + 1
    x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
    if x1 - x0 < 2 or y1 - y0 < 2:
        return None
    origin = np.array([x0, y0], np.float32)
    band = np.zeros((y1 - y0, x1 - x0), np.uint8)
    cv2.fillPoly(band, [np.round((lm[OUTER_LIPS] - origin) * _ONE).astype(np.int32)], 255, shift=_SHIFT)
    inner = np.zeros_like(band)
    cv2.fillPoly(inner, [np.round((lm[INNER_LIPS] - origin) * _ONE).astype(np.int32)], 255, shift=_SHIFT)
    return LipBand((int(x0), int(y0), int(x1), int(y1)), cv2.subtract(band, inner), inner, float(sigma))


def _median_chroma(image: ImageBGR, on: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
    """The median Cr and Cb of `image`'s pixels where `on`."""
    return np.median(cv2.cvtColor(image, cv2.COLOR_BGR2YCrCb)[on][:, 1:], axis=0)


def lip_shift(patch: ImageBGR, target: ImageBGR, lips: LipBand, alpha: Mask,
              skin: Mask | None = None) -> npt.NDArray[np.float64] | None:
    """The BGR change `match_lips` adds on the lips (`lips`, from `lip_band`), or None where it
    leaves the patch as it is."""
    x0, y0, x1, y1 = lips.box
    pasted = cv2.bitwise_and(lips.band, cv2.compare(alpha[y0:y1, x0:x1], 127, cv2.CMP_GT))
    if cv2.countNonZero(pasted) < _MIN_LIP_PIXELS:
        return None
    on = pasted > 0
    chroma_t = _median_chroma(target[y0:y1, x0:x1], on)
    if skin is not None and cv2.countNonZero(skin) >= _MIN_STAT_PIXELS:
        skin_cr = (_YCC[1] @ np.array(cv2.mean(target, mask=skin)[:3])) + _YCC_OFFSET[1]
        if chroma_t[0] < skin_cr - _LIP_REDNESS_SLACK:
            return None
    chroma_p = _median_chroma(patch[y0:y1, x0:x1], on)
    shift = _YCC_INV @ np.r_[0.0, chroma_t - chroma_p]  # BGR change with the luma unchanged
    if np.abs(shift).max() < 0.5:
        return None
    return shift


def shift_lips(patch: ImageBGR, lips: LipBand, shift: npt.NDArray[np.float64] | None) -> ImageBGR:
    """`patch` with `shift` (BGR, from `lip_shift`) added on the lips, fading past them; the
    patch itself for None."""
    if shift is None:
        return patch
    x0, y0, x1, y1 = lips.box
    full = lips.band.astype(np.float32) * (1.0 / 255.0)
    weight = cv2.max(cv2.GaussianBlur(full, (0, 0), lips.sigma), full)  # whole on the lips, fading past them
    weight[lips.inner > 0] = 0.0
    delta = cv2.merge([weight * float(v) for v in shift])
    out = patch.copy()
    out[y0:y1, x0:x1] = cv2.add(patch[y0:y1, x0:x1], delta, dtype=cv2.CV_8U)  # rounded, saturated
    return out


def match_lips(patch: ImageBGR, target: ImageBGR, landmarks: Landmarks68, alpha: Mask,
               skin: Mask | None = None) -> ImageBGR:
    """`patch` with its lips' chroma (Cr, Cb) moved by the difference of the median chroma of
    the target's lips and its own: the source's lips keep their shape and their light and
    shade (luma), and take the target's colour.

    The colour transfer matches the face as a whole to the target's skin and never widens
    its chroma spread, so lips keep only the colour the source gave them over its skin: a
    grey or low-chroma source's lips came out the colour of the skin around them, grey
    lips on a face whose own are red. The lips are the band between the outer (48-59) and
    the inner (60-67) lip lines, where the warp puts the source's lips; inside the inner
    line (teeth, the mouth's interior) nothing changes. Both medians leave out what the blend
    does not paste (`alpha` under half: an occluder cut out, lips kept as the target's), and
    a median is not moved by something in front of less than half of the lips that was not
    found (a bar across the mouth: its grey in a mean took the colour out of the lips).
    Lips are never less red than the skin around them: where the target's read less red
    (Cr) than its skin (`skin`, the colour statistics' mask), what covers them is not lips
    and the patch is left as it is. The shift fades out over LIP_EDGE of the face's size
    outside the lips. Returns a new image; the patch itself when the lips have too few
    pixels or already match.
    """
    lips = lip_band(landmarks, patch.shape)
    if lips is None:
        return patch
    return shift_lips(patch, lips, lip_shift(patch, target, lips, alpha, skin))


_HALF_FROM = 3.0  # px: from this sigma on, the shading's blurs run at half size


def match_shading(patch: ImageBGR, target: ImageBGR, mask: Mask, sigma: float,
                  weight: float) -> ImageBGR:
    """`patch` with `weight` of its broad light and shade (its luma blurred by `sigma` px over
    `mask`) replaced by the target's: the source's features stay, the target's lighting of
    the face comes in.

    A source photo lit from the front, warped onto a face turned into side light, otherwise
    comes out evenly lit on a face whose near cheek is bright and far side in shade: flat and
    pale, and dlib's points on it move (the shading is also where a turned face's outline
    is read). The same luma offset is added to B, G and R, so hues stay. Returns a new image;
    the patch itself when `weight` is 0 or the mask has too few pixels.

    The blurs are over the mask only (normalised convolution): pixels outside it (the wall,
    the hair) pull nothing; just outside it (the blend's soft edge) the offset is a mean of
    the mask's nearby pixels. The two lumas' blurs are one blur of their difference (the blur
    is linear: the same offsets to within float rounding, one Gaussian blur fewer), and from a
    sigma of _HALF_FROM px they run at half size (a quarter of the pixels, half the kernel),
    the offset scaled back up: a field this smooth comes back within 2 levels where it is
    blended (the six-face bench clip written losslessly: 0.07% of its values 1 level off,
    none more than 2), at 0.13 against 0.31 ms a face.
    """
    if weight <= 0 or sigma <= 0 or cv2.countNonZero(mask) < _MIN_STAT_PIXELS:
        return patch
    inside = (mask > 0).astype(np.float32)
    diff = cv2.cvtColor(target, cv2.COLOR_BGR2GRAY).astype(np.float32)
    diff -= cv2.cvtColor(patch, cv2.COLOR_BGR2GRAY)
    diff *= inside
    h, w = mask.shape[:2]
    k = 2 if sigma >= _HALF_FROM else 1
    if k > 1:
        half = ((w + 1) // 2, (h + 1) // 2)
        diff, inside = (cv2.resize(a, half, interpolation=cv2.INTER_AREA) for a in (diff, inside))
    offset = cv2.GaussianBlur(diff, (0, 0), sigma / k)
    offset *= weight / np.maximum(cv2.GaussianBlur(inside, (0, 0), sigma / k), 1e-3)
    if k > 1:
        offset = cv2.resize(offset, (w, h), interpolation=cv2.INTER_LINEAR)
    out = patch.astype(np.float32)
    out += offset[..., None]
    np.clip(out, 0.0, 255.0, out=out)
    out += 0.5
    return out.astype(np.uint8)


_DETAIL_SIGMAS = (1.0, 2.0, 4.0)  # px: the blurs mixed in to soften a patch, lightest first


def _soften(image: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian blur over +-2 sigma (a softening, not a measurement: the tails do not matter)."""
    size = 2 * math.ceil(2 * sigma) + 1
    return cv2.GaussianBlur(image, (size, size), sigma)


def _luma_detail(luma: npt.NDArray[np.uint8], mask: Mask) -> float:
    laplacian = cv2.Laplacian(luma, cv2.CV_16S, ksize=1)
    return float(cv2.mean(cv2.convertScaleAbs(laplacian), mask=mask)[0])


def detail(image: ImageBGR, mask: Mask) -> float:
    """Fine detail inside `mask`: the mean absolute Laplacian (3x3) of the image's luma."""
    return _luma_detail(cv2.cvtColor(image, cv2.COLOR_BGR2GRAY), mask)


def detail_mix(patch: ImageBGR, target: ImageBGR, mask: Mask, ratio: float = 1.0
               ) -> tuple[float, float, float] | None:
    """The softening `match_detail` gives `patch`: (sharp sigma, soft sigma, the soft one's
    weight), or None for none."""
    if ratio <= 0 or cv2.countNonZero(mask) < _MIN_STAT_PIXELS:
        return None
    goal = detail(target, mask) * ratio
    luma = cv2.cvtColor(patch, cv2.COLOR_BGR2GRAY)
    sharp_sigma, sharp_detail = 0.0, _luma_detail(luma, mask)
    if sharp_detail <= goal:
        return None
    for sigma in _DETAIL_SIGMAS:
        soft_detail = _luma_detail(_soften(luma, sigma), mask)
        if soft_detail <= goal or sigma == _DETAIL_SIGMAS[-1]:
            break
        sharp_sigma, sharp_detail = sigma, soft_detail
    weight = min((sharp_detail - goal) / max(sharp_detail - soft_detail, 1e-6), 1.0)
    return sharp_sigma, sigma, weight


def soften_by(patch: ImageBGR, mix: tuple[float, float, float] | None) -> ImageBGR:
    """`patch` softened by `mix` (from `detail_mix`); the patch itself for None."""
    if mix is None:
        return patch
    sharp_sigma, sigma, weight = mix
    sharp = patch if sharp_sigma == 0 else _soften(patch, sharp_sigma)
    return cv2.addWeighted(sharp, 1.0 - weight, _soften(patch, sigma), weight, 0.0)


def match_detail(patch: ImageBGR, target: ImageBGR, mask: Mask, ratio: float = 1.0) -> ImageBGR:
    """Soften `patch` until its fine detail inside `mask` is at most `ratio` times the target's.

    A source photo sampled at the face's size is sharper than a video frame (its focus, the
    camera's resolution, the encoder): pasted as it is, the face stands out from the head
    around it and every small movement of the face flickers more than the face it replaces.
    The patch is mixed with a Gaussian blur of itself (or two blurs, for a much softer
    target), the weight found from the detail each has, so the softening varies smoothly
    from frame to frame rather than in steps. The blurs are tried on the luma alone; only the
    chosen ones are applied to the colour patch. A patch no sharper than the target, or a
    mask with too few pixels, is returned as it is (never sharpened).
    """
    return soften_by(patch, detail_mix(patch, target, mask, ratio))


def blend_feather(roi: ImageBGR, patch: ImageBGR, alpha: Mask) -> None:
    """In place: roi = alpha * patch + (1 - alpha) * roi, alpha in 0..255.

    Pixels where alpha is 0 keep their exact value.
    """
    w_patch = alpha.astype(np.float32)
    w_roi = 255.0 - w_patch
    # blendLinear normalises by the sum of the weights, so 0..255 weights need no scaling.
    np.copyto(roi, cv2.blendLinear(patch, roi, w_patch, w_roi))


def _coarse(image: npt.NDArray[np.float32], sigma: float) -> npt.NDArray[np.float32]:
    """`image` blurred by a Gaussian of about `sigma` px: for a wide blur, on a copy shrunk so
    that the blur spans 2-4 of its pixels (by area), then enlarged back (bilinear). What is
    left of a picture that soft loses nothing to the detour, which takes a fifth of the time."""
    h, w = image.shape[:2]
    k = max(int(sigma // 2), 1)
    if k == 1 or min(h, w) < 4 * k:
        return cv2.GaussianBlur(image, (0, 0), sigma)
    small = cv2.resize(image, (max(w // k, 1), max(h // k, 1)), interpolation=cv2.INTER_AREA)
    small = cv2.GaussianBlur(small, (0, 0), sigma / k)
    return cv2.resize(small, (w, h), interpolation=cv2.INTER_LINEAR)


def blend_bands(roi: ImageBGR, patch: ImageBGR, valid: Mask, alpha: Mask, fine: Mask, sigma: float) -> None:
    """In place: the blend in two bands. Each image is split by a blur of `sigma` px into its
    coarse band (light, shading, colour) and its fine one (what the blur takes away: the
    features' edges, the skin's texture). The coarse bands are blended with `alpha`, the fine
    ones with `fine`, and added back. With a narrow `fine` and a wide `alpha`, the source's
    features reach almost to the area's edge while its light fades into the target's over a
    wide band: more of the source's face, no sharper seam.

    The patch's coarse band is the blur of its `valid` pixels only (a normalised blur: the
    black outside the warp does not darken its edge). Where both weights are 0 the roi keeps
    its exact values, and where both are 255 it takes the patch's."""
    bx, by, bw, bh = cv2.boundingRect(cv2.max(fine, alpha))
    if bw == 0 or bh == 0:
        return
    # Only the box the weights cover, grown by the blur's reach.
    reach = int(math.ceil(3 * sigma))
    h, w = alpha.shape
    box = (slice(max(by - reach, 0), min(by + bh + reach, h)), slice(max(bx - reach, 0), min(bx + bw + reach, w)))
    target, source, f = roi[box], patch[box], fine[box]
    # The fine weight's blend of the whole images ...
    f32 = f.astype(np.float32)
    out = cv2.blendLinear(source, target, f32, 255.0 - f32).astype(np.float32)
    # ... less (fine - alpha) x (coarse source - coarse target): the coarse bands blended with
    # alpha instead (a signed difference: either ramp may be the wider one).
    inside = (valid[box] > 0).astype(np.float32)
    coarse = _coarse(cv2.multiply(source.astype(np.float32), cv2.merge([inside] * 3)), sigma)
    coarse = cv2.divide(coarse, cv2.merge([cv2.max(_coarse(inside, sigma), 1e-3)] * 3))
    coarse = cv2.subtract(coarse, _coarse(target.astype(np.float32), sigma))
    gap = cv2.subtract(f32, alpha[box].astype(np.float32))
    out = cv2.subtract(out, cv2.multiply(coarse, cv2.merge([gap] * 3), scale=1.0 / 255.0))
    # Where both weights are 0 this is the target's own value exactly.
    np.copyto(target, cv2.convertScaleAbs(out))


def blend_poisson(roi: ImageBGR, patch: ImageBGR, masks: FaceMasks) -> None:
    """In place: Poisson (seamlessClone, NORMAL_CLONE) of patch into roi over `masks.core`.

    Both images are padded by replicating their edges and the mask by zeros, so the clone
    mask never touches an image border (where seamlessClone fails); the result is then
    feathered in with `masks.alpha`, which keeps pixels outside the face and inside a kept
    mouth exactly as they were.
    """
    if cv2.countNonZero(masks.core) == 0:
        # Nothing left to clone (a tiny face under a wide feather): fall back to the alpha blend.
        blend_feather(roi, patch, masks.alpha)
        return
    pad = 2
    src = cv2.copyMakeBorder(patch, pad, pad, pad, pad, cv2.BORDER_REPLICATE)
    dst = cv2.copyMakeBorder(roi, pad, pad, pad, pad, cv2.BORDER_REPLICATE)
    mask = cv2.copyMakeBorder(masks.core, pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=0)
    bx, by, bw, bh = cv2.boundingRect(mask)
    # seamlessClone centres the mask's bounding box on `p` with integer halves; this p puts
    # it back exactly where it came from.
    center = (bx + bw // 2, by + bh // 2)
    cloned = cv2.seamlessClone(src, dst, mask, center, cv2.NORMAL_CLONE)
    blend_feather(roi, cloned[pad:-pad, pad:-pad], masks.alpha)
