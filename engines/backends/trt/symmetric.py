"""A copy of a QDQ (INT8) ONNX file that TensorRT's parser takes: symmetric INT8, zero points 0.

Our INT8 files are written for the CPU: U8 activations with a zero point (ONNX Runtime's
VNNI/AMX kernels want them), S8 weights, and int32 biases behind a DequantizeLinear.
TensorRT quantises symmetrically only: its ONNX parser takes a QuantizeLinear /
DequantizeLinear whose zero point is int8 and all zeros (UINT8 and asymmetric zero points
are for DLA, behind a parser flag). So before a build, each Q/DQ pair that is not already
symmetric gets a new scale that covers the same real range around zero,

    s' = s * max(zp - qmin, qmax - zp) / 127,   zero point int8 0,

which costs at most one bit of resolution on a one-sided range (after a ReLU); a weight
stored as uint8 is requantised to that scale; an int32 bias behind a DequantizeLinear
is folded into a float constant (TensorRT adds biases in float). The file itself is never
changed: the copy sits in the engine cache beside the fp16 copies (build.py), made once.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from engines.backends.onnx_io import QDQ_OPS
from engines.errors import EngineError

log = logging.getLogger(__name__)

# Integer ranges of the zero-point types the copy can turn into symmetric int8.
RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


@dataclass(frozen=True)
class _Pair:
    """The symmetric (scale, zero point) initializer names standing for one original pair."""

    scale: str
    zero_point: str
    factor: np.ndarray  # s' / s, per element of the scale
    zp: np.ndarray  # the original zero point
    qmin: int
    qmax: int


def make_symmetric(model: Any, where: str) -> int:
    """Rewrite `model` (an onnx ModelProto) in place so that every Q/DQ node is symmetric
    int8; returns how many (scale, zero point) pairs changed (0: it was already). A one-line
    EngineError naming `where` for a quantisation TensorRT cannot take at all."""
    from onnx import numpy_helper

    graph = model.graph
    weights = {init.name: init for init in graph.initializer}
    pairs: dict[tuple[str, str], _Pair | None] = {}
    folded: list[tuple[int, Any]] = []
    changed_tensors: set[str] = set()

    def pair_of(node: Any) -> _Pair | None:
        scale_name = node.input[1]
        zp_name = node.input[2] if len(node.input) > 2 else ""
        key = (scale_name, zp_name)
        if key in pairs:
            return pairs[key]
        if scale_name not in weights or (zp_name and zp_name not in weights):
            raise EngineError(f"model file {where!r}: {node.op_type} {node.name!r} takes its scale or zero point "
                              f"from another node; TensorRT needs them as constants")
        scale = numpy_helper.to_array(weights[scale_name])
        zp = numpy_helper.to_array(weights[zp_name]) if zp_name else np.zeros((), np.uint8)
        if zp.dtype not in RANGES:
            raise EngineError(f"model file {where!r}: {node.op_type} {node.name!r} quantises to {zp.dtype}; "
                              f"TensorRT builds 8-bit integer Q/DQ files only")
        if zp.dtype == np.int8 and not zp.any():
            pairs[key] = None  # symmetric already
            return None
        qmin, qmax = RANGES[zp.dtype]
        wide = np.maximum(zp.astype(np.int32) - qmin, qmax - zp.astype(np.int32)).astype(np.float64)
        factor = np.broadcast_to(wide / 127.0, scale.shape)
        new = _Pair(f"{scale_name}__s8", f"{zp_name or scale_name}__s8zp", factor, zp, qmin, qmax)
        if new.scale not in weights:
            graph.initializer.append(numpy_helper.from_array((scale * factor).astype(scale.dtype), new.scale))
            weights[new.scale] = graph.initializer[-1]
        if new.zero_point not in weights:
            graph.initializer.append(numpy_helper.from_array(np.zeros(zp.shape, np.int8), new.zero_point))
            weights[new.zero_point] = graph.initializer[-1]
        pairs[key] = new
        return new

    for index, node in enumerate(graph.node):
        if node.op_type not in QDQ_OPS or len(node.input) < 2:
            continue
        source = weights.get(node.input[0])
        if node.op_type == "DequantizeLinear" and source is not None and source.data_type == 6:  # int32 bias
            folded.append((index, node))
            continue
        pair = pair_of(node)
        if pair is None:
            continue
        if node.op_type == "DequantizeLinear" and source is not None:  # a stored weight: requantise it
            node.input[0] = _requantised(graph, weights, node.input[0], pair, _axis(node))
        else:
            changed_tensors.update(node.output if node.op_type == "QuantizeLinear" else node.input[:1])
        del node.input[1:]
        node.input.extend([pair.scale, pair.zero_point])
    for index, node in reversed(folded):
        _fold_bias(graph, weights, node)
        del graph.node[index]
    used = {name for node in graph.node for name in node.input} | {v.name for v in graph.output}
    unused = [init for init in graph.initializer if init.name not in used]
    for init in unused:  # the replaced scales, zero points, weights and biases
        graph.initializer.remove(init)
    # Shape inference may have recorded the old uint8 type of the rewired tensors.
    kept = [v for v in graph.value_info if v.name not in changed_tensors]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    count = sum(p is not None for p in pairs.values())
    log.debug("%s: %d Q/DQ pairs made symmetric, %d biases folded", where, count, len(folded))
    return count + len(folded)


def _axis(node: Any) -> int:
    return next((int(a.i) for a in node.attribute if a.name == "axis"), 1)


def _per_axis(values: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """A per-channel parameter shaped to broadcast along `axis` of a rank-`rank` tensor."""
    if values.ndim == 0:
        return values
    shape = [1] * rank
    shape[axis % rank] = values.size
    return values.reshape(shape)


def _requantised(graph: Any, weights: dict[str, Any], name: str, pair: _Pair, axis: int) -> str:
    """The stored weight `name` (quantised with the original pair) as symmetric int8."""
    from onnx import numpy_helper

    new_name = f"{name}__s8"
    if new_name not in weights:
        q = numpy_helper.to_array(weights[name]).astype(np.float64)
        zp = _per_axis(pair.zp.astype(np.float64), q.ndim, axis)
        factor = _per_axis(np.asarray(pair.factor, np.float64), q.ndim, axis)
        values = np.clip(np.rint((q - zp) / factor), -127, 127).astype(np.int8)
        graph.initializer.append(numpy_helper.from_array(values, new_name))
        weights[new_name] = graph.initializer[-1]
    return new_name


def _fold_bias(graph: Any, weights: dict[str, Any], node: Any) -> None:
    """Replace DequantizeLinear(int32 constant) by the float constant it computes."""
    from onnx import numpy_helper

    q = numpy_helper.to_array(weights[node.input[0]]).astype(np.float64)
    scale = numpy_helper.to_array(weights[node.input[1]])
    zp = numpy_helper.to_array(weights[node.input[2]]) if len(node.input) > 2 and node.input[2] else np.zeros(())
    axis = _axis(node)
    value = (q - _per_axis(zp.astype(np.float64), q.ndim, axis)) * _per_axis(scale.astype(np.float64), q.ndim, axis)
    graph.initializer.append(numpy_helper.from_array(value.astype(scale.dtype), node.output[0]))
    weights[node.output[0]] = graph.initializer[-1]
