"""`cv2.warpAffine` into one rectangle of the destination, bit-identical to the full warp.

Paste-back must touch only the face's region, yet match insightface, which warps into the
whole frame. Warping into the region with a shifted translation is not the same: OpenCV
computes each destination pixel's source coordinate from the pixel's own column and row,
and rounds along the way, so shifting the origin moves the rounding.

Instead we compute, for the region's pixels only, the very coordinates `cv2.warpAffine`
would compute for them in the full frame, and sample with `cv2.remap`, which shares the
warp's interpolation. How OpenCV rounds depends on its version and on the CPU it dispatched
to (OpenCV 5 works in float32 with or without fused multiply-add; 4.x in fixed point), so
the scheme is chosen once per process by comparing each candidate with `cv2.warpAffine` on
a probe. If none reproduces it exactly, the shifted warp is used (within a grey level or two).
"""

from __future__ import annotations

import functools
import logging
import threading

import cv2
import numpy as np

log = logging.getLogger(__name__)

Region = tuple[int, int, int, int]  # x0, y0, x1, y1 in destination pixels

# OpenCV 4.x fixed-point warp constants (imgwarp.cpp).
_INTER_BITS = 5
_INTER_TAB = 1 << _INTER_BITS
_AB_BITS = 10
_AB_SCALE = 1 << _AB_BITS


def _f32(a) -> np.ndarray:
    return np.asarray(a, np.float64).astype(np.float32)


def _fma32(a, b, c, out: np.ndarray) -> None:
    # float32 fused multiply-add: a*b of two float32 is exact in float64, one rounding after.
    # The sum is cast into `out` in chunks: no region-sized float64 temporary.
    product = np.asarray(a, np.float64) * np.asarray(b, np.float64)
    np.add(product, np.asarray(c, np.float64), out=out, casting="unsafe")


def _mul_add32(a, b, c, out: np.ndarray | None = None) -> np.ndarray:
    return np.add(np.multiply(_f32(a), _f32(b), dtype=np.float32), _f32(c), out=out)


def _row_double(ys, m, c):
    return _f32(np.asarray(ys, np.float64) * np.float64(m) + np.float64(c))


def _float_maps(A: np.ndarray, region: Region, row_op, col_op, out: np.ndarray) -> tuple:
    """OpenCV 5's per-pixel source coordinates, row term then column term, in float32,
    written into `out` (h, w, 2) as the interleaved CV_32FC2 map remap takes."""
    x0, y0, x1, y1 = region
    Af = _f32(A)
    xs = np.arange(x0, x1, dtype=np.float32)[None, :]
    ys = np.arange(y0, y1, dtype=np.float32)[:, None]
    col_op(Af[0, 0], xs, row_op(ys, Af[0, 1], Af[0, 2]), out=out[..., 0])
    col_op(Af[1, 0], xs, row_op(ys, Af[1, 1], Af[1, 2]), out=out[..., 1])
    return out, None


def _fixed_maps(A: np.ndarray, region: Region, _row, _col, _out) -> tuple:
    """OpenCV 4's fixed-point coordinates, as the CV_16SC2 + CV_16UC1 pair remap takes."""
    x0, y0, x1, y1 = region
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
    return xy, frac


_SCHEMES = {
    "float32, fused column term": (_float_maps, _mul_add32, _fma32),
    "float32, no fused multiply-add": (_float_maps, _mul_add32, _mul_add32),
    "float32, fused row and column terms": (_float_maps, _fma32, _fma32),
    "float32, double row term": (_float_maps, _row_double, _fma32),
    "fixed point (OpenCV 4)": (_fixed_maps, None, None),
}


_scratch = threading.local()


def _map_buffer(h: int, w: int) -> np.ndarray:
    """A per-thread (h, w, 2) float32 buffer for coordinates, grown when needed.

    Fresh region-sized arrays cost page faults on every face (more than computing them);
    the buffer is only used inside one `warp_affine_region` call.
    """
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.size < h * w * 2:
        buf = np.empty(max(h * w * 2, 2 * 512 * 512), np.float32)
        _scratch.buf = buf
    return buf[: h * w * 2].reshape(h, w, 2)


def _warp_all(scheme: str, A: np.ndarray, region: Region,
              images: list[tuple[np.ndarray, float]]) -> list[np.ndarray]:
    build, row_op, col_op = _SCHEMES[scheme]
    x0, y0, x1, y1 = region
    m1, m2 = build(A, region, row_op, col_op, _map_buffer(y1 - y0, x1 - x0))
    return [cv2.remap(src, m1, m2, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT,
                      borderValue=border) for src, border in images]


@functools.lru_cache(maxsize=1)
def exact_scheme() -> str | None:
    """The coordinate scheme under which remap reproduces this cv2's warpAffine, or None."""
    rng = np.random.default_rng(20261130)
    probes = []
    for _ in range(6):
        angle, scale = rng.uniform(-0.6, 0.6), rng.uniform(0.4, 1.6)
        c, s = scale * np.cos(angle), scale * np.sin(angle)
        M = np.array([[c, -s, rng.uniform(-300, 40)], [s, c, rng.uniform(-200, 30)]])
        probes.append((rng.integers(0, 256, (128, 128, 3), np.uint8), cv2.invertAffineTransform(M)))
    size = (400, 300)
    region = (37, 23, 371, 289)
    for scheme in _SCHEMES:
        exact = True
        for src, IM in probes:
            for image in (src, np.full(src.shape[:2], 255, np.float32)):
                full = cv2.warpAffine(image, IM, size, borderValue=0.0)
                x0, y0, x1, y1 = region
                ours = _warp_all(scheme, cv2.invertAffineTransform(IM), region, [(image, 0.0)])[0]
                if not np.array_equal(ours, full[y0:y1, x0:x1]):
                    exact = False
                    break
            if not exact:
                break
        if exact:
            log.debug("region warp: %s reproduces cv2.warpAffine", scheme)
            return scheme
    log.info("region warp: no coordinate scheme reproduces this OpenCV's warpAffine exactly; "
             "paste-back may differ from a full-frame warp by a grey level or two")
    return None


def warp_affine_region(IM: np.ndarray, region: Region,
                       images: list[tuple[np.ndarray, float]]) -> list[np.ndarray]:
    """For each (src, border_value): `cv2.warpAffine(src, IM, frame_size,
    borderValue=border_value)[y0:y1, x0:x1]`, computed for the region's pixels only.

    `IM` maps source to full-frame coordinates (it is not inverted). The images share one
    set of sample coordinates, computed once.
    """
    x0, y0, x1, y1 = region
    scheme = exact_scheme()
    if scheme is None:
        shifted = np.array(IM, np.float64)
        shifted[:, 2] -= (x0, y0)
        return [cv2.warpAffine(src, shifted, (x1 - x0, y1 - y0), borderValue=border)
                for src, border in images]
    return _warp_all(scheme, cv2.invertAffineTransform(IM), region, images)
