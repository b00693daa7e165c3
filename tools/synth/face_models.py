"""Small seeded ONNX stand-ins for ArcFace and inswapper_128 (no real weights can be fetched).

They have the real models' input/output names, shapes and value ranges, so pre- and
post-processing can be checked against insightface's own classes run on the same files.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def save_model(model: onnx.ModelProto, path: str | os.PathLike[str]) -> Path:
    model.ir_version = 8  # readable by every onnxruntime we support
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return Path(path)


def make_arcface(path: str | os.PathLike[str], seed: int = 0, size: int = 112, dim: int = 512,
                 input_name: str = "input.1", mxnet_norm: bool = False) -> Path:
    """A synthetic ArcFace: [N,3,size,size] -> average pool to 8x8 -> fixed random Gemm -> [N,dim].

    With `mxnet_norm` the graph starts with nodes named Sub*/Mul* that normalise the input
    itself, which is how insightface recognises an MXNet export (fed raw 0..255 RGB).
    """
    rng = np.random.default_rng(seed)
    pool = max(size // 8, 1)
    feat = 3 * (size // pool) ** 2
    w = (rng.standard_normal((feat, dim)) / np.sqrt(feat)).astype(np.float32)
    b = (0.1 * rng.standard_normal(dim)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "fc_w"), numpy_helper.from_array(b, "fc_b")]
    nodes = []
    x = input_name
    if mxnet_norm:
        inits += [numpy_helper.from_array(np.array(127.5, np.float32), "mean"),
                  numpy_helper.from_array(np.array(1 / 127.5, np.float32), "scale")]
        nodes += [helper.make_node("Sub", [x, "mean"], ["centred"], name="Sub_0"),
                  helper.make_node("Mul", ["centred", "scale"], ["scaled"], name="Mul_1")]
        x = "scaled"
    nodes += [
        helper.make_node("AveragePool", [x], ["pooled"], kernel_shape=[pool, pool], strides=[pool, pool],
                         name="pool"),
        helper.make_node("Flatten", ["pooled"], ["flat"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["683"], name="fc"),
    ]
    graph = helper.make_graph(
        nodes, "synthetic_arcface",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("683", TensorProto.FLOAT, ["N", dim])],
        inits)
    return save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)]), path)


def make_inswapper(path: str | os.PathLike[str], seed: int = 0, batch: int | None = 1,
                   fp16: bool = False, names: tuple[str, str, str] = ("target", "source", "output")) -> Path:
    """A synthetic inswapper_128: output = clip(target * 2 * sigmoid(a + up8(reshape(source @ W))), 0, 1).

    The output depends on both inputs (a per-pixel random bias `a`, a 16x16 source-driven
    gate upsampled to 128). `emap` (512x512) is the graph's last initializer and is used by
    no node, as in the published file. `batch` None makes the batch axis dynamic; `fp16`
    computes in float16 behind float32 I/O and stores emap as float16, like the fp16 export.
    """
    rng = np.random.default_rng(seed)
    ft = np.float16 if fp16 else np.float32
    t_name, s_name, o_name = names
    a = (0.5 * rng.standard_normal((1, 3, 128, 128))).astype(ft)
    w = rng.standard_normal((512, 3 * 16 * 16)).astype(ft)
    emap = (rng.standard_normal((512, 512)) / np.sqrt(512)).astype(ft)
    inits = [
        numpy_helper.from_array(a, "bias_map"),
        numpy_helper.from_array(w, "style_w"),
        numpy_helper.from_array(np.array([-1, 3, 16, 16], np.int64), "gate_shape"),
        numpy_helper.from_array(np.array([1, 1, 8, 8], np.float32), "up_scales"),
        numpy_helper.from_array(np.array(2.0, ft), "two"),
        numpy_helper.from_array(np.array(0.0, ft), "lo"),
        numpy_helper.from_array(np.array(1.0, ft), "hi"),
        numpy_helper.from_array(emap, "emap"),  # must stay last: insightface reads initializer[-1]
    ]
    nodes = []
    tgt, src = t_name, s_name
    if fp16:
        nodes += [helper.make_node("Cast", [t_name], ["target16"], to=TensorProto.FLOAT16),
                  helper.make_node("Cast", [s_name], ["source16"], to=TensorProto.FLOAT16)]
        tgt, src = "target16", "source16"
    nodes += [
        helper.make_node("MatMul", [src, "style_w"], ["style"]),
        helper.make_node("Reshape", ["style", "gate_shape"], ["gate16"]),
        helper.make_node("Resize", ["gate16", "", "up_scales"], ["gate"], mode="nearest"),
        helper.make_node("Add", ["gate", "bias_map"], ["pre"]),
        helper.make_node("Sigmoid", ["pre"], ["sig"]),
        helper.make_node("Mul", ["sig", "two"], ["gain"]),
        helper.make_node("Mul", [tgt, "gain"], ["raw"]),
        helper.make_node("Clip", ["raw", "lo", "hi"], ["out16" if fp16 else o_name]),
    ]
    if fp16:
        nodes.append(helper.make_node("Cast", ["out16"], [o_name], to=TensorProto.FLOAT))
    n = "N" if batch is None else batch
    graph = helper.make_graph(
        nodes, "synthetic_inswapper",
        [helper.make_tensor_value_info(t_name, TensorProto.FLOAT, [n, 3, 128, 128]),
         helper.make_tensor_value_info(s_name, TensorProto.FLOAT, [n, 512])],
        [helper.make_tensor_value_info(o_name, TensorProto.FLOAT, [n, 3, 128, 128])],
        inits)
    return save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)]), path)
