"""Synthetic stand-ins for the mask models, with the published files' I/O: XSeg (occlusion;
NHWC [1,256,256,3] BGR 0..1 -> [1,256,256,1]) and a BiSeNet face parser (NCHW [1,3,512,512]
ImageNet-normalised RGB -> [1,19,512,512] class logits). Both read strongly red pixels as
something else than the face: XSeg as an occluder (0), the parser as the mouth (class 11),
and everything else as seen skin (XSeg 1, parser class 1), so tests can paint what they hide."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tools.synth.face_models import OPSET, save_model


def make_xseg(path: str | os.PathLike[str]) -> Path:
    """seen = sigmoid(10 - 20 (R - G)): about 0 on pure red, about 1 where red and green agree."""
    inits = [numpy_helper.from_array(np.array([1, 1, 1], np.int64), "split"),
             numpy_helper.from_array(np.array(-20.0, np.float32), "gain"),
             numpy_helper.from_array(np.array(10.0, np.float32), "bias")]
    nodes = [
        helper.make_node("Split", ["input", "split"], ["b", "g", "r"], axis=3),
        helper.make_node("Sub", ["r", "g"], ["redness"]),
        helper.make_node("Mul", ["redness", "gain"], ["scaled"]),
        helper.make_node("Add", ["scaled", "bias"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes, "synthetic_xseg",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 256, 256, 3])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 256, 256, 1])], inits)
    return save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)]), path)


def make_bisenet(path: str | os.PathLike[str]) -> Path:
    """A 1x1 convolution to 19 logits: class 11 (mouth) = 4 (R - G) in normalised units, class
    1 (skin) = 4, every other class -10."""
    w = np.zeros((19, 3, 1, 1), np.float32)
    b = np.full(19, -10.0, np.float32)
    b[1], b[11] = 4.0, 0.0
    w[11, 0, 0, 0], w[11, 1, 0, 0] = 4.0, -4.0  # channels are RGB here
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w", "b"], ["output"])], "synthetic_bisenet",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 512, 512])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 19, 512, 512])], inits)
    return save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)]), path)
