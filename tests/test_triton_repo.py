"""`write_repository` and `facestream triton-repo`: the configs say what the ONNX files say
(parsed with Triton's own ModelConfig message), the Python-backend repository the CLI writes
is served by the real bundled tritonserver, and bad inputs are one-line errors."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import text_format

from engines.backends.triton.repo import RepositoryError, write_repository
from stream.cli.main import main
from tests.fixtures import build_scrfd_model, make_arcface, make_fan, make_gfpgan, make_inswapper
from tests.fixtures.triton import TritonServer

model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2",
                                       reason="tritonclient[grpc] is in the test extra")


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models folder as a user has it: the catalog's file names."""
    folder = tmp_path_factory.mktemp("models")
    build_scrfd_model(folder / "det_10g.onnx", seed=3)
    make_arcface(folder / "w600k_r50.onnx", seed=4)
    make_inswapper(folder / "inswapper_128.onnx", seed=5, batch=None)
    make_fan(folder / "2dfan4.onnx")
    make_gfpgan(folder / "gfpgan_1.4.onnx", size=64)
    return folder


CATALOG_FILES = {"scrfd_10g": "det_10g.onnx", "arcface_w600k_r50": "w600k_r50.onnx",
                 "inswapper_128": "inswapper_128.onnx", "2dfan4": "2dfan4.onnx", "gfpgan_1.4": "gfpgan_1.4.onnx"}


def _config(path: Path):
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


@pytest.mark.parametrize("backend", ["onnxruntime", "tensorrt", "python"])
def test_configs_follow_the_onnx_files(models_dir: Path, tmp_path: Path, backend: str) -> None:
    models = {name: models_dir / file for name, file in CATALOG_FILES.items()}
    kind = "cpu" if backend == "python" else "gpu"
    written = write_repository(tmp_path, models, backend=backend, max_batch=6, instances=2, kind=kind)
    assert all(p.exists() for p in written)
    group_kind = model_config_pb2.ModelInstanceGroup.KIND_CPU if kind == "cpu" else \
        model_config_pb2.ModelInstanceGroup.KIND_GPU
    for name in models:
        config = _config(tmp_path / name / "config.pbtxt")
        assert config.name == name
        assert (config.platform, config.backend) == (("tensorrt_plan", "") if backend == "tensorrt" else ("", backend))
        assert [(g.count, g.kind) for g in config.instance_group] == [(2, group_kind)]
    # a dynamic batch axis: batched, dims without it, dynamic batching with a short queue delay
    swapper = _config(tmp_path / "inswapper_128" / "config.pbtxt")
    assert swapper.max_batch_size == 6
    assert [(t.name, list(t.dims), t.data_type) for t in swapper.input] == [
        ("target", [3, 128, 128], model_config_pb2.TYPE_FP32), ("source", [512], model_config_pb2.TYPE_FP32)]
    assert [(t.name, list(t.dims)) for t in swapper.output] == [("output", [3, 128, 128])]
    assert 0 < swapper.dynamic_batching.max_queue_delay_microseconds <= 10_000
    # a fixed first axis: unbatched, full dims, dynamic axes as -1, no batcher
    detector = _config(tmp_path / "scrfd_10g" / "config.pbtxt")
    assert detector.max_batch_size == 0 and not detector.HasField("dynamic_batching")
    assert list(detector.input[0].dims) == [1, 3, -1, -1]
    assert [t.name for t in detector.output][:3] == ["score_8", "score_16", "score_32"]
    fan = _config(tmp_path / "2dfan4" / "config.pbtxt")
    assert (fan.max_batch_size, [list(t.dims) for t in fan.output]) == (0, [[1, 68, 3], [1, 68, 64, 64]])
    # the model file where the backend looks for it
    for name, src in models.items():
        if backend == "tensorrt":
            assert (tmp_path / name / "model.onnx").read_bytes() == src.read_bytes()
            assert not (tmp_path / name / "1" / "model.onnx").exists()
        else:
            assert (tmp_path / name / "1" / "model.onnx").read_bytes() == src.read_bytes()
        assert (tmp_path / name / "1" / "model.py").exists() == (backend == "python")
    plans = tmp_path / "build_plans.sh"
    assert plans.exists() == (backend == "tensorrt")
    if backend == "tensorrt":
        text = plans.read_text()
        assert ("--saveEngine=inswapper_128/1/model.plan --fp16 --minShapes=target:1x3x128x128,source:1x512 "
                "--optShapes=target:6x3x128x128,source:6x512 --maxShapes=target:6x3x128x128,source:6x512") in text
        assert "# scrfd_10g: its dynamic axes are built for 640" in text
        assert "--minShapes=input.1:1x3x640x640 --optShapes=input.1:1x3x640x640" in text


