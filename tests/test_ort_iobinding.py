"""IO binding in OrtRuntime: when it is chosen, and that the bound run makes the right calls.

No GPU here: a fake InferenceSession that claims the CUDA provider records what the
runtime binds (and fails on the plain `session.run`), so a broken binding path fails
these tests; the same path is also run through ONNX Runtime's real IOBinding on the CPU
(`io_binding=True`), which checks the call signatures against the installed library.
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import engines.backends.ort as ort_runtime
from engines.backends.base import RuntimeOptions
from engines.backends.ort import OrtRuntime, io_binding_device
from engines.errors import EngineError

CPU, CUDA, TRT = "CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"
BIAS = np.array([1.0, 2.0, 3.0], np.float32)


def _add_model(path: Path) -> Path:
    """y = x + [1, 2, 3], z = 2 x; dynamic batch."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 3])
    bias = helper.make_tensor("b", TensorProto.FLOAT, [3], BIAS.tolist())
    nodes = [helper.make_node("Add", ["x", "b"], ["y"]), helper.make_node("Add", ["x", "x"], ["z"])]
    graph = helper.make_graph(nodes, "add", [x], [y, z], [bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("setting, providers, expected", [
    (None, [CUDA, CPU], "cuda"),
    (None, [TRT, CUDA, CPU], "cuda"),
    (None, [CPU], None),
    (None, ["DmlExecutionProvider", CPU], None),
    (None, [], None),
    (False, [CUDA, CPU], None),
    (False, [TRT, CUDA, CPU], None),
    (True, [CUDA, CPU], "cuda"),
    (True, [CPU], "cpu"),
])
def test_when_io_binding_is_used(setting: bool | None, providers: list[str], expected: str | None) -> None:
    assert io_binding_device(setting, providers) == expected


class FakeBinding:
    """Records the binding calls; run_with_iobinding fills the outputs."""

    def __init__(self, log: list[tuple[Any, ...]]) -> None:
        self.log = log
        self.inputs: dict[str, np.ndarray] = {}
        self.outputs: list[tuple[str, str, int]] = []
        self.results: list[np.ndarray] = []

    def bind_cpu_input(self, name: str, value: np.ndarray) -> None:
        assert isinstance(value, np.ndarray) and value.flags.c_contiguous
        self.log.append(("bind_cpu_input", name, value.shape))
        self.inputs[name] = value

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0) -> None:
        self.log.append(("bind_output", name, device_type, device_id))
        self.outputs.append((name, device_type, device_id))

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        self.log.append(("copy_outputs_to_cpu",))
        return [r.copy() for r in self.results]


class FakeCudaSession:
    """Stands in for onnxruntime.InferenceSession on a machine with CUDA."""

    instances: list[FakeCudaSession] = []
    first_provider = CUDA

    def __init__(self, path: str, sess_options: Any = None, providers: list[str] | None = None,
                 provider_options: list[dict[str, Any]] | None = None) -> None:
        self.path = path
        self.providers = list(providers or [])
        self.provider_options = provider_options
        self.log: list[tuple[Any, ...]] = []
        FakeCudaSession.instances.append(self)

    def get_providers(self) -> list[str]:
        return self.providers

    def get_inputs(self) -> list[SimpleNamespace]:
        return [SimpleNamespace(name="x", shape=["n", 3], type="tensor(float)")]

    def get_outputs(self) -> list[SimpleNamespace]:
        return [SimpleNamespace(name=n, shape=["n", 3], type="tensor(float)") for n in ("y", "z")]

    def _compute(self, name: str, x: np.ndarray) -> np.ndarray:
        return x + BIAS if name == "y" else 2 * x

    def run(self, names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        self.log.append(("run", tuple(names)))
        return [self._compute(n, feeds["x"]) for n in names]

    def io_binding(self) -> FakeBinding:
        self.log.append(("io_binding",))
        return FakeBinding(self.log)

    def run_with_iobinding(self, binding: FakeBinding, run_options: Any = None) -> None:
        self.log.append(("run_with_iobinding",))
        assert binding.outputs, "no output bound before the run"
        binding.results = [self._compute(name, binding.inputs["x"]) for name, _, _ in binding.outputs]


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> type[FakeCudaSession]:
    """ONNX Runtime as it looks with the CUDA and TensorRT providers installed."""
    FakeCudaSession.instances = []
    monkeypatch.setattr(ort_runtime, "available_providers", lambda: [TRT, CUDA, CPU])
    monkeypatch.setattr(onnxruntime, "InferenceSession", FakeCudaSession)
    return FakeCudaSession


@pytest.mark.parametrize("providers", ["cuda", "tensorrt", "auto"])
def test_cuda_runs_go_through_the_binding(tmp_path: Path, fake_cuda: type[FakeCudaSession],
                                          providers: str) -> None:
    rt = OrtRuntime(_add_model(tmp_path / "add.onnx"), RuntimeOptions(providers=providers, device_id=1))
    rt.open()
    assert rt.binding_device == "cuda"
    # Not C-contiguous on purpose: the runtime must hand the binding a contiguous array.
    x = np.arange(12, dtype=np.float32).reshape(3, 4)[:, :3]
    out = rt.run({"x": x})
    np.testing.assert_array_equal(out["y"], x + BIAS)
    np.testing.assert_array_equal(out["z"], 2 * x)
    session = fake_cuda.instances[-1]
    assert session.log == [
        ("io_binding",),
        ("bind_cpu_input", "x", (3, 3)),
        ("bind_output", "y", "cuda", 1),
        ("bind_output", "z", "cuda", 1),
        ("run_with_iobinding",),
        ("copy_outputs_to_cpu",),
    ]
    assert rt.calls == 1
    # The CUDA provider gets the device id through its options too.
    assert session.provider_options[session.providers.index(CUDA if providers != "tensorrt" else TRT)][
        "device_id"] == 1


def test_a_subset_of_outputs_binds_only_those(tmp_path: Path, fake_cuda: type[FakeCudaSession]) -> None:
    rt = OrtRuntime(_add_model(tmp_path / "add.onnx"), RuntimeOptions(providers="cuda"))
    out = rt.run({"x": np.ones((2, 3), np.float32)}, ["z"])  # run() opens the session itself
    assert list(out) == ["z"]
    np.testing.assert_array_equal(out["z"], np.full((2, 3), 2.0))
    bound = [e for e in fake_cuda.instances[-1].log if e[0] == "bind_output"]
    assert bound == [("bind_output", "z", "cuda", 0)]


def test_binding_can_be_turned_off_on_cuda(tmp_path: Path, fake_cuda: type[FakeCudaSession]) -> None:
    rt = OrtRuntime(_add_model(tmp_path / "add.onnx"), RuntimeOptions(providers="cuda", io_binding=False))
    rt.open()
    assert rt.binding_device is None
    rt.run({"x": np.zeros((1, 3), np.float32)})
    assert fake_cuda.instances[-1].log == [("run", ("y", "z"))]


def test_cpu_first_keeps_the_plain_run(tmp_path: Path, fake_cuda: type[FakeCudaSession]) -> None:
    rt = OrtRuntime(_add_model(tmp_path / "add.onnx"), RuntimeOptions(providers="cpu"))
    rt.open()
    assert rt.binding_device is None
    out = rt.run({"x": np.zeros((1, 3), np.float32)})
    np.testing.assert_array_equal(out["y"], [BIAS])
    assert fake_cuda.instances[-1].log == [("run", ("y", "z"))]


def test_a_binding_that_loses_outputs_is_an_error(tmp_path: Path, fake_cuda: type[FakeCudaSession],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FakeBinding, "copy_outputs_to_cpu", lambda self: [])
    rt = OrtRuntime(_add_model(tmp_path / "add.onnx"), RuntimeOptions(providers="cuda"))
    with pytest.raises(EngineError, match="add.onnx.*0 outputs for 2 bound"):
        rt.run({"x": np.zeros((1, 3), np.float32)})


def test_real_iobinding_on_the_cpu(tmp_path: Path) -> None:
    """The bound path through ONNX Runtime's own IOBinding (outputs on the CPU here)."""
    rt = OrtRuntime(_add_model(tmp_path / "add.onnx"),
                    RuntimeOptions(providers="cpu", intra_threads=1, io_binding=True))
    rt.open()
    assert rt.binding_device == "cpu"
    for n in (1, 4):  # dynamic batch: outputs are allocated at each run's shape
        x = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
        out = rt.run({"x": x})
        np.testing.assert_allclose(out["y"], x + BIAS, rtol=0, atol=1e-6)
        np.testing.assert_allclose(out["z"], 2 * x, rtol=0, atol=1e-6)
    assert list(rt.run({"x": x}, ["y"])) == ["y"]
    assert rt.calls == 3


class RecordingAllocator:
    def __init__(self) -> None:
        self.made: list[tuple[tuple[int, ...], np.dtype]] = []

    def empty(self, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
        self.made.append((shape, np.dtype(dtype)))
        return np.empty(shape, dtype)


def test_host_buffers_come_from_the_allocator_and_are_reused(tmp_path: Path) -> None:
    alloc = RecordingAllocator()
    rt = OrtRuntime(_add_model(tmp_path / "add.onnx"), RuntimeOptions(providers="cpu", intra_threads=1),
                    allocator=alloc)
    a = rt.host_buffer("x", (2, 3))
    a[:] = 1.0
    assert rt.host_buffer("x", (2, 3)) is a  # same shape: the same (pinned) memory
    b = rt.host_buffer("x", (4, 3))
    assert b is not a and b.shape == (4, 3)
    assert alloc.made == [((2, 3), np.dtype(np.float32)), ((4, 3), np.dtype(np.float32))]
    np.testing.assert_array_equal(rt.run({"x": rt.host_buffer("x", (4, 3))})["y"].shape, (4, 3))
    rt.close()
    assert rt.session is None and rt.host_buffer("x", (4, 3)) is not b
