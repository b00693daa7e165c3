"""A small synthetic ONNX model with SCRFD's real I/O (det_10g / det_2.5g contract).

No real SCRFD weights can be downloaded here, so parity tests run our detector and
insightface's on this stand-in. It is deterministic (seeded weights), cheap, and its
detections depend on the picture: a stride-s branch average-pools the input by s, a
3x3 zero-sum convolution measures local contrast (so a flat picture, black included,
scores below 0.5), and neighbouring anchors get overlapping boxes for NMS to suppress.

Outputs, in the order insightface's `SCRFD.forward` indexes them: scores for strides
8, 16, 32 ([rows, 1]), then box distances ([rows, 4]), then keypoint offsets
([rows, 10]); rows = (H/s) * (W/s) * 2, ordered (y, x, anchor) like the real export's
permute-and-reshape. `batched=True` adds the leading batch axis some exports carry.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STRIDES = (8, 16, 32)
ANCHORS = 2
OPSET = 13
IR_VERSION = 8  # old enough for any onnxruntime we meet

# Contrast gain and offset of the score logit, per stride; tuned so that the test
# pictures give a handful of confident anchors per stride, not a carpet of them.
SCORE_GAIN = {8: 9.0, 16: 9.0, 32: 9.0}
SCORE_BIAS = {8: 7.0, 16: 6.0, 32: 5.0}


def build_scrfd_model(path: str | os.PathLike[str], *, seed: int = 0, batched: bool = False,
                      with_kps: bool = True, input_name: str = "input.1",
                      input_hw: tuple[int, int] | None = None) -> Path:
    """Write a synthetic SCRFD-shaped model to `path` and return the path.

    `with_kps=False` leaves out the keypoint outputs (6 outputs, like the `*_bnkps`-less
    exports); `input_hw` fixes the input's spatial size instead of leaving it dynamic.
    """
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def to_rows(src: str, width: int, out: str) -> None:
        # [1, 2*width, h, w] -> [(h*w*2), width], rows ordered (y, x, anchor), as in the
        # real export's permute(0, 2, 3, 1).reshape(-1, width).
        nodes.append(helper.make_node("Transpose", [src], [f"{out}_nhwc"], perm=[0, 2, 3, 1]))
        shape = [1, -1, width] if batched else [-1, width]
        nodes.append(helper.make_node("Reshape", [f"{out}_nhwc", const(f"{out}_shape", np.array(shape, np.int64))],
                                      [out]))

    score_outs, box_outs, kps_outs = [], [], []
    for s in STRIDES:
        pooled = f"pool{s}"
        nodes.append(helper.make_node("AveragePool", ["x"], [pooled], kernel_shape=[s, s], strides=[s, s]))

        # Contrast: edge-padded so that borders of a flat picture stay flat; each kernel
        # sums to zero per input channel, so a flat picture gives exactly zero.
        kernel = rng.normal(size=(ANCHORS, 3, 3, 3)).astype(np.float32)
        kernel -= kernel.mean(axis=(2, 3), keepdims=True)
        kernel /= np.abs(kernel).sum(axis=(1, 2, 3), keepdims=True) / 4.0
        nodes.append(helper.make_node("Pad", [pooled, const(f"pads{s}", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))],
                                      [f"padded{s}"], mode="edge"))
        nodes.append(helper.make_node("Conv", [f"padded{s}", const(f"wc{s}", kernel)], [f"contrast{s}"]))
        nodes.append(helper.make_node("Abs", [f"contrast{s}"], [f"abs{s}"]))
        nodes.append(helper.make_node("Mul", [f"abs{s}", const(f"gain{s}", np.float32(SCORE_GAIN[s]))],
                                      [f"scaled{s}"]))
        nodes.append(helper.make_node("Sub", [f"scaled{s}", const(f"bias{s}", np.float32(SCORE_BIAS[s]))],
                                      [f"logit{s}"]))
        nodes.append(helper.make_node("Sigmoid", [f"logit{s}"], [f"score_map{s}"]))
        to_rows(f"score_map{s}", 1, f"score_{s}")
        score_outs.append(f"score_{s}")

        # Box distances in strides: 1.5 to 3.5, so neighbouring anchors overlap.
        wb = (rng.normal(size=(ANCHORS * 4, 3, 1, 1)) * 0.8).astype(np.float32)
        nodes.append(helper.make_node("Conv", [pooled, const(f"wb{s}", wb)], [f"box_lin{s}"]))
        nodes.append(helper.make_node("Sigmoid", [f"box_lin{s}"], [f"box_sig{s}"]))
        nodes.append(helper.make_node("Mul", [f"box_sig{s}", const(f"box_gain{s}", np.float32(2.0))],
                                      [f"box_mul{s}"]))
        nodes.append(helper.make_node("Add", [f"box_mul{s}", const(f"box_base{s}", np.float32(1.5))],
                                      [f"box_map{s}"]))
        to_rows(f"box_map{s}", 4, f"bbox_{s}")
        box_outs.append(f"bbox_{s}")

        if with_kps:
            # Keypoint offsets in strides, within +-2 of the anchor centre.
            wk = (rng.normal(size=(ANCHORS * 10, 3, 1, 1)) * 0.8).astype(np.float32)
            nodes.append(helper.make_node("Conv", [pooled, const(f"wk{s}", wk)], [f"kps_lin{s}"]))
            nodes.append(helper.make_node("Tanh", [f"kps_lin{s}"], [f"kps_tanh{s}"]))
            nodes.append(helper.make_node("Mul", [f"kps_tanh{s}", const(f"kps_gain{s}", np.float32(2.0))],
                                          [f"kps_map{s}"]))
            to_rows(f"kps_map{s}", 10, f"kps_{s}")
            kps_outs.append(f"kps_{s}")

    # The graph's internal input is "x"; an Identity gives it the public name.
    nodes.insert(0, helper.make_node("Identity", [input_name], ["x"]))
    h, w = input_hw if input_hw is not None else ("H", "W")
    graph_input = helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [1, 3, h, w])

    def out_info(name: str, width: int, stride: int) -> onnx.ValueInfoProto:
        rows = f"rows{stride}"
        shape = [1, rows, width] if batched else [rows, width]
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    outputs = [out_info(n, 1, s) for n, s in zip(score_outs, STRIDES)]
    outputs += [out_info(n, 4, s) for n, s in zip(box_outs, STRIDES)]
    outputs += [out_info(n, 10, s) for n, s in zip(kps_outs, STRIDES)]
    graph = helper.make_graph(nodes, "synthetic_scrfd", [graph_input], outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="facestream-tests")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    out = Path(path)
    onnx.save(model, str(out))
    return out
