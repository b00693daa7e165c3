"""`facestream models quantize` and the INT8 files: budgets, reports, calibration from real
faces, what a run picks for each precision, and the one-line errors."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from engines.backends.base import RuntimeOptions
from engines.cpu_features import CpuFeatures, parse_cpuinfo
from engines.int8 import QuantReport, fresh_report, int8_path, read_report, report_path, write_report
from engines.quantize import budgets, choose
from stream.cli.main import main
from tests.fixtures import build_scrfd_model, make_inswapper

VNNI = CpuFeatures("test CPU", ("AVX-512 VNNI",))
NO_INT8 = CpuFeatures("old CPU", ())


@pytest.mark.parametrize(("kind", "measures", "miss"), [
    ("swapper", {"psnr": 34.0, "identity_cosine": 0.99}, ""),
    ("swapper", {"psnr": 24.5, "identity_cosine": 0.99}, "psnr 24.5 dB < 30 dB"),
    ("swapper", {"psnr": 31.0, "identity_cosine": 0.97}, "identity_cosine 0.97 < 0.98"),
    ("swapper", {"psnr": 31.0}, ""),  # identity not measured (no ArcFace file): not judged
    ("detector", {"recall": 0.985, "box_iou_median": 0.99}, "recall 0.985 < 0.99"),
    ("embedder", {"drift_median": 0.004, "drift_p95": 0.05}, "drift_p95 0.05 > 0.03"),
    ("occluder", {"mask_iou": 0.96}, ""),
    ("landmarker", {"point_error_median": 0.02}, "point_error_median 0.02 > 0.01"),
])
def test_budget_verdicts(kind: str, measures: dict[str, float], miss: str) -> None:
    assert budgets.verdict(kind, measures).startswith(miss)
    assert bool(budgets.verdict(kind, measures)) == bool(miss)


def test_unknown_kind_has_no_budget() -> None:
    with pytest.raises(ValueError, match="known: swapper"):
        budgets.budget("tokenizer")


@pytest.mark.parametrize(("text", "int8"), [
    ("model name\t: Intel Xeon\nflags\t\t: fpu sse avx2 avx512f avx512_vnni\n", ("AVX-512 VNNI",)),
    ("model name\t: Intel Core Ultra\nflags\t\t: avx2 avx_vnni amx_int8\n", ("AVX-VNNI", "AMX-INT8")),
    ("model name\t: AMD Ryzen 3\nflags\t\t: fpu sse avx2\n", ()),
    ("processor\t: 0\nFeatures\t: fp asimd asimddp\nCPU part\t: 0xd0c\n", ("Arm dot product",)),
])
def test_cpu_int8_instructions(text: str, int8: tuple[str, ...]) -> None:
    features = parse_cpuinfo(text)
    assert features.int8 == int8
    assert features.int8_fast == bool(int8)


def test_report_names_round_trip_and_staleness(tmp_path: Path) -> None:
    src = tmp_path / "inswapper_128.onnx"
    src.write_bytes(b"x" * 100)
    q = int8_path(src)
    assert q.name == "inswapper_128_int8.onnx" and report_path(q).name == "inswapper_128_int8.json"
    report = QuantReport("inswapper_128", "swapper", src.name, 100, "0" * 64, checked=True, passed=True,
                         measures={"psnr": 33.0}, speed={"onnxruntime": {"fp32_ms": 100.0, "int8_ms": 25.0}})
    q.write_bytes(b"q")
    write_report(report, report_path(q))
    assert read_report(q) == report and report.speedup() == 4.0
    assert fresh_report(q, src) == report
    src.write_bytes(b"x" * 101)  # the float file replaced: its old INT8 twin no longer applies
    assert fresh_report(q, src) is None
    report_path(q).write_text("{not json")
    assert read_report(q) is None


def conv_arcface(path: Path, seed: int = 4) -> Path:
    """An ArcFace-shaped embedder with layers inside (three convolutions, then the Gemm): the
    first and last stay in float, the inner ones are quantised."""
    from onnx import TensorProto, helper, numpy_helper

    from tools.synth.face_models import save_model

    rng = np.random.default_rng(seed)
    widths = (3, 8, 16, 16)
    inits, nodes, x = [], [], "input.1"
    for i in range(3):
        w = (rng.standard_normal((widths[i + 1], widths[i], 3, 3)) / np.sqrt(9 * widths[i])).astype(np.float32)
        bias = np.zeros(widths[i + 1], np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(bias, f"b{i}")]
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1], strides=[2, 2]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        x = f"r{i}"
    inits.append(numpy_helper.from_array(rng.standard_normal((512, 16)).astype(np.float32), "fc"))
    nodes += [helper.make_node("GlobalAveragePool", [x], ["pool"]), helper.make_node("Flatten", ["pool"], ["flat"]),
              helper.make_node("Gemm", ["flat", "fc"], ["embedding"], transB=1)]
    graph = helper.make_graph(nodes, "conv_arcface",
                              [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, ["N", 3, 112, 112])],
                              [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["N", 512])], inits)
    return save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.fixture(scope="module")
def neural_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("quantize")
    build_scrfd_model(folder / "det_10g.onnx", seed=3)
    conv_arcface(folder / "w600k_r50.onnx")
    make_inswapper(folder / "inswapper_128.onnx", seed=5)
    return folder


def _quantize(folder: Path, *names: str, extra: tuple[str, ...] = ()) -> int:
    return main(["models", "quantize", *names, "--models-dir", str(folder), "--faces", "6", *extra])


def test_quantize_writes_checked_files_with_reports(neural_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _quantize(neural_dir, "arcface_w600k_r50", "scrfd_10g", "inswapper_128") == 0
    out = capsys.readouterr().out
    assert "calibration: the demo pictures" in out and "7 faces found" in out
    for name, stem, kind, measure in (("arcface_w600k_r50", "w600k_r50", "embedder", "drift_median"),
                                      ("scrfd_10g", "det_10g", "detector", "recall"),
                                      ("inswapper_128", "inswapper_128", "swapper", "psnr")):
        q = neural_dir / f"{stem}_int8.onnx"
        report = read_report(q)
        assert q.is_file() and report is not None, name
        assert report.kind == kind and report.checked and report.passed and report.usable
        assert measure in report.measures and report.calibration["held_out"] >= 4
        assert report.speed["onnxruntime"]["int8_ms"] > 0
        assert f"{name}: wrote {q.name} (within budget" in out
    # the embedder's inner convolution runs on INT8 weights, its first and last layers on float ones
    graph = onnx.load(str(neural_dir / "w600k_r50_int8.onnx"), load_external_data=False).graph
    weight_from = {n.name: next((p.op_type for p in graph.node if n.input[1] in p.output), "initializer")
                   for n in graph.node if n.op_type in ("Conv", "Gemm")}
    assert weight_from == {"Conv_0": "initializer", "Conv_2": "DequantizeLinear", "Conv_4": "DequantizeLinear",
                           "Gemm_8": "initializer"}
    report = read_report(neural_dir / "w600k_r50_int8.onnx")
    assert report is not None and report.kept_float[:2] == ["Conv_0", "Gemm_8"]
    # the detector's heads stay in float: every output comes from a float node
    det = onnx.load(str(neural_dir / "det_10g_int8.onnx"), load_external_data=False).graph
    producers = {o: n.op_type for n in det.node for o in n.output}
    assert not any(producers[o.name] == "DequantizeLinear" for o in det.output)


def test_quantized_swapper_keeps_emap_last(neural_dir: Path) -> None:
    from engines.backends.ort import OrtRuntime
    from engines.models.inswapper import InSwapper

    q = int8_path(neural_dir / "inswapper_128.onnx")
    if not q.is_file():
        assert _quantize(neural_dir, "inswapper_128") == 0
    ref, test = InSwapper(OrtRuntime(neural_dir / "inswapper_128.onnx")), InSwapper(OrtRuntime(q))
    ref.open()
    test.open()
    assert np.array_equal(ref.emap, test.emap)


def test_over_budget_is_refused_and_nothing_written(neural_dir: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    strict = (budgets.Limit("drift_median", 0.0, False), budgets.Limit("drift_p95", 0.0, False))
    monkeypatch.setitem(budgets.BUDGETS, "embedder", strict)
    folder = neural_dir.parent / "strict"
    folder.mkdir(exist_ok=True)
    conv_arcface(folder / "w600k_r50.onnx")
    assert _quantize(folder, "arcface_w600k_r50") == 1
    captured = capsys.readouterr()
    assert "arcface_w600k_r50: refused, over the embedder budget: drift_median" in captured.out
    assert "over budget: arcface_w600k_r50" in captured.err
    assert sorted(p.name for p in folder.iterdir()) == ["w600k_r50.onnx"]


def test_no_budget_file_is_unchecked_and_never_auto(neural_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    folder = neural_dir.parent / "unchecked"
    folder.mkdir(exist_ok=True)
    conv_arcface(folder / "w600k_r50.onnx")
    assert _quantize(folder, "arcface_w600k_r50", extra=("--no-budget",)) == 0
    assert "UNCHECKED (--no-budget)" in capsys.readouterr().out
    report = read_report(folder / "w600k_r50_int8.onnx")
    assert report is not None and not report.checked and not report.usable
    monkeypatch.setattr(choose, "int8_by_default", lambda options: (True, "test"))
    auto = choose.ChoosingFactory(RuntimeOptions(), None, "auto")
    assert auto.pick(folder / "w600k_r50.onnx").name == "w600k_r50.onnx"
    assert "unchecked" in auto.note()
    forced = choose.ChoosingFactory(RuntimeOptions(), None, "int8")
    assert forced.pick(folder / "w600k_r50.onnx").name == "w600k_r50_int8.onnx"
    assert "(unchecked)" in forced.note()


@pytest.mark.parametrize(("precision", "cpu", "expected"), [
    ("auto", VNNI, "w600k_r50_int8.onnx"),
    ("auto", NO_INT8, "w600k_r50.onnx"),
    ("fp32", VNNI, "w600k_r50.onnx"),
    ("int8", NO_INT8, "w600k_r50_int8.onnx"),
])
def test_precision_picks_the_file(neural_dir: Path, monkeypatch: pytest.MonkeyPatch, precision: str,
                                  cpu: CpuFeatures, expected: str) -> None:
    import engines.cpu_features as cf

    if not int8_path(neural_dir / "w600k_r50.onnx").is_file():
        assert _quantize(neural_dir, "arcface_w600k_r50") == 0
    monkeypatch.setattr(cf, "cpu_features", lambda: cpu)
    factory = choose.ChoosingFactory(RuntimeOptions(), None, precision)
    assert factory.pick(neural_dir / "w600k_r50.onnx").name == expected
    assert factory.pick(neural_dir / "2dfan4.onnx").name == "2dfan4.onnx"  # no twin: float


def test_fp16_is_refused_on_the_cpu() -> None:
    with pytest.raises(ValueError, match="fp16 is for GPU runtimes"):
        choose.ChoosingFactory(RuntimeOptions(providers="cpu"), None, "fp16")


def test_swap_runs_the_int8_files(neural_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    from stream.media.demo_clips import astronaut
    from stream.media.image_io import write_image
    from tests.fixtures import clip_frame, make_clip

    for name, stem in (("arcface_w600k_r50", "w600k_r50"), ("scrfd_10g", "det_10g"),
                       ("inswapper_128", "inswapper_128")):
        if not int8_path(neural_dir / f"{stem}.onnx").is_file():
            assert _quantize(neural_dir, name) == 0
    source = tmp_path / "source.png"
    write_image(source, astronaut())
    clip = tmp_path / "in.mp4"
    make_clip(clip, clip_frame, n=6, audio=False)
    out = tmp_path / "out.mp4"
    assert main(["swap", "--engine", "neural", "--models-dir", str(neural_dir), "--precision", "int8",
                 "--source", str(source), "--input", str(clip), "--output", str(out), "-q"]) == 0
    text = capsys.readouterr()
    note = text.out + text.err
    assert "precision int8: " in note and "inswapper_128_int8.onnx" in note and "det_10g_int8.onnx" in note
    assert out.is_file()


@pytest.mark.parametrize(("args", "message"), [
    (["simswap_256"], "simswap_256.onnx"),  # no file: says which, and how to get it
    (["arcface_w600k_r50", "--calibrate", "{missing}"], "no such file or folder"),
    (["arcface_w600k_r50", "--calibrate", "{faceless}"], "no face found in 1 picture"),
    (["arcface_w600k_r50", "--faces", "1"], "--faces 1: at least 2"),
    (["nosuch"], "unknown model 'nosuch'"),
])
def test_bad_input_is_one_line(neural_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               args: list[str], message: str) -> None:
    import cv2

    faceless = tmp_path / "grey.png"
    cv2.imwrite(str(faceless), np.full((240, 320, 3), 128, np.uint8))
    args = [a.format(missing=tmp_path / "nothing.mp4", faceless=faceless) for a in args]
    assert main(["models", "quantize", *args, "--models-dir", str(neural_dir)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0]


def test_corrupt_model_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "w600k_r50.onnx").write_bytes(b"\x08\x07 not a model at all" * 40)
    assert main(["models", "quantize", "arcface_w600k_r50", "--models-dir", str(tmp_path)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "w600k_r50.onnx" in err[0] and "not a loadable ONNX model" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w600k_r50.onnx"]


def test_report_is_json_with_the_figures(neural_dir: Path) -> None:
    q = int8_path(neural_dir / "det_10g.onnx")
    if not q.is_file():
        assert _quantize(neural_dir, "scrfd_10g") == 0
    data = json.loads(report_path(q).read_text())
    assert data["budget"] == {"recall": "recall >= 0.99", "box_iou_median": "box_iou_median >= 0.95"}
    assert data["kept_float"] and data["source"] == "det_10g.onnx" and len(data["source_sha256"]) == 64


def test_runtime_auto_runs_each_file_where_its_report_measured_it_faster(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import engines.cpu_features as cf

    monkeypatch.setattr(cf, "cpu_features", lambda: VNNI)
    src = tmp_path / "det_10g.onnx"
    src.write_bytes(b"f" * 10)
    q = int8_path(src)
    q.write_bytes(b"q")
    speed = {"cpu": VNNI.model, "onnxruntime": {"fp32_ms": 140.0, "int8_ms": 80.0},
             "openvino": {"fp32_ms": 160.0, "int8_ms": 40.0}}
    write_report(QuantReport("scrfd_10g", "detector", src.name, 10, "0" * 64, checked=True, passed=True,
                             speed=speed), report_path(q))
    both = ("onnxruntime", "openvino")
    assert choose.faster_runtime(q, both) == "openvino"  # the INT8 file: OpenVINO's 40 ms
    assert choose.faster_runtime(src, both) == "onnxruntime"  # the float file: ONNX Runtime's 140 ms
    assert choose.faster_runtime(q, ("onnxruntime",)) == "onnxruntime"  # OpenVINO not installed
    assert choose.auto_runtime_choice(src, RuntimeOptions(providers="cpu")) == ("openvino", "int8")
    # figures from another CPU say nothing of this one
    monkeypatch.setattr(cf, "cpu_features", lambda: CpuFeatures("another CPU", ("AVX-512 VNNI",)))
    assert choose.faster_runtime(q, both) == "onnxruntime"


def test_dlib_embedder_quantised_and_then_run_by_the_embedded_default(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The one real network: exported, quantised within the embedder budget with every
    same-person verdict kept, then what the embedded default loads on a CPU with VNNI."""
    import engines.cpu_features as cf
    from engines.dlib.models import model_path
    from engines.dlib.onnx_embedding import OnnxDlibEmbedding, checked_int8, load_embedding

    folder = tmp_path / "models"
    assert main(["models", "quantize", "dlib_embedder", "--models-dir", str(folder), "--faces", "8"]) == 0
    assert "dlib_embedder: wrote dlib_embedder_int8.onnx (within budget" in capsys.readouterr().out
    report = read_report(folder / "dlib_embedder_int8.onnx")
    assert report is not None and report.usable and report.kept_float[:2] == ["stem_conv", "fc"]
    assert report.measures["drift_p95"] < 0.003 and report.measures["verdicts_same"] == 1.0
    monkeypatch.setenv("FACESTREAM_MODELS", str(folder))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(cf, "cpu_features", lambda: VNNI)
    assert checked_int8() == folder / "dlib_embedder_int8.onnx"
    model = load_embedding(model_path("embedding"))
    assert isinstance(model, OnnxDlibEmbedding) and model.runtime.path.name == "dlib_embedder_int8.onnx"
    monkeypatch.setattr(cf, "cpu_features", lambda: NO_INT8)
    assert checked_int8() is None
