"""The ONNX export of dlib's embedding network, as its users see it: the file's name, its
input and output, the layers a quantiser leaves in float, and the chips as its input blob.
(The exporter is engines.dlib.onnx_export, the runner engines.dlib.onnx_embedding.)"""
from __future__ import annotations

import numpy as np

from engines.dlib.resnet import CHIP

FILE_NAME = "dlib_embedder.onnx"  # in a models folder: `facestream models quantize dlib_embedder` makes it
INPUT = "chip"  # float32 [N, 3, 150, 150]: the RGB chip, 0-255, channels first
OUTPUT = "embedding"  # float32 [N, 128]
FIRST_CONV = "stem_conv"  # node names a quantiser may leave in float (nodes_to_exclude)
LAST_GEMM = "fc"


def chips_to_blob(chips: np.ndarray) -> np.ndarray:
    """(n, 150, 150, 3) uint8 RGB chips -> the model's input, float32 (n, 3, 150, 150)."""
    if chips.ndim != 4 or chips.shape[1:] != (CHIP, CHIP, 3):
        raise ValueError(f"face chips are (n, {CHIP}, {CHIP}, 3) RGB, got {chips.shape}")
    return np.ascontiguousarray(chips.transpose(0, 3, 1, 2), np.float32)
