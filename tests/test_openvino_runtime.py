"""OpenVINO as a runtime (`--runtime openvino`): its CPU device runs every model family through
the inference-runtime protocol, on the synthetic models with the real I/O, within a tolerance
of ONNX Runtime (their kernels differ from CPU to CPU); an INT8 QDQ file and dynamic shapes
are read; the device choice reaches OpenVINO (GPU and NPU through a stand-in Core); and every
way it cannot open is one line."""
from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

_openvino = pytest.importorskip("openvino")

from engines.backends import openvino as ov_backend  # noqa: E402

REAL_CORE = ov_backend.core  # before any test puts its stand-in in its place
from engines.backends.base import RuntimeOptions  # noqa: E402
from engines.backends.openvino import DeviceUnavailable, OpenVinoRuntime, OpenVinoUnavailable  # noqa: E402
from engines.backends.ort import OrtRuntime  # noqa: E402
from engines.backends.registry import runtime_factory  # noqa: E402
from engines.errors import EngineError, ModelNotFound  # noqa: E402
from stream.cli.main import main  # noqa: E402
from stream.config import load_config  # noqa: E402
from stream.errors import ConfigError  # noqa: E402
from tests.fixtures import (  # noqa: E402
    build_scrfd_model,
    make_arcface,
    make_fan,
    make_gfpgan,
    make_hyperswap,
    make_inswapper,
    make_simswap,
)
from tools.synth.masks import make_bisenet, make_xseg  # noqa: E402

CPU = RuntimeOptions(kind="openvino", device="CPU", intra_threads=1)
AUTO = RuntimeOptions(kind="openvino", intra_threads=1)  # the default device: here, what OpenVINO picks
ORT_CPU = RuntimeOptions(providers="cpu", intra_threads=1)

# Every model family, by its synthetic stand-in: (maker, the size a dynamic axis takes here).
FAMILIES: dict[str, tuple[Callable[[Path], Path], int]] = {
    "detector scrfd": (lambda p: build_scrfd_model(p, seed=3), 96),
    "embedder arcface": (lambda p: make_arcface(p, seed=4), 2),
    "swapper inswapper": (lambda p: make_inswapper(p, seed=5), 1),
    "swapper simswap": (lambda p: make_simswap(p, seed=6), 1),
    "swapper hyperswap": (lambda p: make_hyperswap(p, seed=7), 1),
    "landmarker 2dfan4": (make_fan, 1),
    "enhancer gfpgan": (make_gfpgan, 1),
    "mask xseg": (make_xseg, 1),
    "mask bisenet": (make_bisenet, 1),
}


