"""HDR pictures (PQ or HLG, BT.2020 or P3) to BT.709 SDR: a tone map on linear light.

The decoded R'G'B' goes to linear display light (PQ's EOTF; HLG's inverse OETF and its
OOTF for a 1000 cd/m² display), in units of 100 cd/m², onto BT.709's primaries (a 3x3
matrix in linear light), then through Hable's filmic curve applied to the brightest of the
three components (the scale it gives is applied to all three, so hues stay: the choice of
FFmpeg's `tonemap=hable:desat=0`), normalised so the content's peak lands on SDR white,
and back to BT.709 code values with BT.1886's inverse EOTF (gamma 2.4, as zimg writes a
display-referred BT.709 signal). Per-component curves are lookup tables; the rest is
float32 arithmetic on reused buffers."""
from __future__ import annotations

import math

import av
import cv2
import numpy as np
from av.video.reformatter import Interpolation

from stream.media.hdr import PRI_BT709, PRI_BT2020, PRI_P3_D65, TRC_HLG, Dynamic

REFERENCE_WHITE = 100.0  # cd/m²: linear light 1.0, SDR's white

# SMPTE ST 2084 (PQ) constants.
_M1, _M2 = 2610 / 16384, 2523 / 4096 * 128
_C1, _C2, _C3 = 3424 / 4096, 2413 / 4096 * 32, 2392 / 4096 * 32
# ARIB STD-B67 (HLG) constants, and its OOTF for a 1000 cd/m² display (system gamma 1.2).
_HLG_A = 0.17883277
_HLG_B = 1 - 4 * _HLG_A
_HLG_C = 0.5 - _HLG_A * math.log(4 * _HLG_A)
_HLG_PEAK_NITS, _HLG_GAMMA = 1000.0, 1.2
_BT2020_LUMA = (0.2627, 0.6780, 0.0593)  # R, G, B

# CIE 1931 xy of the red, green, blue primaries; all with D65 white.
_PRIMARIES = {
    PRI_BT709: ((0.640, 0.330), (0.300, 0.600), (0.150, 0.060)),
    PRI_BT2020: ((0.708, 0.292), (0.170, 0.797), (0.131, 0.046)),
    PRI_P3_D65: ((0.680, 0.320), (0.265, 0.690), (0.150, 0.060)),
}
_D65 = (0.3127, 0.3290)

_OETF_STEPS = 4096  # linear [0, 1] -> 8-bit code: finer than one code everywhere but the blackest

# Hable's curve with the constants FFmpeg's tonemap filter uses.
_A, _B, _C, _D, _E, _F = 0.15, 0.50, 0.10, 0.20, 0.02, 0.30


def hable(x: np.ndarray | float) -> np.ndarray | float:
    """Hable's filmic curve (x in units of SDR white)."""
    return (x * (x * _A + _C * _B) + _D * _E) / (x * (x * _A + _B) + _D * _F) - _E / _F


def pq_to_nits(code: np.ndarray) -> np.ndarray:
    """PQ code values (0-1) to display light in cd/m²."""
    p = np.power(np.clip(code, 0.0, 1.0), 1.0 / _M2)
    return 10000.0 * np.power(np.maximum(p - _C1, 0.0) / (_C2 - _C3 * p), 1.0 / _M1)


def hlg_to_scene(code: np.ndarray) -> np.ndarray:
    """HLG code values (0-1) to scene light (0-1): the inverse of its OETF."""
    code = np.clip(code, 0.0, 1.0)
    low = code * code / 3.0
    high = (np.exp((code - _HLG_C) / _HLG_A) + _HLG_B) / 12.0
    return np.where(code <= 0.5, low, high)


def primaries_matrix(source: int, target: int = PRI_BT709) -> np.ndarray:
    """The 3x3 matrix taking linear RGB on `source`'s primaries to `target`'s (D65 both)."""
    def rgb_to_xyz(primaries: tuple[tuple[float, float], ...]) -> np.ndarray:
        xyz = np.array([[x / y, 1.0, (1 - x - y) / y] for x, y in primaries]).T
        wx, wy = _D65
        white = np.array([wx / wy, 1.0, (1 - wx - wy) / wy])
        return xyz * np.linalg.solve(xyz, white)

    return np.linalg.solve(rgb_to_xyz(_PRIMARIES[target]), rgb_to_xyz(_PRIMARIES[source]))