def test_symlinked_files_and_rewriting_a_repository(models_dir: Path, tmp_path: Path) -> None:
    write_repository(tmp_path, {"arcface_w600k_r50": models_dir / "w600k_r50.onnx"}, backend="python")
    (tmp_path / "arcface_w600k_r50" / "2").mkdir()  # a stale version from an earlier repository
    (tmp_path / "someone_elses").mkdir()
    write_repository(tmp_path, {"arcface_w600k_r50": models_dir / "w600k_r50.onnx"}, link=True)
    onnx_file = tmp_path / "arcface_w600k_r50" / "1" / "model.onnx"
    assert onnx_file.is_symlink() and onnx_file.resolve() == (models_dir / "w600k_r50.onnx").resolve()
    assert not (tmp_path / "arcface_w600k_r50" / "2").exists()
    assert (tmp_path / "someone_elses").is_dir()


def test_the_batchers_queue_delay_is_the_callers(models_dir: Path, tmp_path: Path) -> None:
    write_repository(tmp_path, {"inswapper_128": models_dir / "inswapper_128.onnx"}, queue_delay_us=25_000)
    swapper = _config(tmp_path / "inswapper_128" / "config.pbtxt")
    assert swapper.dynamic_batching.max_queue_delay_microseconds == 25_000
    with pytest.raises(ValueError, match="queue_delay_us cannot be negative"):
        write_repository(tmp_path, {"inswapper_128": models_dir / "inswapper_128.onnx"}, queue_delay_us=-1)