def _feeds(rt: OrtRuntime, dynamic: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in rt.inputs:
        shape = tuple(dynamic if d is None else d for d in spec.shape)
        feeds[spec.name] = rng.random(shape, dtype=np.float32)
    return feeds


def _close(got: dict[str, np.ndarray], want: dict[str, np.ndarray], rel: float = 1e-4) -> None:
    assert list(got) == list(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
        tol = rel * max(1.0, float(np.abs(value).max()))
        assert float(np.abs(got[name] - value).max()) <= tol, name


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_runs_on_the_cpu_device_as_on_onnxruntime(tmp_path: Path, family: str) -> None:
    make, dynamic = FAMILIES[family]
    path = make(tmp_path / "model.onnx")
    ort_rt, ov_rt = OrtRuntime(path, ORT_CPU), OpenVinoRuntime(path, CPU)
    ort_rt.open()
    ov_rt.open()
    assert ov_rt.is_open and ov_rt.device == "CPU"
    assert ov_rt.inputs == ort_rt.inputs and ov_rt.outputs == ort_rt.outputs  # names, dynamic axes, types
    feeds = _feeds(ort_rt, dynamic)
    _close(ov_rt.run(feeds), ort_rt.run(feeds))
    first = ort_rt.outputs[0].name
    assert list(ov_rt.run(feeds, [first])) == [first] and ov_rt.calls == 2
    ov_rt.close()
    assert not ov_rt.is_open


def test_dynamic_axes_take_any_size(tmp_path: Path) -> None:
    """SCRFD's height and width, ArcFace's batch: each call may bring another size (on the
    default device, AUTO, too)."""
    det = OpenVinoRuntime(build_scrfd_model(tmp_path / "det.onnx", seed=3), AUTO)
    det_ort = OrtRuntime(det.path, ORT_CPU)
    for h, w in ((64, 64), (96, 160), (640, 640), (64, 64)):
        feeds = {"input.1": np.random.default_rng(h + w).random((1, 3, h, w), dtype=np.float32)}
        got = det.run(feeds)
        assert got["score_8"].shape == (h // 8 * w // 8 * 2, 1)
        _close(got, det_ort.run(feeds))
    assert det.device == "AUTO"
    emb = OpenVinoRuntime(make_arcface(tmp_path / "emb.onnx", seed=4), CPU)
    for batch in (1, 3):
        out = emb.run({"input.1": np.zeros((batch, 3, 112, 112), np.float32)})
        assert next(iter(out.values())).shape == (batch, 512)


def test_an_int8_qdq_file_is_read(tmp_path: Path) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    float_file = build_scrfd_model(tmp_path / "det.onnx", seed=3)
    int8_file = tmp_path / "det_int8.onnx"

    class Inputs(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(1)
            self.batches = iter([{"input.1": rng.standard_normal((1, 3, 96, 96), dtype=np.float32)}
                                 for _ in range(4)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    quantize_static(str(float_file), str(int8_file), Inputs(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True)
    feeds = {"input.1": np.random.default_rng(2).standard_normal((1, 3, 128, 96), dtype=np.float32)}
    want_float = OrtRuntime(float_file, ORT_CPU).run(feeds)
    want_int8 = OrtRuntime(int8_file, ORT_CPU).run(feeds)
    got = OpenVinoRuntime(int8_file, CPU).run(feeds)
    for name, value in want_int8.items():
        scale = max(1.0, float(np.abs(want_float[name]).max()))
        # the same quantised arithmetic as ONNX Runtime's, within a few quantisation steps
        # (integer kernels round differently from one CPU to the next) ...
        assert float(np.abs(got[name] - value).max()) <= 0.05 * scale, name
    # ... and the file was read as quantised: its drift from the float model is the INT8 one
    drift = max(float(np.abs(got[n] - want_float[n]).max()) for n in got)
    assert drift > 1e-5


def test_a_runtime_runs_from_several_threads_at_once(tmp_path: Path) -> None:
    rt = OpenVinoRuntime(make_inswapper(tmp_path / "swap.onnx", seed=5), CPU)
    rng = np.random.default_rng(0)
    feeds = [{"target": rng.random((1, 3, 128, 128), dtype=np.float32),
              "source": rng.standard_normal((1, 512)).astype(np.float32)} for _ in range(4)]
    want = [rt.run(f)["output"] for f in feeds]
    got: dict[int, list[np.ndarray]] = {i: [] for i in range(4)}
    barrier = threading.Barrier(4)

    def worker(i: int) -> None:
        barrier.wait()
        for _ in range(5):
            got[i].append(rt.run(feeds[i])["output"])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(g, want[i]) for i, outs in got.items() for g in outs)
    assert rt.calls == 24 and 1 <= len(rt._idle) <= 4  # a request per caller at once, kept for reuse


def test_run_into_writes_into_the_callers_array(tmp_path: Path) -> None:
    rt = OpenVinoRuntime(make_inswapper(tmp_path / "swap.onnx", seed=5), CPU)
    feeds = {"target": np.full((1, 3, 128, 128), 0.5, np.float32), "source": np.ones((1, 512), np.float32)}
    slot = np.zeros((1, 3, 128, 128), np.float32)
    out = rt.run_into(feeds, {"output": slot})
    assert out["output"] is slot and np.array_equal(slot, rt.run(feeds)["output"])
    wrong = np.zeros((2, 3, 128, 128), np.float32)  # not this run's shape: an array of its own comes back
    assert rt.run_into(feeds, {"output": wrong})["output"] is not wrong and not wrong.any()


def test_the_registry_makes_openvino_runtimes_and_importing_engines_does_not_import_openvino(
        tmp_path: Path) -> None:
    rt = runtime_factory(CPU)(tmp_path / "m.onnx")
    assert isinstance(rt, OpenVinoRuntime) and rt.options is CPU
    code = ("import sys, engines, engines.registry, engines.backends.registry, stream.job.swap_job; "
            "sys.exit('openvino' in sys.modules)")
    import subprocess

    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent.parent).returncode == 0


def test_ctrl_c_after_the_models_closed_is_a_keyboardinterrupt(tmp_path: Path) -> None:
    """With a Core per model, OpenVINO unloaded its plugins when the last model closed, and a
    SIGINT after that crashed the process (SIGSEGV): the Core is kept for the process."""
    import subprocess

    code = f"""
import signal, threading, time, numpy as np
from engines.backends.base import RuntimeOptions
from engines.backends.openvino import OpenVinoRuntime
from tools.synth.face_models import make_arcface
from tools.synth.scrfd import build_scrfd_model
det = OpenVinoRuntime(build_scrfd_model({str(tmp_path / "det.onnx")!r}, seed=3), RuntimeOptions(device="AUTO"))
emb = OpenVinoRuntime(make_arcface({str(tmp_path / "emb.onnx")!r}, seed=4), RuntimeOptions(device="CPU"))
for h, w in ((64, 64), (96, 160)):
    det.run({{"input.1": np.zeros((1, 3, h, w), np.float32)}})
emb.run({{"input.1": np.zeros((1, 3, 112, 112), np.float32)}})
det.close(); emb.close(); del det, emb
signal.signal(signal.SIGINT, signal.default_int_handler)
main = threading.get_ident()
threading.Thread(target=lambda: (time.sleep(0.3), signal.pthread_kill(main, signal.SIGINT)), daemon=True).start()
worker = threading.Thread(target=time.sleep, args=(3,))
worker.start()
try:
    worker.join()
except KeyboardInterrupt:
    print("interrupted")
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent.parent, capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "interrupted"), done.stderr[-2000:]


class StandInCore:
    """OpenVINO's Core as a machine with an Intel GPU (two) and an NPU would show it: it lists
    them and records what is compiled for which device, then compiles on the CPU."""

    devices = ["CPU", "GPU.0", "GPU.1", "NPU"]
    compiled: list[tuple[str, dict[str, Any]]] = []

    def __init__(self) -> None:
        self.core = REAL_CORE()  # the process's real one
        self.available_devices = list(self.devices)

    def compile_model(self, model: Any, device: str, config: dict[str, Any]) -> Any:
        StandInCore.compiled.append((device, config))
        return self.core.compile_model(model, "CPU")

    def get_property(self, device: str, name: str) -> str:
        return f"stand-in {device}"


@pytest.fixture()
def stand_in_core(monkeypatch: pytest.MonkeyPatch) -> type[StandInCore]:
    StandInCore.compiled = []
    monkeypatch.setattr(ov_backend, "core", StandInCore)
    return StandInCore


@pytest.mark.parametrize("device", ["GPU", "GPU.1", "NPU", "AUTO", "CPU"])
def test_the_device_reaches_compile_model(tmp_path: Path, stand_in_core: type[StandInCore], device: str) -> None:
    rt = OpenVinoRuntime(make_arcface(tmp_path / "emb.onnx", seed=4),
                         RuntimeOptions(kind="openvino", device=device.lower(), intra_threads=3))
    rt.open()
    assert rt.run({"input.1": np.zeros((1, 3, 112, 112), np.float32)})
    [(got, config)] = stand_in_core.compiled
    assert got == device and config["PERFORMANCE_HINT"] == "LATENCY"
    cpu = {"INFERENCE_NUM_THREADS": 3, "INFERENCE_PRECISION_HINT": "f32"}
    if device == "CPU":
        assert {k: config[k] for k in cpu} == cpu
    elif device == "AUTO":  # the CPU is one of AUTO's candidates: it gets its threads there
        assert config["DEVICE_PROPERTIES"] == {"CPU": cpu}
    else:  # a GPU or an NPU keeps its plugin's own precision and threads
        assert not set(config) & {"INFERENCE_NUM_THREADS", "INFERENCE_PRECISION_HINT", "DEVICE_PROPERTIES"}


def test_a_device_the_machine_lacks_is_one_line_naming_those_it_has(
        tmp_path: Path, stand_in_core: type[StandInCore], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stand_in_core, "devices", ["CPU", "GPU"])  # one GPU: listed without an index
    path = make_arcface(tmp_path / "emb.onnx", seed=4)
    with pytest.raises(DeviceUnavailable) as err:
        OpenVinoRuntime(path, RuntimeOptions(kind="openvino", device="NPU")).open_expecting("an ArcFace embedder")
    assert str(err.value) == "OpenVINO device 'NPU' is not on this machine; OpenVINO sees: CPU, GPU (--device)"
    with pytest.raises(DeviceUnavailable, match="'GPU.2'"):
        OpenVinoRuntime(path, RuntimeOptions(kind="openvino", device="GPU.2")).open()
    OpenVinoRuntime(path, RuntimeOptions(kind="openvino", device="GPU.0")).open()  # the one GPU answers to .0
    assert [d for d, _ in stand_in_core.compiled] == ["GPU.0"]


@pytest.mark.parametrize("text", ["TPU", "gpu-1", "CPU.1", "", "AUTO:GPU,CPU"])
def test_an_unknown_device_is_a_config_error_quoting_it(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"runtime.device={json.dumps(text)}"])
    message = str(err.value)
    assert "\n" not in message and repr(text) in message and "AUTO, CPU, GPU, NPU" in message
    assert load_config(None, ["runtime.device=gpu.1"]).runtime.device == "GPU.1"
    assert RuntimeOptions().device == "AUTO"


@pytest.mark.parametrize("data, reason", [(b"not a model", "Model can't be parsed"), (b"", "it has no inputs")])
def test_a_file_that_is_not_onnx_is_one_line_naming_it(tmp_path: Path, data: bytes, reason: str) -> None:
    bad = tmp_path / "det_10g.onnx"
    bad.write_bytes(data)
    with pytest.raises(EngineError) as err:
        OpenVinoRuntime(bad, CPU).open_expecting("an SCRFD detector")
    message = str(err.value)
    assert "\n" not in message and repr(str(bad)) in message and reason in message
    assert message.endswith("; expected an SCRFD detector")
    with pytest.raises(ModelNotFound, match="does not exist"):
        OpenVinoRuntime(tmp_path / "missing.onnx", CPU).open_expecting("an SCRFD detector")


def test_without_the_package_it_is_one_line_naming_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              face_clip: Path, source_photo: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    path = make_arcface(tmp_path / "w600k_r50.onnx", seed=4)
    monkeypatch.setitem(sys.modules, "openvino", None)  # `import openvino` fails as if not installed
    with pytest.raises(OpenVinoUnavailable) as err:
        OpenVinoRuntime(path, CPU).open_expecting("an ArcFace embedder")
    assert str(err.value) == ("--runtime openvino needs the openvino package, which is not installed: "
                              "pip install 'facestream[openvino]'")
    build_scrfd_model(tmp_path / "det_10g.onnx", seed=3)
    make_inswapper(tmp_path / "inswapper_128.onnx", seed=5)
    code = main(["swap", "--engine", "neural", "--runtime", "openvino", "--models-dir", str(tmp_path),
                 "--source", str(source_photo), "--input", str(face_clip), "--output", str(tmp_path / "o.mp4")])
    said = capsys.readouterr().err.strip()
    assert code != 0 and "\n" not in said and "pip install 'facestream[openvino]'" in said
    assert not (tmp_path / "o.mp4").exists()


def test_the_doctor_says_what_openvino_sees_and_would_use(stand_in_core: type[StandInCore]) -> None:
    from stream.cli.doctor import check_openvino

    line = check_openvino(load_config(None, [])).line()
    assert "sees CPU, GPU.0 (stand-in GPU.0), GPU.1 (stand-in GPU.1), NPU (stand-in NPU)" in line
    assert "would use AUTO, here GPU" in line and line.lstrip().startswith("ok")
    assert ov_backend.auto_choice(["CPU", "NPU"]) == "CPU"


@pytest.mark.slow  # a whole neural swap
def test_swap_runs_end_to_end_on_openvino(tmp_path: Path, face_clip: Path, source_photo: Path,
                                          capsys: pytest.CaptureFixture) -> None:
    models = tmp_path / "models"
    models.mkdir()
    build_scrfd_model(models / "det_10g.onnx", seed=3)
    make_arcface(models / "w600k_r50.onnx", seed=4)
    make_inswapper(models / "inswapper_128.onnx", seed=5)
    out, stats = tmp_path / "out.mp4", tmp_path / "stats.json"
    code = main(["swap", "--engine", "neural", "--runtime", "openvino", "--device", "cpu", "--models-dir",
                 str(models), "--source", str(source_photo), "--input", str(face_clip), "--output", str(out),
                 "--x264-preset", "ultrafast", "--stats-json", str(stats), "-q"])
    assert code == 0, capsys.readouterr().err
    rep = json.loads(stats.read_text())
    assert rep["engine"] == "neural" and rep["faces_swapped"] > 0
    assert rep["model_calls"]["swap"] == rep["faces_swapped"] and rep["model_calls"]["detect"] > 0
