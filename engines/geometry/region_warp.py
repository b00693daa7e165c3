"""`cv2.warpAffine` into one rectangle of the destination, for the fast paste-back paths.

Paste-back on the fast paths touches only the face's region, yet should look like
insightface's, which warps into the whole frame. How OpenCV computes each destination
pixel's source coordinate (and rounds it) depends on its version and on the CPU code it
dispatched to: OpenCV 4 works in fixed point from the pixel's own column and row; OpenCV 5
in float32 or double, with or without fused multiply-add, vectorised differently per CPU.
So a warp into the region can equal the full warp bit for bit on one CPU and not on another.

What holds everywhere is a bound: on every CPU and OpenCV build, the region's warp is
within `BOUND` grey levels of the full warp's pixels (`tests/test_region_warp.py` asserts
it under each OpenCV dispatch level this CPU can select). Exactness is a bonus of the CPU at
hand: the candidate schemes below are tried once per process on a probe, and the first one
that reproduces this process's `cv2.warpAffine` exactly is used; a candidate that raises or
differs is not exact. If none is, the shifted warp is used. The choice, and the largest
difference from the full warp measured on the probe, are logged at debug level.

Where exactness is promised (the reference mode), nothing here is used: the paste-back
warps the whole frame, as the reference does (`InSwapper(full_frame_paste=True)`).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import cv2
import numpy as np

log = logging.getLogger(__name__)

Region = tuple[int, int, int, int]  # x0, y0, x1, y1 in destination pixels
Images = Sequence[tuple[np.ndarray, float]]  # (source image, border value) pairs

BOUND = 2  # grey levels: the region warp's largest difference from the full warp, on any CPU

# OpenCV 4.x fixed-point warp constants (imgwarp.cpp).
_INTER_BITS = 5
_INTER_TAB = 1 << _INTER_BITS
_AB_BITS = 10
_AB_SCALE = 1 << _AB_BITS


def _f32(a) -> np.ndarray:
    return np.asarray(a, np.float64).astype(np.float32)


# The coordinate terms. Every one takes (a, b, c) and returns a*b + c as float32, written
# into `out` when given (then `out` is returned): the same signature, so any of them can
# compute either term of a scheme.

def _fma32(a, b, c, out: np.ndarray | None = None) -> np.ndarray:
    """float32 fused multiply-add: a*b of two float32 is exact in float64, one rounding after.
    With `out`, the sum is cast into it: no region-sized float64 temporary is kept."""
    product = np.asarray(a, np.float64) * np.asarray(b, np.float64)
    if out is None:
        return np.add(product, np.asarray(c, np.float64)).astype(np.float32)
    np.add(product, np.asarray(c, np.float64), out=out, casting="unsafe")
    return out


def _mul_add32(a, b, c, out: np.ndarray | None = None) -> np.ndarray:
    """float32 a*b, rounded, then + c, rounded."""
    return np.add(np.multiply(_f32(a), _f32(b), dtype=np.float32), _f32(c), out=out)


def _mul_add64(a, b, c, out: np.ndarray | None = None) -> np.ndarray:
    """a*b + c in float64, rounded once to float32."""
    result = np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)
    if out is None:
        return result.astype(np.float32)
    np.copyto(out, result, casting="unsafe")
    return out


Term = Callable[..., np.ndarray]


def _map_buffer(h: int, w: int) -> np.ndarray:
    """A per-thread (h, w, 2) float32 buffer for coordinates, grown when needed.

    Fresh region-sized arrays cost page faults on every face (more than computing them);
    the buffer is only used inside one warp call.
    """
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.size < h * w * 2:
        buf = np.empty(max(h * w * 2, 2 * 512 * 512), np.float32)
        _scratch.buf = buf
    return buf[: h * w * 2].reshape(h, w, 2)


_scratch = threading.local()


def _remap(images: Images, m1: np.ndarray, m2: np.ndarray | None) -> list[np.ndarray]:
    return [cv2.remap(src, m1, m2, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=border)
            for src, border in images]


def _float_scheme(row_op: Term, col_op: Term) -> Callable[[np.ndarray, Region, Images], list[np.ndarray]]:
    """OpenCV 5's per-pixel source coordinates, row term (y, translation) then column term
    (x), in float32, sampled by remap (which shares the warp's interpolation)."""

    def warp(IM: np.ndarray, region: Region, images: Images) -> list[np.ndarray]:
        x0, y0, x1, y1 = region
        A = _f32(cv2.invertAffineTransform(IM))
        xs = np.arange(x0, x1, dtype=np.float32)[None, :]
        ys = np.arange(y0, y1, dtype=np.float32)[:, None]
        maps = _map_buffer(y1 - y0, x1 - x0)  # interleaved CV_32FC2, as remap takes it
        col_op(A[0, 0], xs, row_op(ys, A[0, 1], A[0, 2]), out=maps[..., 0])
        col_op(A[1, 0], xs, row_op(ys, A[1, 1], A[1, 2]), out=maps[..., 1])
        return _remap(images, maps, None)

    return warp


def _fixed_point(IM: np.ndarray, region: Region, images: Images) -> list[np.ndarray]:
    """OpenCV 4's fixed-point coordinates, as the CV_16SC2 + CV_16UC1 pair remap takes."""
    x0, y0, x1, y1 = region
    A = cv2.invertAffineTransform(IM)
    xs = np.arange(x0, x1, dtype=np.float64)[None, :]
    ys = np.arange(y0, y1, dtype=np.float64)[:, None]
    round_delta = _AB_SCALE // _INTER_TAB // 2
    shift = _AB_BITS - _INTER_BITS
    X0 = np.rint((A[0, 1] * ys + A[0, 2]) * _AB_SCALE).astype(np.int64) + round_delta
    Y0 = np.rint((A[1, 1] * ys + A[1, 2]) * _AB_SCALE).astype(np.int64) + round_delta
    X = (X0 + np.rint(A[0, 0] * xs * _AB_SCALE).astype(np.int64)) >> shift
    Y = (Y0 + np.rint(A[1, 0] * xs * _AB_SCALE).astype(np.int64)) >> shift
    xy = np.stack([np.clip(X >> _INTER_BITS, -32768, 32767),
                   np.clip(Y >> _INTER_BITS, -32768, 32767)], axis=-1).astype(np.int16)
    frac = ((Y & (_INTER_TAB - 1)) * _INTER_TAB + (X & (_INTER_TAB - 1))).astype(np.uint16)
    return _remap(images, xy, frac)


def _shifted(IM: np.ndarray, region: Region, images: Images) -> list[np.ndarray]:
    """`cv2.warpAffine` straight into the region, its translation moved by the region's
    corner: the cheapest (one call per image, no coordinate maps)."""
    x0, y0, x1, y1 = region
    shifted = np.array(IM, np.float64)
    shifted[:, 2] -= (x0, y0)
    return [cv2.warpAffine(src, shifted, (x1 - x0, y1 - y0), borderValue=border) for src, border in images]


SHIFTED = "shifted translation"

# The candidates, tried in this order; each maps (IM, region, images) to the region's warps.
SCHEMES: dict[str, Callable[[np.ndarray, Region, Images], list[np.ndarray]]] = {
    SHIFTED: _shifted,
    "float32, fused column term": _float_scheme(_mul_add32, _fma32),
    "float32, no fused multiply-add": _float_scheme(_mul_add32, _mul_add32),
    "float32, fused row and column terms": _float_scheme(_fma32, _fma32),
    "float32, double row term": _float_scheme(_mul_add64, _fma32),
    "fixed point (OpenCV 4)": _fixed_point,
}


@dataclass(frozen=True)
class WarpChoice:
    """The scheme this process uses, and how it compared with the full warp on the probe."""

    scheme: str
    exact: bool  # reproduced `cv2.warpAffine` bit for bit on every probe
    max_diff: float  # the largest difference from the full warp on the probe, in grey levels
    cpu: str  # OpenCV's CPU features line: what its dispatch could use


def _probes() -> list[tuple[np.ndarray, np.ndarray]]:
    """Six (source, IM) pairs: random textures under random similarity transforms."""
    rng = np.random.default_rng(20261130)
    probes = []
    for _ in range(6):
        angle, scale = rng.uniform(-0.6, 0.6), rng.uniform(0.4, 1.6)
        c, s = scale * np.cos(angle), scale * np.sin(angle)
        M = np.array([[c, -s, rng.uniform(-300, 40)], [s, c, rng.uniform(-200, 30)]])
        probes.append((rng.integers(0, 256, (128, 128, 3), np.uint8), cv2.invertAffineTransform(M)))
    return probes


_PROBE_SIZE = (400, 300)
_PROBE_REGION = (37, 23, 371, 289)


def probe_difference(scheme: str) -> float:
    """The largest difference (grey levels) between `scheme`'s region warp and the full
    `cv2.warpAffine` over the probe: a uint8 texture and a float32 white square per
    transform. Raises whatever the scheme raises."""
    warp = SCHEMES[scheme]
    x0, y0, x1, y1 = _PROBE_REGION
    worst = 0.0
    for src, IM in _probes():
        images = [(src, 0.0), (np.full(src.shape[:2], 255, np.float32), 0.0)]
        for (image, _), ours in zip(images, warp(IM, _PROBE_REGION, images)):
            full = cv2.warpAffine(image, IM, _PROBE_SIZE, borderValue=0.0)[y0:y1, x0:x1]
            if ours.shape != full.shape:
                return float("inf")
            worst = max(worst, float(np.max(np.abs(ours.astype(np.float64) - full.astype(np.float64)))))
    return worst


def choose(schemes: Sequence[str] | None = None) -> WarpChoice:
    """The first of `schemes` (all, in order, by default) that reproduces this process's
    `cv2.warpAffine` exactly on the probe; the shifted warp when none does. A candidate
    that raises counts as not exact."""
    cpu = cv2.getCPUFeaturesLine()
    measured: dict[str, float] = {}
    for scheme in SCHEMES if schemes is None else schemes:
        try:
            measured[scheme] = probe_difference(scheme)
        except Exception as exc:  # a candidate's failure must never reach a paste
            log.debug("region warp: candidate %r failed on the probe (%s: %s); not exact",
                      scheme, type(exc).__name__, exc)
            continue
        if measured[scheme] == 0:
            return WarpChoice(scheme, True, 0.0, cpu)
    worst = measured[SHIFTED] if SHIFTED in measured else probe_difference(SHIFTED)
    return WarpChoice(SHIFTED, worst == 0, worst, cpu)


@functools.lru_cache(maxsize=1)
def current() -> WarpChoice:
    """This process's choice, made on first use and logged (debug; a warning past `BOUND`)."""
    choice = choose()
    how = "exact" if choice.exact else f"largest difference {choice.max_diff:g} grey levels"
    log.debug("region warp: %s, %s against cv2.warpAffine on the probe (OpenCV %s; CPU %s)",
              choice.scheme, how, cv2.__version__, choice.cpu)
    if choice.max_diff > BOUND:
        log.warning("region warp: %s differs from cv2.warpAffine by %g grey levels on this CPU (bound %d)",
                    choice.scheme, choice.max_diff, BOUND)
    return choice


def warp_affine_region(IM: np.ndarray, region: Region, images: Images, scheme: str | None = None) -> list[np.ndarray]:
    """For each (src, border_value): `cv2.warpAffine(src, IM, frame_size,
    borderValue=border_value)[y0:y1, x0:x1]` within `BOUND` grey levels (exactly where this
    CPU allows), computed for the region's pixels only.

    `IM` maps source to full-frame coordinates (it is not inverted). The images share one
    set of sample coordinates. `scheme` picks a candidate by name (tests, tools); by
    default this process's choice (`current()`).
    """
    return SCHEMES[current().scheme if scheme is None else scheme](IM, region, images)
