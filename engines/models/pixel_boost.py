"""Pixel boost: a swapper run on a crop 2 to 8 times its model's size, as model-sized tiles.

The aligned crop of N = k x S pixels (S the model's size) is cut into k x k tiles of S x S by
strided sampling: tile (a, b) holds the crop's pixels (i k + a, j k + b), so every tile is
the whole face at the model's size, shifted by a fraction of a pixel. Each tile is swapped
with the same source vector, and the swapped tiles are interleaved back into an N x N crop,
the exact inverse of the cut. The result has the model's detail at every sub-pixel phase:
more resolution for a large face than one S x S swap upscaled. (This is FaceFusion's
published scheme. No tile has an edge inside the face, so no seams and no blending window
are needed.)
"""
from __future__ import annotations

import numpy as np

MAX_SIZE = 1024


def boost_factor(pixel_boost: int, model_size: int, name: str) -> int:
    """k for a pixel boost of `pixel_boost` px on a model of `model_size` (0: the model's own
    size, k = 1); a ValueError naming the sizes allowed otherwise."""
    if pixel_boost in (0, model_size):
        return 1
    allowed = list(range(model_size, MAX_SIZE + 1, model_size))
    if pixel_boost not in allowed:
        raise ValueError(f"pixel boost {pixel_boost}: {name} takes {', '.join(map(str, allowed))} "
                         f"(a multiple of its {model_size} px, up to {MAX_SIZE})")
    return pixel_boost // model_size


def implode(crop: np.ndarray, k: int) -> np.ndarray:
    """An (N, N, C) crop as k*k tiles (k*k, N/k, N/k, C): tile a*k + b holds crop[a::k, b::k]."""
    n = crop.shape[0]
    s = n // k
    return crop.reshape(s, k, s, k, -1).transpose(1, 3, 0, 2, 4).reshape(k * k, s, s, -1)


def explode(tiles: np.ndarray, k: int) -> np.ndarray:
    """The inverse of `implode`: k*k tiles (k*k, S, S, C) interleaved into one (kS, kS, C) crop."""
    s = tiles.shape[1]
    return np.ascontiguousarray(tiles.reshape(k, k, s, s, -1).transpose(2, 0, 3, 1, 4).reshape(k * s, k * s, -1))
