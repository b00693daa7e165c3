"""Small ONNX stand-ins for GFPGAN 1.4 (no real weights can be fetched).

Same names, shapes and value ranges as gfpgan_1.4.onnx: `input` [1,3,512,512] in [-1,1]
RGB to `output` [1,3,512,512], nominally in [-1,1]. The graph is a per-channel affine
map, output = input * scale + bias, which is enough to pin down the pre- and
post-processing: scale 1, bias 0 is an identity; scale 0, bias -1 paints black; a
channel-specific bias reveals the channel order.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def make_gfpgan(path: str | os.PathLike[str], scale: float | Sequence[float] = 1.0,
                bias: float | Sequence[float] = 0.0, size: int = 512, batch: int | str = 1,
                input_name: str = "input", output_name: str = "output", weight: bool = False) -> Path:
    """output = input * scale + bias, scale and bias per RGB channel (or one for all three).
    `weight`: a second input `weight` float64 [1], as CodeFormer's export has (its fidelity),
    added to the output times 0 (read, without changing the picture). The same I/O with
    another `size` stands in for GPEN-BFR 256, RestoreFormer++ and the rest."""
    s = np.broadcast_to(np.asarray(scale, np.float32), (3,)).reshape(1, 3, 1, 1)
    b = np.broadcast_to(np.asarray(bias, np.float32), (3,)).reshape(1, 3, 1, 1)
    nodes = [helper.make_node("Mul", [input_name, "scale"], ["scaled"]),
             helper.make_node("Add", ["scaled", "bias"], ["shifted" if weight else output_name])]
    inputs = [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [batch, 3, size, size])]
    inits = [numpy_helper.from_array(np.ascontiguousarray(s), "scale"),
             numpy_helper.from_array(np.ascontiguousarray(b), "bias")]
    if weight:
        inputs.append(helper.make_tensor_value_info("weight", TensorProto.DOUBLE, [1]))
        inits.append(numpy_helper.from_array(np.array(0.0, np.float32), "zero"))
        nodes += [helper.make_node("Cast", ["weight"], ["weight32"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", ["weight32", "zero"], ["nothing"]),
                  helper.make_node("Add", ["shifted", "nothing"], [output_name])]
    graph = helper.make_graph(
        nodes, "synthetic_gfpgan", inputs,
        [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, [batch, 3, size, size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8  # readable by every onnxruntime we support
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return Path(path)
