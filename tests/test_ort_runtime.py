"""The ONNX Runtime wrapper: provider choice, named I/O, one-line errors for bad files."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from engines.backends.base import RuntimeOptions
from engines.backends.ort import OrtRuntime, choose_providers
from engines.errors import EngineError, ModelNotFound

CPU, CUDA, TRT = "CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"


@pytest.mark.parametrize("wanted, installed, expected", [
    ("auto", [CPU], [CPU]),
    ("auto", [CPU, CUDA, TRT], [TRT, CUDA, CPU]),
    ("cuda", [CPU, CUDA], [CUDA, CPU]),
    ("cpu", [CPU, CUDA], [CPU]),
    ([TRT, CUDA], [CPU, CUDA, TRT], [TRT, CUDA, CPU]),
])
def test_provider_choice(wanted, installed, expected) -> None:
    assert choose_providers(wanted, installed) == expected


def test_a_provider_that_is_not_installed_is_named() -> None:
    with pytest.raises(ValueError, match="'cuda' is not installed"):
        choose_providers("cuda", [CPU])


def _add_model(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    bias = helper.make_tensor("b", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    graph = helper.make_graph([helper.make_node("Add", ["x", "b"], ["y"])], "add", [x], [y], [bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_named_inputs_and_outputs(tmp_path: Path) -> None:
    rt = OrtRuntime(_add_model(tmp_path / "add.onnx"), RuntimeOptions(providers="cpu", intra_threads=1))
    rt.open()
    assert [i.name for i in rt.inputs] == ["x"] and rt.inputs[0].shape == (None, 3)
    out = rt.run({"x": np.zeros((2, 3), np.float32)})
    np.testing.assert_array_equal(out["y"], [[1, 2, 3], [1, 2, 3]])
    assert rt.calls == 1 and rt.providers == [CPU]


def test_missing_and_non_onnx_files(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match="nope.onnx"):
        OrtRuntime(tmp_path / "nope.onnx").open()
    bad = tmp_path / "bad.onnx"
    bad.write_text("not a model")
    with pytest.raises(EngineError, match="bad.onnx.*not a loadable ONNX model") as err:
        OrtRuntime(bad).open()
    assert "\n" not in str(err.value)
