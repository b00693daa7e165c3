"""A still picture as read, split into what the swap works on (8-bit BGR) and what it does
not use but the output should keep: the alpha plane and the original 16-bit pixels."""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)

# What each output format can hold (by OpenCV's encoders). BMP is left out of ALPHA on
# purpose: OpenCV writes a 32-bit BMP, but most readers ignore its fourth channel.
ALPHA_SUFFIXES = frozenset({".png", ".webp", ".tif", ".tiff"})
DEEP_SUFFIXES = frozenset({".png", ".tif", ".tiff"})

_SCALE = 257  # 8 -> 16 bits: 0 -> 0 and 255 -> 65535 exactly


def to_8bit(plane: np.ndarray) -> np.ndarray:
    """A uint16 array rounded to the nearest uint8 value (v / 257); uint8 passes as is."""
    if plane.dtype == np.uint8:
        return plane
    return ((plane.astype(np.uint32) + _SCALE // 2) // _SCALE).astype(np.uint8)


def to_16bit(plane: np.ndarray) -> np.ndarray:
    """A uint8 array scaled onto the full uint16 range (v * 257); uint16 passes as is."""
    if plane.dtype == np.uint16:
        return plane
    return plane.astype(np.uint16) * _SCALE


def _frozen(array: np.ndarray) -> np.ndarray:
    # a read-only view: the record cannot be changed through it, the caller's array stays writable
    view = array.view()
    view.flags.writeable = False
    return view


@dataclass(frozen=True, eq=False)
class Picture:
    """A still picture: `bgr` (H, W, 3) uint8 is what the pipeline swaps; `alpha` (H, W) is
    the file's alpha plane at the file's depth (uint8 or uint16), None when it had none;
    `deep` (H, W, 3) uint16 holds the original colour when the file had 16-bit depth, None
    for 8-bit files. Arrays are read-only views."""

    bgr: np.ndarray
    alpha: np.ndarray | None = None
    deep: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.bgr.dtype != np.uint8 or self.bgr.ndim != 3 or self.bgr.shape[2] != 3:
            raise ValueError(f"picture: colour must be (H, W, 3) uint8, not {self.bgr.shape} {self.bgr.dtype}")
        size = self.bgr.shape[:2]
        if self.alpha is not None and (self.alpha.shape != size or self.alpha.dtype not in (np.uint8, np.uint16)):
            raise ValueError(f"picture: alpha must be {size} uint8/uint16, not {self.alpha.shape} {self.alpha.dtype}")
        if self.deep is not None and (self.deep.shape != self.bgr.shape or self.deep.dtype != np.uint16):
            raise ValueError(f"picture: 16-bit colour must be {self.bgr.shape} uint16, "
                             f"not {self.deep.shape} {self.deep.dtype}")
        for name in ("bgr", "alpha", "deep"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _frozen(value))

    @classmethod
    def from_planes(cls, colour: np.ndarray, alpha: np.ndarray | None = None) -> Picture:
        """The picture of a decoded (H, W, 3) BGR array, uint8 or uint16, and its alpha plane
        if any; for 16-bit colour the 8-bit pixels are the nearest values (v / 257)."""
        if colour.dtype == np.uint16:
            return cls(to_8bit(colour), alpha, colour)
        return cls(colour, alpha)

    @property
    def bits(self) -> int:
        """The colour depth of the file: 16 or 8."""
        return 16 if self.deep is not None else 8

    @property
    def has_alpha(self) -> bool:
        """Whether the file had an alpha plane."""
        return self.alpha is not None

    def losses(self, suffix: str) -> list[str]:
        """One line for each thing an output with extension `suffix` cannot hold (empty when
        nothing is lost)."""
        suffix = suffix.lower()
        notes = []
        if self.alpha is not None and suffix not in ALPHA_SUFFIXES:
            notes.append(f"alpha channel dropped: {suffix} has none; write .png to keep it")
        if self.deep is not None and suffix not in DEEP_SUFFIXES:
            notes.append(f"16-bit depth reduced to 8 bits: {suffix} holds 8 bits only; write .png or .tif to keep it")
        return notes

    def restored(self, swapped: np.ndarray, suffix: str) -> np.ndarray:
        """What to write for `swapped` (this picture's `bgr` after the swap) as `suffix`: the
        alpha plane put back and the 16-bit depth kept where that format holds them. Pixels
        the swap left alone keep their original 16-bit values; changed ones get the 8-bit
        result scaled up (v * 257), which is all the precision the swap produced."""
        if swapped.shape != self.bgr.shape or swapped.dtype != np.uint8:
            raise ValueError(f"picture: swapped must be {self.bgr.shape} uint8, not {swapped.shape} {swapped.dtype}")
        suffix = suffix.lower()
        colour = swapped
        if self.deep is not None and suffix in DEEP_SUFFIXES:
            changed = np.any(swapped != self.bgr, axis=2)
            colour = self.deep.copy()
            colour[changed] = to_16bit(swapped[changed])
            log.debug("16-bit output: %d of %d pixels changed by the swap", int(changed.sum()), changed.size)
        if self.alpha is None or suffix not in ALPHA_SUFFIXES:
            return colour
        alpha = to_16bit(self.alpha) if colour.dtype == np.uint16 else to_8bit(self.alpha)
        return np.dstack([colour, alpha])
