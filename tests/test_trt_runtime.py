"""The native TensorRT runtime, on the CPU: stand-ins for `tensorrt` (10.x and 11.x) and `cupy`
(tests/fixtures/fake_tensorrt.py, fake_cupy.py) run its every path — build, engine cache,
profile bounds, batch splitting, fp16 per version, errors, the order of the async calls —
and the synthetic face models run through it give what ONNX Runtime gives on the same file.

What only a GPU can tell (real kernels, real timings, real pinned-memory DMA) is not here.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import engines.backends.trt.build as trt_build
from engines.backends.base import RuntimeOptions
from engines.backends.bound_outputs import BindsOutputs
from engines.backends.ort import OrtRuntime
from engines.backends.registry import RUNTIMES, runtime_factory
from engines.backends.trt.runtime import TrtRuntime
from engines.errors import EngineError, ModelNotFound
from engines.models.arcface import ArcFaceEmbedder
from engines.models.gfpgan import GfpganEnhancer
from engines.models.inswapper import InSwapper
from engines.models.scrfd import ScrfdDetector
from stream.config import load_config
from stream.errors import ConfigError
from stream.media.demo_clips import astronaut
from stream.runtime.allocator import PinnedAllocator
from tests.fixtures import build_scrfd_model, make_arcface, make_gfpgan, make_inswapper
from tests.fixtures.fake_cupy import FakeCupy, FakeDevice
from tests.fixtures.fake_tensorrt import V10, V11, FakeTensorRT, install_fake_gpu

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = [V10, V11]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("trt_models")
    return {
        "scrfd": build_scrfd_model(d / "det_10g.onnx", seed=3),
        "arcface": make_arcface(d / "w600k_r50.onnx", seed=4),
        "inswapper": make_inswapper(d / "inswapper_128.onnx", seed=5),
        "inswapper_dyn": make_inswapper(d / "inswapper_dyn.onnx", seed=6, batch=None),
        "gfpgan": make_gfpgan(d / "gfpgan_1.4.onnx", scale=[0.5, 1.0, -1.0], bias=[0.1, 0.0, 0.2]),
    }


def _feeds(name: str, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def r(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    return {
        "scrfd": lambda: {"input.1": r(1, 3, 640, 640)},
        "arcface": lambda: {"input.1": r(batch, 3, 112, 112)},
        "inswapper": lambda: {"target": rng.random((batch, 3, 128, 128), np.float32), "source": r(batch, 512)},
        "inswapper_dyn": lambda: {"target": rng.random((batch, 3, 128, 128), np.float32), "source": r(batch, 512)},
        "gfpgan": lambda: {"input": r(1, 3, 512, 512)},
    }[name]()


def _ort(path: Path) -> OrtRuntime:
    rt = OrtRuntime(path, RuntimeOptions(providers="cpu", intra_threads=1))
    rt.open()
    return rt


def _trt(path: Path, cache: Path, **options: object) -> TrtRuntime:
    rt = TrtRuntime(path, RuntimeOptions(kind="tensorrt", trt_cache_dir=str(cache), **options))  # type: ignore[arg-type]
    rt.open()
    return rt


def _engines(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.engine"))


# -- every model, both versions: what ONNX Runtime gives ----------------------------------

@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("model", ["scrfd", "arcface", "inswapper", "inswapper_dyn", "gfpgan"])
def test_each_synthetic_model_gives_what_onnx_runtime_gives(
        models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, model: str) -> None:
    fake, _ = install_fake_gpu(monkeypatch, version)
    rt = _trt(models[model], tmp_path)
    ref = _ort(models[model])
    assert rt.built and len(fake.builds) == 1
    assert rt.inputs == ref.inputs and rt.outputs == ref.outputs  # names, dynamic axes, types, order
    feeds = _feeds(model, batch=3 if model in ("arcface", "inswapper_dyn") else 1)
    got, want = rt.run(feeds), ref.run(feeds)
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    assert list(rt.run(feeds, [rt.outputs[-1].name])) == [rt.outputs[-1].name]
    assert rt.calls == 2


@pytest.mark.parametrize("model, expected", [
    ("arcface", {"input.1": [[1, 3, 112, 112], [1, 3, 112, 112], [8, 3, 112, 112]]}),
    ("inswapper_dyn", {"target": [[1, 3, 128, 128], [1, 3, 128, 128], [8, 3, 128, 128]],
                       "source": [[1, 512], [1, 512], [8, 512]]}),
    ("scrfd", {"input.1": [[1, 3, 32, 32], [1, 3, 640, 640], [1, 3, 1280, 1280]]}),
    ("inswapper", {}),  # static: no profile, the shapes are the file's
    ("gfpgan", {}),
])
def test_one_profile_per_model(models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               model: str, expected: dict[str, list[list[int]]]) -> None:
    fake, _ = install_fake_gpu(monkeypatch)
    _trt(models[model], tmp_path, trt_workspace=3 << 28)
    build = fake.builds[-1]
    assert build["profile"] == expected
    assert build["workspace"] == 3 << 28 and not build["fp16"] and build["flags"] == 0


def test_the_profile_follows_the_options(models: dict[str, Path], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _ = install_fake_gpu(monkeypatch)
    _trt(models["scrfd"], tmp_path, trt_dim_range=(64, 320, 960))
    _trt(models["arcface"], tmp_path, trt_max_batch=3)
    assert fake.builds[0]["profile"] == {"input.1": [[1, 3, 64, 64], [1, 3, 320, 320], [1, 3, 960, 960]]}
    assert fake.builds[1]["profile"] == {"input.1": [[1, 3, 112, 112], [1, 3, 112, 112], [3, 3, 112, 112]]}


# -- profile bounds ---------------------------------------------------------------------------

@pytest.mark.parametrize("model, batch, launches", [("arcface", 10, 3), ("inswapper_dyn", 9, 3), ("arcface", 4, 1)])
def test_a_batch_over_the_profile_maximum_runs_in_chunks(
        models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        model: str, batch: int, launches: int) -> None:
    _, cupy = install_fake_gpu(monkeypatch)
    rt = _trt(models[model], tmp_path, trt_max_batch=4)
    allocations = [e for e in cupy.log if e[0] == "alloc"]
    feeds = _feeds(model, batch=batch, seed=batch)
    got, want = rt.run(feeds), _ort(models[model]).run(feeds)
    for name in want:
        assert got[name].shape[0] == batch
        np.testing.assert_array_equal(got[name], want[name])
    assert rt.executions == launches and rt.calls == 1
    assert [e for e in cupy.log if e[0] == "execute"] == [("execute", rt._stream.ptr)] * launches
    assert [e for e in cupy.log if e[0] == "alloc"] == allocations  # buffers sized once, at open


@pytest.mark.parametrize("model, feeds, message", [
    ("scrfd", {"input.1": np.zeros((1, 3, 1312, 640), np.float32)},
     r"input 'input.1' of shape \[1, 3, 1312, 640\] is outside the engine's profile \[1, 3, 32..1280, 32..1280\]"),
    ("scrfd", {"input.1": np.zeros((1, 3, 16, 16), np.float32)}, r"outside the engine's profile"),
    ("scrfd", {"input.1": np.zeros((2, 3, 640, 640), np.float32)}, r"shape \[2, 3, 640, 640\] is outside"),
    ("inswapper", {"target": np.zeros((2, 3, 128, 128), np.float32), "source": np.zeros((2, 512), np.float32)},
     r"input 'target' of shape \[2, 3, 128, 128\] is outside the engine's profile \[1, 3, 128, 128\]"),
    ("arcface", {"input.1": np.zeros((1, 3, 96, 96), np.float32)}, r"profile \[1..8, 3, 112, 112\]"),
    ("arcface", {"input.1": np.zeros((0, 3, 112, 112), np.float32)}, r"outside the engine's profile"),
    ("arcface", {"input.1": np.zeros((1, 3, 112), np.float32)}, r"outside the engine's profile"),
    ("arcface", {"input.1": np.zeros((1, 3, 112, 112), np.float64)}, r"'input.1' is float64, the engine takes float32"),
    ("arcface", {}, r"input 'input.1' is missing"),
    ("arcface", {"input.1": np.zeros((1, 3, 112, 112), np.float32), "x": np.zeros(1)}, r"has no input 'x'"),
    ("inswapper_dyn", {"target": np.zeros((2, 3, 128, 128), np.float32), "source": np.zeros((3, 512), np.float32)},
     r"the inputs' batch sizes differ \(target 2, source 3\)"),
])
def test_inputs_outside_the_profile_are_one_line_errors(
        models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        model: str, feeds: dict[str, np.ndarray], message: str) -> None:
    fake, _ = install_fake_gpu(monkeypatch)
    rt = _trt(models[model], tmp_path)
    with pytest.raises(EngineError, match=message) as err:
        rt.run(feeds)
    assert "\n" not in str(err.value) and rt.executions == 0


def test_an_unknown_output_is_a_one_line_error(models: dict[str, Path], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_gpu(monkeypatch)
    rt = _trt(models["arcface"], tmp_path)
    with pytest.raises(EngineError, match="has no output 'nope'; outputs: 683"):
        rt.run(_feeds("arcface"), ["nope"])


# -- the engine cache ---------------------------------------------------------------------------

def _changed(what: str, work: Path, monkeypatch: pytest.MonkeyPatch, cupy: FakeCupy) -> tuple[Path, dict[str, object]]:
    """Change one input of the cache key; returns the model to open and the options."""
    if what == "file content":
        return make_arcface(work / "w600k_r50.onnx", seed=99), {}
    if what == "TensorRT version":
        FakeTensorRT("10.15.1.29", cupy).install(monkeypatch)
    elif what == "GPU name":
        cupy.devices[0].name = "NVIDIA L4"
    elif what == "compute capability":
        cupy.devices[0].minor = 1
    return work / "w600k_r50.onnx", {
        "precision": {"trt_fp16": True}, "profile": {"trt_max_batch": 16},
        "workspace": {"trt_workspace": 1 << 29}}.get(what, {})


@pytest.mark.parametrize("what", ["nothing", "file content", "TensorRT version", "GPU name", "compute capability",
                                  "precision", "profile", "workspace"])
def test_the_engine_cache_key_changes_with_each_of_its_inputs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, what: str) -> None:
    fake, cupy = install_fake_gpu(monkeypatch)
    work = tmp_path / "models"
    work.mkdir()
    model = make_arcface(work / "w600k_r50.onnx", seed=4)
    cache = tmp_path / "engines"
    first = _trt(model, cache)
    assert first.built and first.engine_path is not None and first.engine_path.is_file()
    caplog.clear()
    path, options = _changed(what, work, monkeypatch, cupy)
    second = _trt(path, cache, **options)
    if what == "nothing":
        assert not second.built and second.engine_path == first.engine_path and len(fake.builds) == 1
        assert fake.deserialized == 2 and "may take several minutes" not in caplog.text  # after the build, then here
        assert _engines(cache) == [first.engine_path]
    else:
        assert second.built and second.engine_path != first.engine_path
        assert "may take several minutes" in caplog.text
        assert len(_engines(cache)) == 2
    np.testing.assert_array_equal(second.run(_feeds("arcface"))["683"], _ort(path).run(_feeds("arcface"))["683"])


def test_the_first_build_says_it_may_take_minutes(models: dict[str, Path], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _ = install_fake_gpu(monkeypatch)
    lines: list[str] = []
    options = RuntimeOptions(kind="tensorrt", trt_cache_dir=str(tmp_path))
    TrtRuntime(models["arcface"], options, progress=lines.append).open()
    TrtRuntime(models["arcface"], options, progress=lines.append).open()
    assert len(lines) == 1 and len(fake.builds) == 1
    assert lines[0] == (f"building the TensorRT {V10} engine for w600k_r50.onnx (fp32, batch up to 8) on NVIDIA H200: "
                        f"the first build of a model may take several minutes; it is cached in {tmp_path}")


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "other TensorRT"])
def test_an_engine_file_that_does_not_load_is_rebuilt_with_a_warning(
        models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, damage: str) -> None:
    fake, cupy = install_fake_gpu(monkeypatch)
    path = _trt(models["arcface"], tmp_path).engine_path
    assert path is not None
    good = path.read_bytes()
    if damage == "other TensorRT":  # a plan from 11.x where 10.x looks (the file was copied, say)
        other = FakeTensorRT(V11, cupy)
        other.install(monkeypatch)
        bad = _trt(models["arcface"], tmp_path / "other").engine_path.read_bytes()  # type: ignore[union-attr]
        fake.install(monkeypatch)
    else:
        bad = {"garbage": b"\x00junk" * 100, "truncated": good[:len(good) // 2], "empty": b""}[damage]
    path.write_bytes(bad)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="engines.backends.trt.runtime"):
        rt = _trt(models["arcface"], tmp_path)
    assert rt.built and len(fake.builds) == 2
    warning = [r.getMessage() for r in caplog.records if "cannot be loaded" in r.getMessage()]
    assert len(warning) == 1 and str(path) in warning[0] and "building it again" in warning[0]
    assert "\n" not in warning[0]
    assert not _trt(models["arcface"], tmp_path).built and len(fake.builds) == 2  # the rebuilt file is good
    want = _ort(models["arcface"]).run(_feeds("arcface"))["683"]
    np.testing.assert_array_equal(rt.run(_feeds("arcface"))["683"], want)


def test_two_threads_building_the_same_engine_build_it_once(
        models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _ = install_fake_gpu(monkeypatch)
    start = threading.Barrier(2)
    real_build = fake.module.Builder.build_serialized_network

    def slow_build(self, network, config):  # the second arrives while the first builds
        if threading.current_thread().name == "first":
            start.wait(timeout=10)
        threading.Event().wait(0.3)
        return real_build(self, network, config)

    monkeypatch.setattr(fake.module.Builder, "build_serialized_network", slow_build)
    runtimes = [TrtRuntime(models["arcface"], RuntimeOptions(kind="tensorrt", trt_cache_dir=str(tmp_path)))
                for _ in range(2)]
    errors: list[BaseException] = []

    def open_one(rt: TrtRuntime, wait: bool) -> None:
        try:
            if wait:
                start.wait(timeout=10)
            rt.open()
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=open_one, args=(rt, i == 1), name=["first", "second"][i])
               for i, rt in enumerate(runtimes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == [] and len(fake.builds) == 1
    assert sorted(rt.built for rt in runtimes) == [False, True]
    assert len(_engines(tmp_path)) == 1 and not list(tmp_path.glob("*.tmp"))
    for rt in runtimes:
        np.testing.assert_array_equal(rt.run(_feeds("arcface"))["683"],
                                      _ort(models["arcface"]).run(_feeds("arcface"))["683"])


_PROCESS = """
import json, sys, threading
from tests.fixtures.fake_cupy import FakeCupy
from tests.fixtures.fake_tensorrt import FakeTensorRT, V10
cupy = FakeCupy()
trt = FakeTensorRT(V10, cupy)
sys.modules["cupy"], sys.modules["tensorrt"] = cupy.module, trt.module
build = trt.module.Builder.build_serialized_network
def slow(self, network, config):
    threading.Event().wait(1.0)  # long enough for the other process to arrive meanwhile
    return build(self, network, config)
