"""An ONNX file's inputs and outputs, read from its graph without its weights: the one
reader the backends share (TensorRT's build profile, Triton's check of a served model
against the file, the Triton repository's config)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.backends.base import TensorSpec
from engines.errors import EngineError

# ONNX's element types, named as ONNX Runtime names them (what TensorSpec.dtype holds).
ONNX_TYPES = {1: "tensor(float)", 2: "tensor(uint8)", 3: "tensor(int8)", 4: "tensor(uint16)",
              5: "tensor(int16)", 6: "tensor(int32)", 7: "tensor(int64)", 8: "tensor(string)",
              9: "tensor(bool)", 10: "tensor(float16)", 11: "tensor(double)", 12: "tensor(uint32)",
              13: "tensor(uint64)", 16: "tensor(bfloat16)"}


# The nodes of a static QDQ file (`<stem>_int8.onnx`): any domain, so ONNX Runtime's
# com.microsoft variants count too.
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})


class OnnxReadError(EngineError):
    """A file that is not a loadable ONNX model: `reason` says why in a few words, `cause`
    is the name of the loader's exception type ("" when the file loaded but is empty)."""

    def __init__(self, path: str | os.PathLike[str], reason: str, cause: str = "") -> None:
        super().__init__(f"model file {str(path)!r} is not a loadable ONNX model ({reason})")
        self.path = Path(path)
        self.reason = reason
        self.cause = cause


@dataclass(frozen=True)
class OnnxGraph:
    """The graph's inputs (its weights left out: old exports list them as inputs too) and
    outputs; a dynamic axis (a name, or no size) is None."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    quantized: bool = False  # it has Q/DQ nodes: an INT8 file (see `is_quantized`)


def _spec(value: Any) -> TensorSpec:
    """One graph input or output (an onnx ValueInfoProto) as a TensorSpec."""
    tensor = value.type.tensor_type
    dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tensor.shape.dim)
    return TensorSpec(value.name, dims, ONNX_TYPES.get(tensor.elem_type, f"onnx type {tensor.elem_type}"))


def read_onnx(path: str | os.PathLike[str]) -> OnnxGraph:
    """The I/O of the ONNX file at `path`; an OnnxReadError (one line, names the file) for a
    missing file, one that is not ONNX, or a graph with no inputs."""
    import onnx  # the heavy import only where a file is read

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # FileNotFoundError, protobuf's DecodeError, OSError, ValueError ...
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OnnxReadError(path, text, type(exc).__name__) from exc
    graph = model.graph
    weights = {init.name for init in graph.initializer}
    inputs = tuple(_spec(v) for v in graph.input if v.name not in weights)
    if not inputs:
        raise OnnxReadError(path, "it has no inputs")
    quantized = any(node.op_type in QDQ_OPS for node in graph.node)
    return OnnxGraph(inputs, tuple(_spec(v) for v in graph.output), quantized)


def is_quantized(path: str | os.PathLike[str]) -> bool:
    """Whether the ONNX file at `path` is a quantised (QDQ) file: TensorRT builds it as INT8,
    ONNX Runtime's TensorRT EP needs its INT8 switch for it. Read from the graph alone (no
    weights), so asking costs little; an unreadable file is an OnnxReadError."""
    return read_onnx(path).quantized
