"""dlib's 128-d face-embedding ResNet written as an ONNX file, from dlib's own weights.

The network is the one engines.dlib.resnet runs with numpy, read by its reader
(`read_network`), with the same folding: each affine layer (dlib's frozen batch norm) is
multiplied into the convolution before it, in float32, as the numpy port does. So the file
is one more runtime for the same weights, and every runtime that reads ONNX (ONNX Runtime,
OpenVINO, TensorRT, Triton) can run it, and it can be quantised to a QDQ INT8 file like
the standard neural models (the one real network here to prove the quantisation with).

Its input `chip` is float32 [N, 3, 150, 150]: the RGB chip dlib aligns (DlibEmbedder.chip),
0-255, channels first, N dynamic. The normalisation (each channel's stored mean taken off,
divided by 256) is inside the graph as a Sub and a Mul: cheap, and a quantiser's calibration
then sees the plain chip, which is what every caller has. Its output `embedding` is
float32 [N, 128].

dlib's `add_prev` adds two tensors of different sizes by treating what the smaller one
lacks (channels, and rows and columns at the high end) as zeros: a 256-channel 3x3 block
meets its 128-channel 4x4 shortcut, the last 1x1 block its 2x2 one. The sizes are fixed by
the chip's, so each such add is a Pad with constant zeros at the high end of the smaller
operand (or of both), worked out here.

The file is written the same byte for byte every time (no time stamps, a fixed producer),
atomically: a temporary name beside it, renamed into place.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from engines.atomic_write import write_atomically
from engines.dlib.embedding_io import FIRST_CONV, INPUT, LAST_GEMM, OUTPUT
from engines.dlib.resnet import BLOCKS, CHIP, Layer, read_network

log = logging.getLogger(__name__)

OPSET = 17  # what every runtime here reads (Pad's pads are an input from opset 11)
IR_VERSION = 8  # readable by older runtimes (OpenVINO, TensorRT's parser) as well
PRODUCER = "facestream.engines.dlib.onnx_export"


class _Graph:
    """Nodes and initializers, appended in order; each node names its one output after itself."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(self, op: str, inputs: Sequence[str], name: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op, list(inputs), [name], name=name, **attrs))
        return name


def _fold(con: Layer, aff: Layer) -> tuple[np.ndarray, np.ndarray]:
    """A convolution's filters (N, C, k, k) and bias with its affine layer multiplied in,
    as DlibResNet folds them (the same float32 products)."""
    f, b = con.weights["filters"], con.weights["bias"]
    g, beta = aff.weights["gamma"], aff.weights["beta"]
    w = np.multiply(f, g[:, None, None, None], dtype=np.float32)
    bias = np.multiply(b, g, dtype=np.float32)
    bias += beta
    return w, bias


def _conv_size(size: int, k: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - k) // stride + 1


def build_model(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """The ONNX model of dlib's embedding network from its file (`engines.dlib.models.model_path
    ("embedding")`: the installed `face_recognition_models` one)."""
    src = str(path)
    with open(src, "rb") as f:
        layers, means = read_network(f.read(), src)
    g = _Graph()

    def conv(x: str, con: Layer, aff: Layer, name: str) -> str:
        w, bias = _fold(con, aff)
        k, stride, pad = con.spec["k"], con.spec["stride"], con.spec["pad"]
        return g.node("Conv", [x, g.const(f"{name}.weight", w), g.const(f"{name}.bias", bias)], name,
                      kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)

    mean = g.const("input_mean", np.array(means, np.float32).reshape(1, 3, 1, 1))
    scale = g.const("input_scale", np.array(1 / 256, np.float32))
    x = g.node("Mul", [g.node("Sub", [INPUT, mean], "input_centred"), scale], "input_scaled")
    x = g.node("Relu", [conv(x, layers[0], layers[1], FIRST_CONV)], "stem_relu")
    x = g.node("MaxPool", [x], "stem_pool", kernel_shape=[3, 3], strides=[2, 2])
    side = _conv_size(_conv_size(CHIP, 7, 2, 0), 3, 2, 0)
    channels = 32
    pos = 4
    for i, (n, down) in enumerate(BLOCKS):
        name = f"block{i}"
        first, second = (layers[pos], layers[pos + 1]), (layers[pos + 3], layers[pos + 4])
        pos += 5 + down + 2
        y = g.node("Relu", [conv(x, *first, f"{name}.conv1")], f"{name}.relu1")
        y = conv(y, *second, f"{name}.conv2")
        y_side = side
        for con, _ in (first, second):  # the first halves the size in a block that does
            y_side = _conv_size(y_side, con.spec["k"], con.spec["stride"], con.spec["pad"])
        if down:  # the shortcut average-pooled 2x2/2 (dlib's add_prev2<avg_pool<2,2,2,2,...>>)
            x = g.node("AveragePool", [x], f"{name}.shortcut_pool", kernel_shape=[2, 2], strides=[2, 2])
            side = _conv_size(side, 2, 2, 0)
        # dlib's add: the larger size and channels; the smaller operand zero-padded at the high end.
        out_side, out_channels = max(side, y_side), max(channels, n)
        x = _pad_to(g, x, channels, side, out_channels, out_side, f"{name}.shortcut_pad")
        y = _pad_to(g, y, n, y_side, out_channels, out_side, f"{name}.residual_pad")
        x = g.node("Relu", [g.node("Add", [y, x], f"{name}.add")], f"{name}.relu2")
        side, channels = out_side, out_channels
    fc = layers[-1]
    if fc.kind != "fc":
        raise ValueError(f"{src}: the last layer is {fc.kind!r}, expected the linear layer")
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x], "pool")], "flatten", axis=1)
    matrix = np.asarray(fc.weights["matrix"], np.float32)  # (inputs, outputs)
    g.node("Gemm", [x, g.const("fc.weight", matrix)], OUTPUT)
    g.nodes[-1].name = LAST_GEMM
    graph = helper.make_graph(
        g.nodes, "dlib_face_recognition_resnet_model_v1",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["N", 3, CHIP, CHIP])],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["N", matrix.shape[1]])],
        g.initializers)
    model = helper.make_model(graph, producer_name=PRODUCER, producer_version="1",
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    model.doc_string = ("dlib's face-recognition ResNet (128-d embedding); input: RGB face chip "
                        "aligned by dlib.get_face_chip (150x150, padding 0.25), 0-255, NCHW")
    onnx.checker.check_model(model)
    return model


def _pad_to(g: _Graph, x: str, channels: int, side: int, want_channels: int, want_side: int, name: str) -> str:
    """`x` (N, channels, side, side) zero-padded at the high end to (N, want_channels,
    want_side, want_side); `x` itself when it is that size already."""
    dc, ds = want_channels - channels, want_side - side
    if dc == 0 and ds == 0:
        return x
    pads = g.const(f"{name}.pads", np.array([0, 0, 0, 0, 0, dc, ds, ds], np.int64))
    return g.node("Pad", [x, pads], name, mode="constant")


def export_embedder(path: str | os.PathLike[str], source: str | os.PathLike[str]) -> Path:
    """Write the ONNX model of dlib's embedding network to `path` (atomically: a temporary
    file beside it, renamed into place) and return the path. `source`: dlib's .dat file."""
    target = write_atomically(path, build_model(source).SerializeToString(), 0o644)
    log.info("wrote %s (%d bytes)", target, target.stat().st_size)
    return target