trt.module.Builder.build_serialized_network = slow
from engines.backends.base import RuntimeOptions
from engines.backends.trt.runtime import TrtRuntime
import numpy as np
rt = TrtRuntime({model!r}, RuntimeOptions(kind="tensorrt", trt_cache_dir={cache!r}))
rt.open()
out = rt.run({{"input.1": np.ones((2, 3, 112, 112), np.float32)}})["683"]
print(json.dumps({{"built": rt.built, "sum": float(out.sum())}}))
"""


@pytest.mark.slow
def test_two_processes_building_the_same_engine_leave_one_valid_file(models: dict[str, Path], tmp_path: Path) -> None:
    script = _PROCESS.format(model=str(models["arcface"]), cache=str(tmp_path))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(r["built"] for r in results) == [False, True]  # the second waited and loaded the first's
    assert results[0]["sum"] == results[1]["sum"]
    assert len(_engines(tmp_path)) == 1 and not list(tmp_path.glob(".*.tmp"))


def test_the_timing_cache_is_saved_and_given_to_the_next_build(
        models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    fake, _ = install_fake_gpu(monkeypatch)
    _trt(models["arcface"], tmp_path)
    timing = list(tmp_path.glob("timing.*.cache"))
    assert [p.name for p in timing] == [f"timing.{V10}.NVIDIA_H200.sm90.cache"]
    assert fake.builds[0]["timing_given"] and not fake.builds[0]["timing_reused"]
    _trt(models["arcface"], tmp_path, trt_workspace=1 << 28)  # another engine of the same model
    assert fake.builds[1]["timing_reused"]
    timing[0].write_bytes(b"damaged")
    with caplog.at_level(logging.INFO, logger="engines.backends.trt.build"):
        rt = _trt(models["arcface"], tmp_path, trt_workspace=1 << 27)
    assert rt.built and not fake.builds[2]["timing_reused"] and "timing cache does not fit" in caplog.text
    assert timing[0].read_bytes().startswith(b"FAKETIME")  # replaced by a good one


# -- fp16 per version ---------------------------------------------------------------------------

def test_fp16_on_tensorrt_10_is_the_builder_flag(models: dict[str, Path], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _ = install_fake_gpu(monkeypatch, V10)
    _trt(models["arcface"], tmp_path, trt_fp16=True)
    assert fake.builds[0]["fp16"] and fake.builds[0]["onnx_path"] == str(models["arcface"])
    assert not list(tmp_path.glob("*.fp16.onnx"))


@pytest.mark.parametrize("model", ["scrfd", "arcface", "inswapper", "gfpgan"])
def test_fp16_on_tensorrt_11_builds_from_an_fp16_onnx_made_once(
        models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str) -> None:
    fake, _ = install_fake_gpu(monkeypatch, V11)
    assert not hasattr(fake.module.BuilderFlag, "FP16")  # 11.x: strongly typed, no flag to set
    made: list[Path] = []
    convert = trt_build.convert_to_fp16
    monkeypatch.setattr(trt_build, "convert_to_fp16", lambda src: made.append(src) or convert(src))
    rt = _trt(models[model], tmp_path, trt_fp16=True)
    (copy,) = tmp_path.glob("*.fp16.onnx")
    assert made == [models[model]] and fake.builds[0]["onnx_path"] == str(copy) and not fake.builds[0]["fp16"]
    proto = onnx.load(str(copy))
    onnx.checker.check_model(proto)  # a valid graph (the converter's casts put in order)
    used = {name for node in proto.graph.node for name in node.input}  # inswapper's emap is in no node
    types = [(i.data_type, int(np.prod(i.dims))) for i in proto.graph.initializer
             if i.name in used and i.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16)]
    assert any(t == TensorProto.FLOAT16 for t, _ in types)
    assert all(t == TensorProto.FLOAT16 or n <= 4 for t, n in types)  # a few may stay float (Resize's scales)
    assert rt.inputs == _ort(models[model]).inputs  # float32 in and out, as before
    feeds = _feeds(model)
    got, want = rt.run(feeds), _ort(models[model]).run(feeds)
    for name in want:
        scale = float(np.abs(want[name]).max()) or 1.0
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-2 * scale)  # fp16 arithmetic
    _trt(models[model], tmp_path, trt_fp16=True, trt_workspace=1 << 28)  # another engine: same fp16 copy
    assert made == [models[model]] and len(fake.builds) == 2


def test_fp32_on_tensorrt_11_builds_from_the_file_itself(models: dict[str, Path], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _ = install_fake_gpu(monkeypatch, V11)
    _trt(models["arcface"], tmp_path)
    assert fake.builds[0]["onnx_path"] == str(models["arcface"]) and not list(tmp_path.glob("*.fp16.onnx"))


# -- INT8: Q/DQ files (explicit quantisation) ---------------------------------------------------

def quantize_u8s8(src: Path, dst: Path, feeds: list[dict[str, np.ndarray]]) -> Path:
    """A static QDQ file as `facestream models quantize` writes them for the CPU: U8 activations
    with zero points, S8 per-channel weights (ONNX Runtime's own tooling)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter(feeds)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.feeds, None)

    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return dst


@pytest.fixture(scope="module")
def int8(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("trt_int8")
    return {name: quantize_u8s8(models[name], d / f"{models[name].stem}_int8.onnx",
                                [_feeds(name, seed=s) for s in range(4)]) for name in ("arcface", "inswapper_dyn")}


def _zero_points(path: Path) -> list[np.ndarray]:
    proto = onnx.load(str(path))
    weights = {i.name: onnx.numpy_helper.to_array(i) for i in proto.graph.initializer}
    return [weights[n.input[2]] for n in proto.graph.node
            if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) > 2 and n.input[2]]


def test_quantised_files_are_told_apart_from_their_graph(models: dict[str, Path], int8: dict[str, Path]) -> None:
    from engines.backends.onnx_io import OnnxReadError, is_quantized

    assert is_quantized(int8["arcface"]) and not is_quantized(models["arcface"])
    assert any(z.dtype == np.uint8 for z in _zero_points(int8["arcface"]))  # the CPU's U8 activations
    with pytest.raises(OnnxReadError):
        is_quantized(models["arcface"].with_name("missing.onnx"))


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("model", ["arcface", "inswapper_dyn"])
def test_a_qdq_file_reaches_the_tensorrt_10_builder_with_int8_on(
        int8: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, fp16: bool) -> None:
    fake, _ = install_fake_gpu(monkeypatch, V10)
    rt = _trt(int8[model], tmp_path, trt_fp16=fp16)
    (build,) = fake.builds
    assert build["int8"] and build["fp16"] == fp16 and build["qdq_nodes"] > 0
    (copy,) = tmp_path.glob("*.s8.onnx")  # what TensorRT's parser takes: symmetric, zero points 0
    assert build["onnx_path"] == str(copy) and not list(tmp_path.glob("*.fp16.onnx"))
    assert all(z.dtype == np.int8 and not z.any() for z in _zero_points(copy))
    feeds = _feeds(model, batch=2, seed=7)
    got, want = rt.run(feeds), _ort(copy).run(feeds)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_a_float_file_builds_without_int8(models: dict[str, Path], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _ = install_fake_gpu(monkeypatch, V10)
    _trt(models["arcface"], tmp_path, trt_fp16=True)
    assert not fake.builds[0]["int8"] and fake.builds[0]["qdq_nodes"] == 0 and not list(tmp_path.glob("*.s8.onnx"))


def test_tensorrt_11_builds_a_qdq_file_strongly_typed(int8: dict[str, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    fake, _ = install_fake_gpu(monkeypatch, V11)
    assert not hasattr(fake.module.BuilderFlag, "INT8")  # removed in 11: the Q/DQ nodes say it
    caplog.set_level(logging.INFO, logger="engines.backends.trt.runtime")
    first = _trt(int8["arcface"], tmp_path, trt_fp16=True)
    (copy,) = tmp_path.glob("*.s8.onnx")
    assert fake.builds[0]["onnx_path"] == str(copy) and not list(tmp_path.glob("*.fp16.onnx"))
    assert not fake.builds[0]["int8"] and not fake.builds[0]["fp16"] and fake.builds[0]["qdq_nodes"] > 0
    assert "float layers stay in the file's float type" in caplog.text
    second = _trt(int8["arcface"], tmp_path)  # fp16 or not, the same INT8 engine on 11
    assert not second.built and second.engine_path == first.engine_path and len(fake.builds) == 1


def test_an_int8_and_a_float_engine_never_share_a_cache_key(
        models: dict[str, Path], int8: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _ = install_fake_gpu(monkeypatch, V10)
    engines = {(name, fp16): _trt(path, tmp_path, trt_fp16=fp16).engine_path
               for name, path in (("float", models["arcface"]), ("int8", int8["arcface"])) for fp16 in (False, True)}
    assert len(set(engines.values())) == 4 and len(fake.builds) == 4
    assert [(b["int8"], b["fp16"]) for b in fake.builds] == [(False, False), (False, True), (True, False), (True, True)]
    assert [trt_build.plan_precision(fp16, q, major) for q, fp16, major in [
        (False, False, 10), (False, True, 10), (True, False, 10), (True, True, 10), (True, True, 11),
        (False, True, 11)]] == ["fp32", "fp16", "int8", "int8+fp16", "int8", "fp16"]


def test_the_symmetric_copy_keeps_the_int8_files_results(models: dict[str, Path], int8: dict[str, Path],
                                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The U8 file as it is would not parse (TensorRT: symmetric only); its copy runs as
    # close to the float model as the U8 file does (a wider step on one-sided ranges).
    fake, _ = install_fake_gpu(monkeypatch, V10)
    logger = trt_build.make_logger(fake.module)
    with pytest.raises(EngineError, match="symmetric quantization"):
        trt_build.build_engine(fake.module, 10, int8["arcface"], int8["arcface"], (), "int8", 1 << 28, None, logger)
    from engines.backends.trt.cache import EngineCache

    copy = trt_build.symmetric_int8_onnx(int8["arcface"], "0" * 64, EngineCache(tmp_path))
    onnx.checker.check_model(onnx.load(str(copy)))
    feeds = _feeds("arcface", batch=4, seed=11)
    ref = _ort(models["arcface"]).run(feeds)["683"]

    def cosine(a: np.ndarray) -> float:
        return float(np.min(np.sum(a * ref, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(ref, axis=1)))

    u8, s8 = cosine(_ort(int8["arcface"]).run(feeds)["683"]), cosine(_ort(copy).run(feeds)["683"])
    assert u8 > 0.99 and s8 > 0.98, (u8, s8)
    again = trt_build.symmetric_int8_onnx(copy, "1" * 64, EngineCache(tmp_path / "other"))
    assert again == copy and not list((tmp_path / "other").glob("*.onnx"))  # symmetric already: used as it is


def test_onnx_runtimes_tensorrt_ep_is_told_a_file_is_int8(models: dict[str, Path], int8: dict[str, Path],
                                                          tmp_path: Path) -> None:
    def options(path: Path) -> dict[str, object]:
        return OrtRuntime(path, RuntimeOptions(trt_fp16=True))._provider_options("TensorrtExecutionProvider")

    assert options(int8["arcface"])["trt_int8_enable"] is True and options(int8["arcface"])["trt_fp16_enable"]
    assert "trt_int8_enable" not in options(models["arcface"])
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    assert "trt_int8_enable" not in options(junk)  # ONNX Runtime says what is wrong with it, at open()
    assert "trt_int8_enable" not in OrtRuntime(int8["arcface"])._provider_options("CPUExecutionProvider")


# -- errors ---------------------------------------------------------------------------------

def _custom_op_model(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    node = helper.make_node("FancyOp", ["x"], ["y"], domain="com.example")
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("case, message", [
    ("no tensorrt", r"^TensorRT is not installed \(.*\): pip install tensorrt-cu12 \(tensorrt-cu13 for CUDA 13\), "
                    r"whose libraries come from NVIDIA's package index \(pypi.nvidia.com\); "
                    r"or use runtime.kind=onnxruntime$"),
    ("old tensorrt", r"^TensorRT 8.6.1 is not supported: facestream runs TensorRT 10 or 11; pip install"),
    ("no cupy", r"^cupy is not installed \(.*\); the TensorRT runtime needs it for CUDA streams and memory: "
                r"pip install cupy-cuda12x"),
    ("no driver", r"^no CUDA device found \(cudaErrorNoDevice: no CUDA-capable device is detected\); "
                  r"the TensorRT runtime needs an NVIDIA GPU: use runtime.kind=onnxruntime$"),
    ("no device", r"^no CUDA device found; the TensorRT runtime needs an NVIDIA GPU"),
    ("device id", r"^runtime.device_id is 1, but this machine has 1 CUDA device \(0 to 0\)$"),
    ("old gpu", r"^GPU 'Tesla P100' \(compute capability 6.0\) is not supported by TensorRT 10.16.1.11, which needs "
                r"compute capability 7.5 \(Turing\) or newer: use runtime.kind=onnxruntime$"),
    ("not onnx", r"^model file '.*bad.onnx' is not a loadable ONNX model \("),
    ("parser", r"^model file '.*fancy.onnx' cannot be read by TensorRT's ONNX parser \(No importer registered for "
               r"op: FancyOp. Attempting to import as plugin.\)$"),
    ("build", r"^TensorRT could not build an engine from model file '.*w600k_r50.onnx' \(\[optimizer\] Error Code 2: "
              r"Internal Error \(out of device memory\)\)$"),
    ("launch", r"^model file '.*w600k_r50.onnx': TensorRT failed to run the engine$"),
    ("gpu memory", r"^model file '.*w600k_r50.onnx': no room on the GPU for the buffer of 'input.1' at the "
                   r"profile's maximum \[8, 3, 112, 112\] \(Out of memory allocating 1,204,224 bytes \(allocated "
                   r"so far: 0 bytes\).\); lower runtime.trt_max_batch or runtime.trt_dim_range$"),
    ("cache folder", r"^TensorRT engine cache folder '.*cache' cannot be used \(.*\): set runtime.trt_cache_dir to "
                     r"a folder you can write$"),
])
def test_every_failure_is_a_one_line_engine_error(models: dict[str, Path], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch, case: str, message: str) -> None:
    devices = {"old gpu": [FakeDevice("Tesla P100", 6, 0)], "no device": [],
               "gpu memory": [FakeDevice(free=1 << 20)]}.get(case)
    fake, cupy = install_fake_gpu(monkeypatch, "8.6.1" if case == "old tensorrt" else V10,
                                  FakeCupy(devices, driver=case != "no driver"))
    model = models["arcface"]
    options: dict[str, object] = {}
    if case == "no tensorrt":
        monkeypatch.setitem(sys.modules, "tensorrt", None)
    elif case == "no cupy":
        monkeypatch.setitem(sys.modules, "cupy", None)
    elif case == "device id":
        options = {"device_id": 1}
    elif case == "not onnx":
        model = tmp_path / "bad.onnx"
        model.write_text("not a model")
    elif case == "parser":
        model = _custom_op_model(tmp_path / "fancy.onnx")
    elif case == "build":
        fake.fail_build = "[optimizer] Error Code 2: Internal Error (out of device memory)\nmore detail"
    elif case == "launch":
        fake.fail_execute = True
    elif case == "cache folder":
        (tmp_path / "cache").write_text("a file where the folder should be")
    rt = TrtRuntime(model, RuntimeOptions(kind="tensorrt", trt_cache_dir=str(tmp_path / "cache"), **options))
    with pytest.raises(EngineError, match=message) as err:
        rt.open() if case != "launch" else rt.run(_feeds("arcface"))
    assert "\n" not in str(err.value)
    if case not in ("launch", "cache folder", "gpu memory"):
        assert not _engines(tmp_path / "cache")  # nothing half-made left behind
    assert rt.is_open == (case == "launch")


def test_a_missing_file_is_model_not_found_and_open_expecting_names_the_kind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_gpu(monkeypatch)
    with pytest.raises(ModelNotFound, match="nope.onnx' does not exist"):
        TrtRuntime(tmp_path / "nope.onnx").open_expecting("an ArcFace embedder ONNX file")
    (tmp_path / "bad.onnx").write_text("junk")
    with pytest.raises(EngineError, match="not a loadable ONNX model .*; expected an ArcFace embedder ONNX file$"):
        TrtRuntime(tmp_path / "bad.onnx").open_expecting("an ArcFace embedder ONNX file")
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # what the machine lacks is not the file's fault
    with pytest.raises(EngineError, match="or use runtime.kind=onnxruntime$"):
        TrtRuntime(tmp_path / "bad.onnx").open_expecting("an ArcFace embedder ONNX file")


# -- the async calls ----------------------------------------------------------------------------

def test_each_launch_copies_in_runs_copies_out_and_waits_on_one_stream(
        models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake, cupy = install_fake_gpu(monkeypatch)
    rt = TrtRuntime(models["inswapper_dyn"], RuntimeOptions(kind="tensorrt", trt_cache_dir=str(tmp_path)),
                    allocator=PinnedAllocator())
    rt.open()
    stream = rt._stream.ptr
    assert stream != 0  # not the legacy default stream: this runtime's own
    for batch in (2, 11):  # one launch, then two (max batch 8)
        mark = len(cupy.log)
        feeds = _feeds("inswapper_dyn", batch=batch, seed=batch)
        out = rt.run(feeds)
        np.testing.assert_array_equal(out["output"], _ort(models["inswapper_dyn"]).run(feeds)["output"])
        calls = [c for c in cupy.log[mark:] if c[0] != "attributes"]
        one = [("h2d", stream, "target"), ("h2d", stream, "source"), ("execute", stream), ("d2h", stream, "output"),
               ("record", stream), ("sync", stream)]
        names = {rt._in[n].device.data.ptr: n for n in rt._in} | {rt._out[n].device.data.ptr: n for n in rt._out}
        seen = [(c[0], c[1], names[c[2]]) if c[0] in ("h2d", "d2h") else c for c in calls]
        assert seen == one * (1 if batch == 2 else 2)
        assert all(c[4] for c in calls if c[0] in ("h2d", "d2h"))  # from and into page-locked memory
        assert cupy.pending() == 0  # nothing left on the stream when run returns


def test_the_fake_stream_runs_work_only_when_synchronised(models: dict[str, Path], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """What makes the order test bite: without the event's wait, `run` would return whatever
    the host buffer held before, as it could on a GPU."""
    _, cupy = install_fake_gpu(monkeypatch)
    rt = _trt(models["arcface"], tmp_path)
    monkeypatch.setattr(type(rt._event), "synchronize", lambda self: None)
    out = rt.run(_feeds("arcface"))["683"]
    assert cupy.pending() == 4  # copy in, launch, copy out, event: all still queued
    assert not np.array_equal(out, _ort(models["arcface"]).run(_feeds("arcface"))["683"])


def test_pinned_inputs_go_to_the_device_from_where_they_are(models: dict[str, Path], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The swap stage's ring slots are page-locked: the device reads them directly, with no
    host copy into the staging buffer first; pageable inputs still go through it."""
    _, cupy = install_fake_gpu(monkeypatch)
    rt = TrtRuntime(models["inswapper_dyn"], RuntimeOptions(kind="tensorrt", trt_cache_dir=str(tmp_path)),
                    allocator=PinnedAllocator())
    rt.open()
    feeds = _feeds("inswapper_dyn", batch=3, seed=4)
    slots = {}
    for name, value in feeds.items():
        slots[name] = PinnedAllocator().empty(value.shape, value.dtype)  # a ring slot, not the staging buffer
        slots[name][...] = value
    staging = rt._in["target"].host
    staging[...] = 7.0
    mark = len(cupy.log)
    got = rt.run(slots)["output"]
    np.testing.assert_array_equal(got, _ort(models["inswapper_dyn"]).run(feeds)["output"])
    assert np.all(staging == 7.0)  # never written: the copy came from the slot itself
    assert [c[4] for c in cupy.log[mark:] if c[0] == "h2d"] == [True, True]
    rt.run(feeds)  # pageable: staged
    assert np.array_equal(staging[:feeds["target"].size].reshape(feeds["target"].shape), feeds["target"])


def test_run_into_lands_the_outputs_in_the_callers_arrays(models: dict[str, Path], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _, cupy = install_fake_gpu(monkeypatch)
    rt = TrtRuntime(models["inswapper_dyn"], RuntimeOptions(kind="tensorrt", trt_cache_dir=str(tmp_path)),
                    allocator=PinnedAllocator())
    reference = _ort(models["inswapper_dyn"])
    assert isinstance(rt, BindsOutputs)  # the swap stage hands it its pinned output slots
    for batch in (3, 11):  # one launch; two launches (max batch 8) into the two halves of one array
        feeds = _feeds("inswapper_dyn", batch=batch, seed=batch)
        slot = PinnedAllocator().empty((batch, 3, 128, 128), np.float32)
        mark = len(cupy.log)
        got = rt.run_into(feeds, {"output": slot})["output"]
        assert got is slot
        np.testing.assert_array_equal(slot, reference.run(feeds)["output"])
        outs = [c for c in cupy.log[mark:] if c[0] == "d2h"]
        assert len(outs) == (1 if batch == 3 else 2) and all(c[4] for c in outs)  # into page-locked memory
    feeds = _feeds("inswapper_dyn", batch=2)
    wrong = np.zeros((3, 3, 128, 128), np.float32)  # not this call's shape: an array of its own comes back
    got = rt.run_into(feeds, {"output": wrong})["output"]
    assert got is not wrong and not wrong.any()
    np.testing.assert_array_equal(got, reference.run(feeds)["output"])


# -- host buffers, closing ------------------------------------------------------------------------

def test_host_buffers_are_the_pinned_staging_buffers(models: dict[str, Path], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _, cupy = install_fake_gpu(monkeypatch)
    rt = TrtRuntime(models["gfpgan"], RuntimeOptions(kind="tensorrt", trt_cache_dir=str(tmp_path)),
                    allocator=PinnedAllocator())
    early = rt.host_buffer("input", (1, 3, 512, 512))  # before open: the allocator's own
    assert cupy.is_pinned(early)
    rt.open()
    blob = rt.host_buffer("input", (1, 3, 512, 512))
    assert cupy.is_pinned(blob) and np.shares_memory(blob, rt._in["input"].host)
    blob[...] = _feeds("gfpgan")["input"]
    got = rt.run({"input": blob})["output"]
    np.testing.assert_array_equal(got, _ort(models["gfpgan"]).run(_feeds("gfpgan"))["output"])
    early[...] = 0.5
    want = _ort(models["gfpgan"]).run({"input": early})["output"]
    np.testing.assert_array_equal(rt.run({"input": early})["output"], want)
    assert rt.host_buffer("input", (1, 3, 512, 512), np.float16).dtype == np.float16  # not the engine's type: its own


def test_close_releases_the_engine_and_buffers(models: dict[str, Path], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    _, cupy = install_fake_gpu(monkeypatch)
    rt = _trt(models["arcface"], tmp_path)
    rt.run(_feeds("arcface"))
    rt.close()
    gc.collect()
    assert not rt.is_open and all(ref() is None for ref in cupy._memory.values())  # device memory freed
    assert rt.run(_feeds("arcface"))["683"].shape == (1, 512) and rt.is_open and not rt.built  # reopens from cache


# -- through the registry, the config and the model classes -------------------------------------------

def test_the_registry_makes_tensorrt_runtimes_and_importing_engines_imports_no_gpu_library(tmp_path: Path) -> None:
    alloc = PinnedAllocator.__new__(PinnedAllocator)
    options = RuntimeOptions(kind="tensorrt", trt_max_batch=4)
    rt = runtime_factory(options, alloc)(tmp_path / "m.onnx")
    assert isinstance(rt, TrtRuntime) and rt.options is options and rt.allocator is alloc and "tensorrt" in RUNTIMES
    code = ("import sys, engines.registry, engines.backends.registry, engines.backends.trt.runtime; "
            "print(sorted(m for m in ('tensorrt', 'cupy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_config_takes_the_tensorrt_options() -> None:
    cfg = load_config(None, ["runtime.kind=tensorrt", "runtime.trt_max_batch=4", "runtime.trt_workspace=268435456",
                             "runtime.trt_dim_range=[64, 320, 640]"])
    assert (cfg.runtime.kind, cfg.runtime.trt_max_batch, cfg.runtime.trt_workspace) == ("tensorrt", 4, 1 << 28)
    assert cfg.runtime.trt_dim_range == (64, 320, 640)
    assert RuntimeOptions().trt_dim_range == (32, 640, 1280) and RuntimeOptions().trt_max_batch == 8
    for bad, field in [("runtime.trt_max_batch=0", "trt_max_batch"), ("runtime.trt_workspace=-1", "trt_workspace"),
                       ("runtime.trt_dim_range=[640, 32, 1280]", "trt_dim_range"),
                       ("runtime.trt_dim_range=640", "trt_dim_range")]:
        with pytest.raises(ConfigError, match=f"runtime.{field}"):
            load_config(None, [bad])


KPS = np.array([[200.0, 220.0], [300.0, 218.0], [250.0, 280.0], [212.0, 330.0], [290.0, 328.0]], np.float32)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_model_classes_run_on_tensorrt_through_the_factory(
        models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    fake, cupy = install_fake_gpu(monkeypatch, version)
    trt = runtime_factory(RuntimeOptions(kind="tensorrt", trt_cache_dir=str(tmp_path)), PinnedAllocator())
    ort = runtime_factory(RuntimeOptions(providers="cpu", intra_threads=1))
    image = astronaut()
    results = []
    for make in (trt, ort):
        detector = ScrfdDetector(make(models["scrfd"]))
        embedder = ArcFaceEmbedder(make(models["arcface"]))
        swapper = InSwapper(make(models["inswapper"]))
        enhancer = GfpganEnhancer(make(models["gfpgan"]))
        for model in (detector, embedder, swapper, enhancer):
            model.open()
        dets, kps = detector.forward(image)
        embeddings = embedder.forward_many(image, [KPS, KPS + 3])
        latent = swapper.prepare_source(embeddings[0])
        swapped, _ = swapper.forward_crop(image, KPS, latent)
        enhanced, _ = enhancer.forward_crop(image, KPS)
        results.append((dets, kps, embeddings, swapped, enhanced))
    assert len(fake.builds) == 4 and isinstance(detector.runtime, OrtRuntime)
    assert len(results[0][0]) > 0  # the synthetic detector finds something on the astronaut
    for got, want in zip(*results):
        np.testing.assert_array_equal(got, want)
    assert any(e[0] == "h2d" and e[4] for e in cupy.log)  # fed from pinned memory
