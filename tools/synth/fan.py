"""A small ONNX stand-in for 2dfan4 (68 landmarks and heatmaps; no real weights can be fetched)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper


def make_fan(path: Path) -> Path:
    """Landmarks = the 68 (x, y) positions, on the 64 grid, of fixed crop pixels; heatmaps = a
    constant per point. x, y come from a fixed table, so the decoding can be checked exactly;
    the third column (score-like) is the mean of the input, so the input is really used."""
    rng = np.random.default_rng(5)
    grid_xy = rng.uniform(8, 56, size=(1, 68, 2)).astype(np.float32)
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 256, 256])
    lm = helper.make_tensor_value_info("landmarks", TensorProto.FLOAT, [1, 68, 3])
    hm = helper.make_tensor_value_info("heatmaps", TensorProto.FLOAT, [1, 68, 64, 64])
    inits = [
        helper.make_tensor("xy", TensorProto.FLOAT, [1, 68, 2], grid_xy.ravel()),
        helper.make_tensor("ones", TensorProto.FLOAT, [1, 68, 1], np.ones(68, np.float32)),
        helper.make_tensor("hm_base", TensorProto.FLOAT, [1, 68, 64, 64],
                           np.linspace(0, 0.8, 68 * 64 * 64, dtype=np.float32)),
    ]
    nodes = [
        helper.make_node("ReduceMean", ["input"], ["m"], keepdims=0),  # scalar
        helper.make_node("Mul", ["ones", "m"], ["col"]),
        helper.make_node("Concat", ["xy", "col"], ["landmarks"], axis=2),
        helper.make_node("Identity", ["hm_base"], ["heatmaps"]),
    ]
    graph = helper.make_graph(nodes, "fan", [x], [lm, hm], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path
