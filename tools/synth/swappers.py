"""Synthetic stand-ins for the crop swappers by name (hyperswap, simswap) and simswap's
embedding converter, with each published file's I/O: names, shapes, types, the extra `mask`
output of hyperswap's export. The real weights cannot be fetched here; these let the crop,
the normalisation, the source vector and the paste be checked against the published
formulas. inswapper_128's stand-in is `tools.synth.face_models.make_inswapper`."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tools.synth.face_models import OPSET, save_model


def make_crop_swapper(path: str | os.PathLike[str], size: int, *, mask: bool = False, signed: bool = False,
                      batch: int | None = 1, seed: int = 0, identity: bool = False) -> Path:
    """A swapper of the crop-and-vector shape: output = target * gain + shift, where the gain
    (0.5..1.5) comes from the source vector (a 16x16 map, upsampled to the crop) and `shift`
    moves the result into the output range: 0 for a 0..1 output fed 0..1, or `signed` for an
    input and output in -1..1 (then clipped to -1..1; else to 0..1). With `mask`, a second
    output `mask` [N,1,S,S] (hyperswap's export has one). `identity`: a gain of exactly 1, so
    the output is the input (clipped): a round trip through the normalisation and the tiles."""
    rng = np.random.default_rng(seed)
    w = (0.05 * rng.standard_normal((512, 16 * 16))).astype(np.float32)
    lo, hi = (-1.0, 1.0) if signed else (0.0, 1.0)
    inits = [
        numpy_helper.from_array(w, "style_w"),
        numpy_helper.from_array(np.array([-1, 1, 16, 16], np.int64), "gate_shape"),
        numpy_helper.from_array(np.array([1, 1, size / 16, size / 16], np.float32), "up_scales"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array(lo, np.float32), "lo"),
        numpy_helper.from_array(np.array(hi, np.float32), "hi"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
    ]
    nodes = [
        helper.make_node("MatMul", ["source", "style_w"], ["style"]),
        helper.make_node("Reshape", ["style", "gate_shape"], ["gate16"]),
        helper.make_node("Resize", ["gate16", "", "up_scales"], ["gate"], mode="nearest"),
        helper.make_node("Sigmoid", ["gate"], ["sig"]),
        helper.make_node("Add", ["sig", "half"], ["gain_"]),  # 0.5 .. 1.5
        *([helper.make_node("Mul", ["gain_", "zero"], ["gain0"]),  # the source still reaches the output
           helper.make_node("Add", ["gain0", "one"], ["gain"])] if identity else
          [helper.make_node("Identity", ["gain_"], ["gain"])]),
        helper.make_node("Mul", ["target", "gain"], ["raw"]),
        helper.make_node("Clip", ["raw", "lo", "hi"], ["output"]),
    ]
    n = "N" if batch is None else batch
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, [n, 3, size, size])]
    if mask:
        nodes.append(helper.make_node("Sigmoid", ["gate"], ["mask_map"]))
        nodes.append(helper.make_node("Expand", ["mask_map", "mask_shape"], ["mask"]))
        inits.append(numpy_helper.from_array(np.array([1, 1, size, size], np.int64), "mask_shape"))
        outputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [n, 1, size, size]))
    graph = helper.make_graph(
        nodes, "synthetic_crop_swapper",
        [helper.make_tensor_value_info("target", TensorProto.FLOAT, [n, 3, size, size]),
         helper.make_tensor_value_info("source", TensorProto.FLOAT, [n, 512])],
        outputs, inits)
    return save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)]), path)


def make_hyperswap(path: str | os.PathLike[str], seed: int = 0) -> Path:
    """hyperswap_1x_256: target [1,3,256,256] in -1..1, source [1,512] -> output in -1..1, mask."""
    return make_crop_swapper(path, 256, mask=True, signed=True, seed=seed)


def make_simswap(path: str | os.PathLike[str], size: int = 256, seed: int = 0) -> Path:
    """simswap_256 / simswap_unofficial_512: target [1,3,S,S], source [1,512] -> output 0..1."""
    return make_crop_swapper(path, size, seed=seed)


def make_converter(path: str | os.PathLike[str], seed: int = 0) -> Path:
    """crossface_simswap: input [1,512] -> output [1,512] (a fixed random linear map)."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((512, 512)) / np.sqrt(512)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "w"], ["output"])], "synthetic_crossface",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 512])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 512])],
        [numpy_helper.from_array(w, "w")])
    return save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)]), path)