def test_unreadable_files_and_bad_arguments_are_one_line_errors(models_dir: Path, tmp_path: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    repo = tmp_path / "repo"
    with pytest.raises(RepositoryError, match=r"^model file .*junk\.onnx: not a readable ONNX model") as err:
        write_repository(repo, {"arcface_w600k_r50": models_dir / "w600k_r50.onnx", "inswapper_128": junk})
    assert "\n" not in str(err.value)
    assert not repo.exists()  # every file is read before anything is written
    with pytest.raises(RepositoryError, match=r"model file .*missing\.onnx: not found"):
        write_repository(repo, {"inswapper_128": tmp_path / "missing.onnx"})
    with pytest.raises(ValueError, match="unknown Triton backend 'openvino'; known: onnxruntime, tensorrt, python"):
        write_repository(repo, {}, backend="openvino")


@pytest.mark.slow
def test_cli_writes_a_repository_the_real_server_serves(models_dir: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    repo = tmp_path / "repo"
    assert main(["triton-repo", str(repo), "--models-dir", str(models_dir), "--backend", "python",
                 "--max-batch", "4"]) == 0
    said = capsys.readouterr().out
    assert f"wrote a Triton model repository in {repo}: backend python" in said
    assert "inswapper_128" in said and "batched up to 4, dynamic batching" in said
    assert f"-v {repo.resolve()}:/models nvcr.io/nvidia/tritonserver" in said and "pip install -q onnxruntime" in said
    assert f"env.py serve {repo.resolve()}" in said  # a source checkout: the developers' server too
    assert sorted(p.name for p in repo.iterdir()) == sorted(CATALOG_FILES)
    with TritonServer(repo) as server:
        assert {m["name"]: m.get("state") for m in server.repository_index()} == dict.fromkeys(CATALOG_FILES,
                                                                                             "READY")
        grpcclient = pytest.importorskip("tritonclient.grpc")
        x = np.random.default_rng(1).random((3, 3, 112, 112), dtype=np.float32)
        tensor = grpcclient.InferInput("input.1", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        got = grpcclient.InferenceServerClient(server.grpc_url).infer("arcface_w600k_r50", [tensor]).as_numpy("683")
    want = ort.InferenceSession(str(models_dir / "w600k_r50.onnx"), providers=["CPUExecutionProvider"]).run(
        ["683"], {"input.1": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_cli_gpu_backends_say_how_to_start_nvidias_container(models_dir: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture) -> None:
    assert main(["triton-repo", str(tmp_path / "repo"), "--models-dir", str(models_dir), "--backend", "tensorrt",
                 "--instances", "2"]) == 0
    said = capsys.readouterr().out
    assert "sh build_plans.sh" in said
    assert "docker run --gpus all" in said and "tritonserver --model-repository=/models" in said
    assert "count: 2\n    kind: KIND_GPU" in (tmp_path / "repo" / "inswapper_128" / "config.pbtxt").read_text()


@pytest.mark.parametrize("case", ["missing folder", "empty folder", "junk file", "target is a file"])
def test_cli_bad_input_is_one_line(tmp_path: Path, case: str, capsys: pytest.CaptureFixture) -> None:
    models, repo = tmp_path / "models", tmp_path / "repo"
    if case != "missing folder":
        models.mkdir()
    if case == "junk file":
        (models / "inswapper_128.onnx").write_text("junk")
    if case == "target is a file":
        make_arcface(models / "w600k_r50.onnx")
        repo.write_text("")
    assert main(["triton-repo", str(repo), "--models-dir", str(models)]) == 1
    err = capsys.readouterr().err
    expected = {"missing folder": f"--models-dir {models}: no such folder",
                "empty folder": f"triton-repo: no model files found in {models}, ",
                "junk file": f"model file {models / 'inswapper_128.onnx'}: not a readable ONNX model",
                "target is a file": f"triton-repo: {repo} exists and is not a folder"}[case]
    assert err.startswith(f"facestream: error: {expected}") and err.count("\n") == 1


# -- INT8 files: served under the float model's name ----------------------------------------------

def _report(int8: Path, float_file: Path, passed: bool, checked: bool = True) -> None:
    from engines.int8 import QuantReport, write_report

    write_report(QuantReport(model="m", kind="embedder", source=float_file.name,
                             source_size=float_file.stat().st_size, source_sha256="", checked=checked,
                             passed=passed), int8.with_suffix(".json"))


def _quantize(src: Path, dst: Path, passed: bool | None) -> Path:
    """A U8S8 QDQ file as `facestream models quantize` writes them, and its report (None: none)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(2)
    feeds = iter([{"input.1": rng.uniform(-1, 1, (1, 3, 112, 112)).astype(np.float32)} for _ in range(3)])

    class Reader(CalibrationDataReader):
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(feeds, None)

    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    if passed is not None:
        _report(dst, src, passed)
    return dst


@pytest.fixture(scope="module")
def int8_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A float ArcFace with an INT8 file that passed, a float swapper with one that did not report."""
    folder = tmp_path_factory.mktemp("int8_models")
    _quantize(make_arcface(folder / "w600k_r50.onnx", seed=4), folder / "w600k_r50_int8.onnx", passed=True)
    _quantize(make_arcface(folder / "other.onnx", seed=6), folder / "inswapper_128_int8.onnx", passed=None)
    make_inswapper(folder / "inswapper_128.onnx", seed=5, batch=None)
    return folder


@pytest.mark.parametrize("precision, arcface, swapper", [
    ("fp32", "w600k_r50.onnx", "inswapper_128.onnx"),
    ("auto", "w600k_r50_int8.onnx", "inswapper_128.onnx"),  # only a passed report counts
    ("int8", "w600k_r50_int8.onnx", "inswapper_128_int8.onnx"),
])
def test_the_precision_picks_the_file_served_under_each_name(int8_dir: Path, precision: str, arcface: str,
                                                              swapper: str) -> None:
    from engines.backends.triton.repo import pick_files

    floats = {"arcface_w600k_r50": int8_dir / "w600k_r50.onnx", "inswapper_128": int8_dir / "inswapper_128.onnx"}
    assert {k: v.name for k, v in pick_files(floats, precision).items()} == {
        "arcface_w600k_r50": arcface, "inswapper_128": swapper}
    int8, arcface_float = int8_dir / "w600k_r50_int8.onnx", int8_dir / "w600k_r50.onnx"
    try:
        for passed, checked in ((False, True), (False, False)):  # over budget, or --no-budget: never auto
            _report(int8, arcface_float, passed, checked)
            assert pick_files(floats, "auto")["arcface_w600k_r50"].name == "w600k_r50.onnx"
            assert pick_files(floats, "int8")["arcface_w600k_r50"].name == "w600k_r50_int8.onnx"
    finally:
        _report(int8, arcface_float, True)
    with pytest.raises(ValueError, match="unknown precision 'fp16'; known: auto, fp32, int8"):
        pick_files(floats, "fp16")


@pytest.mark.parametrize("backend", ["onnxruntime", "tensorrt"])
def test_an_int8_file_is_served_under_the_float_name(int8_dir: Path, tmp_path: Path, backend: str,
                                                     capsys: pytest.CaptureFixture) -> None:
    repo = tmp_path / "repo"
    assert main(["triton-repo", str(repo), "--models-dir", str(int8_dir), "--backend", backend,
                 "--precision", "auto"]) == 0
    said = capsys.readouterr().out
    assert f"{int8_dir / 'w600k_r50_int8.onnx'}  int8, batched" in said
    config = _config(repo / "arcface_w600k_r50" / "config.pbtxt")
    assert config.name == "arcface_w600k_r50" and config.parameters["precision"].string_value == "int8"
    assert "precision" not in _config(repo / "inswapper_128" / "config.pbtxt").parameters
    assert [(t.name, list(t.dims)) for t in config.input] == [("input.1", [3, 112, 112])]  # the float file's I/O
    served = repo / "arcface_w600k_r50" / ("model.onnx" if backend == "tensorrt" else "1/model.onnx")
    import onnx

    zero_points = [i for i in onnx.load(str(served)).graph.initializer if i.name.endswith(("zero_point", "zp"))]
    kinds = {onnx.numpy_helper.to_array(z).dtype.name for z in zero_points}
    if backend == "tensorrt":  # TensorRT's parser takes symmetric int8 only: the copy, built with --int8
        assert kinds == {"int8"} and not any(onnx.numpy_helper.to_array(z).any() for z in zero_points)
        plans = (repo / "build_plans.sh").read_text()
        assert "--saveEngine=arcface_w600k_r50/1/model.plan --int8 --fp16" in plans
        assert "--saveEngine=inswapper_128/1/model.plan --fp16" in plans
    else:  # the file itself, as the CPU and CUDA providers read it
        assert served.read_bytes() == (int8_dir / "w600k_r50_int8.onnx").read_bytes() and "uint8" in kinds


@pytest.mark.parametrize("file, name", [("w600k_r50_int8.onnx", "arcface_w600k_r50"),
                                        ("w600k_r50.onnx", "arcface_w600k_r50"),
                                        ("inswapper_128_int8.onnx", "inswapper_128"),
                                        ("mine_int8.onnx", "mine"), ("_int8.onnx", "_int8")])
def test_the_client_asks_for_an_int8_file_by_its_float_models_name(file: str, name: str) -> None:
    from engines.backends.triton.runtime import model_name

    assert model_name(Path("/models") / file) == name