class ToneMapper:
    """Decoded HDR frames -> BT.709 SDR BGR pictures of one size (reused buffers).

    `dynamic` says the transfer (PQ or HLG), the primaries (BT.2020, P3 or BT.709; unknown
    ones count as BT.2020) and the content's peak (MaxCLL, the mastering display's, else
    1000 cd/m²), which the curve maps to SDR white."""

    def __init__(self, dynamic: Dynamic, width: int, height: int) -> None:
        if not dynamic.hdr:
            raise ValueError(f"not an HDR transfer: {dynamic.transfer}")
        self.dynamic = dynamic
        self.width, self.height = width, height
        self.hlg = dynamic.transfer == TRC_HLG
        self.peak = (_HLG_PEAK_NITS if self.hlg else dynamic.peak_nits) / REFERENCE_WHITE
        primaries = dynamic.primaries if dynamic.primaries in _PRIMARIES else PRI_BT2020
        matrix = primaries_matrix(primaries)  # RGB -> RGB
        self._matrix = matrix[::-1, ::-1].astype(np.float32).copy()  # as BGR -> BGR for cv2.transform
        codes = np.arange(65536, dtype=np.float64) / 65535.0
        if self.hlg:
            self._to_linear = hlg_to_scene(codes).astype(np.float32)
        else:
            self._to_linear = (pq_to_nits(codes) / REFERENCE_WHITE).astype(np.float32)
        self._scale = float(1.0 / hable(self.peak))
        levels = np.arange(_OETF_STEPS, dtype=np.float64) / (_OETF_STEPS - 1)
        self._oetf = np.clip(np.round(255.0 * np.power(levels, 1 / 2.4)), 0, 255).astype(np.uint8)
        shape = (height, width)
        self._linear = np.empty((*shape, 3), np.float32)
        self._mapped = np.empty((*shape, 3), np.float32)
        self._planes = [np.empty(shape, np.float32) for _ in range(3)]  # B, G, R
        self._sig = np.empty(shape, np.float32)
        self._num = np.empty(shape, np.float32)
        self._den = np.empty(shape, np.float32)
        self._index = np.empty(shape, np.uint16)
        self._codes = [np.empty(shape, np.uint8) for _ in range(3)]

    def describe(self) -> str:
        return (f"tone-mapped {self.dynamic.describe()} to BT.709 SDR (Hable on linear light, "
                f"peak {self.peak * REFERENCE_WHITE:g} cd/m² to SDR white)")

    def __call__(self, frame: av.VideoFrame, image: np.ndarray) -> None:
        """`frame` (any size; scaled to the mapper's) tone-mapped into `image` (H, W, 3 BGR uint8)."""
        w, h = self.width, self.height
        rgb = frame.reformat(width=w, height=h, format="gbrp16le",
                             interpolation=Interpolation.BILINEAR | Interpolation.ACCURATE_RND)
        b, g, r = self._planes
        for plane, out in zip(rgb.planes, (g, b, r)):
            codes = np.frombuffer(plane, np.uint16)[: plane.line_size // 2 * h].reshape(h, -1)[:, :w]
            np.take(self._to_linear, codes, out=out)
        if self.hlg:  # the OOTF: display light = peak x Ys^(gamma - 1) x scene light
            ys = self._sig
            cv2.addWeighted(r, _BT2020_LUMA[0], g, _BT2020_LUMA[1], 0.0, dst=ys)
            cv2.scaleAdd(b, _BT2020_LUMA[2], ys, dst=ys)
            np.maximum(ys, 1e-6, out=ys)
            np.power(ys, _HLG_GAMMA - 1.0, out=ys)
            ys *= _HLG_PEAK_NITS / REFERENCE_WHITE
            for p in self._planes:
                cv2.multiply(p, ys, dst=p)
        cv2.merge(self._planes, dst=self._linear)
        cv2.transform(self._linear, self._matrix, dst=self._mapped)
        cv2.split(self._mapped, self._planes)
        # The curve on the brightest component; the ratio it gives scales all three.
        sig = self._sig
        cv2.max(b, g, dst=sig)
        cv2.max(sig, r, dst=sig)
        np.maximum(sig, 1e-6, out=sig)
        num, den = self._num, self._den
        np.multiply(sig, _A, out=num)
        num += _C * _B
        num *= sig
        num += _D * _E
        np.multiply(sig, _A, out=den)
        den += _B
        den *= sig
        den += _D * _F
        np.divide(num, den, out=num)
        num -= _E / _F
        num *= self._scale * (_OETF_STEPS - 1)
        np.divide(num, sig, out=num)
        for p, code in zip(self._planes, self._codes):
            cv2.multiply(p, num, dst=p)
            np.clip(p, 0.0, _OETF_STEPS - 1, out=p)
            p += 0.5
            np.copyto(self._index, p, casting="unsafe")
            np.take(self._oetf, self._index, out=code)
        cv2.merge(self._codes, dst=image)
