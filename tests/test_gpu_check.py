"""The GPU check (tools/gpu_check): its CPU dry run writes every section, a failing section
leaves the others standing, and the ring feed's event ordering holds when device work runs
late. Figures are never asserted: only that they are there and what they prove (bytes
arrived, frames came back right, the replay made the run's calls)."""
from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tools.gpu_check.device import NumpyBackend
from tools.gpu_check.feed import measure_feed
from tools.gpu_check.run import main

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("scrfd_10g", "arcface_w600k_r50", "inswapper_128", "gfpgan_1.4")


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("gpu_check") / "gpu_check.json"
    res = subprocess.run([sys.executable, "tools/gpu_check/run.py", "--dry-run", "--runtime", "onnxruntime",
                          "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(out.read_text()), res.stdout


def test_dry_run_writes_every_section(dry_run: tuple[dict[str, Any], str]) -> None:
    report, printed = dry_run
    assert report["dry_run"] is True and report["all_ok"] is True
    assert list(report["sections"]) == ["copies", "ring", "models", "pipeline", "live", "int8"]
    assert all(s["ok"] and s["seconds"] >= 0 for s in report["sections"].values())
    assert report["machine"]["device"]["stand_in"] is True
    assert report["runtime"]["kind"] == "onnxruntime" and report["runtime"]["stand_in"] is True
    for name in ("copies (", "ring (", "models (", "pipeline (", "live (", "pinned / pageable", "serial",
                 "overlapped", "engine alone", "peak device memory", "the live bench's targets", "int8 (",
                 "int8 p50 ms"):
        assert name in printed


def test_copies_cover_both_memories_and_arrive_intact(dry_run: tuple[dict[str, Any], str]) -> None:
    sec = dry_run[0]["sections"]["copies"]
    sizes = sec["sizes_mib"]
    wanted = {(s, m) for s in sizes for m in ("pinned", "pageable")}
    assert {(r["size_mib"], r["memory"]) for r in sec["rows"]} == wanted
    assert sec["all_exact"] and all(r["h2d_gbps"] > 0 and r["d2h_gbps"] > 0 for r in sec["rows"])
    assert set(sec["pinned_over_pageable"]) == {"size_mib", "h2d", "d2h"}


def test_ring_feed_runs_both_ways_and_every_checked_frame_is_right(dry_run: tuple[dict[str, Any], str]) -> None:
    sec = dry_run[0]["sections"]["ring"]
    assert sec["serial_fps"] > 0 and sec["overlapped_fps"] > 0 and sec["ratio"] > 0
    assert sec["checked_frames"] > 0 and sec["mismatched_frames"] == 0
    assert sec["kernel_vs_numpy_max_diff"] <= 1
    assert sec["work_rounds"] >= 1


def test_models_at_both_precisions_and_every_batch(dry_run: tuple[dict[str, Any], str]) -> None:
    sec = dry_run[0]["sections"]["models"]
    assert sec["all_ok"] and set(sec["models"]) == set(MODELS)
    for name, model in sec["models"].items():
        batches = [1] if name == "scrfd_10g" else [1, 2]
        assert model["batches"] == batches
        for precision, tolerance in (("fp32", 1e-5), ("fp16", 5e-2)):
            one = model[precision]
            assert one["ok"], one
            assert sorted(int(b) for b in one["latency"]) == batches
            assert all(v["p50_ms"] > 0 for v in one["latency"].values())
            assert 0 <= one["max_abs_diff"] <= tolerance


def test_pipeline_figures_and_the_replayed_calls(dry_run: tuple[dict[str, Any], str]) -> None:
    sec = dry_run[0]["sections"]["pipeline"]
    assert sec["engine"] == "neural" and sec["frames"] == sec["clip"]["frames"]
    assert sec["faces_swapped"] > 0 and sec["pipeline_fps"] > 0 and sec["engine_alone_fps"] > 0
    assert sec["ratio"] == pytest.approx(sec["pipeline_fps"] / sec["engine_alone_fps"], rel=0.02)
    assert sec["meets_goal"] == (sec["ratio"] >= sec["goal"] == 0.8)
    # the engine-alone figure replays exactly the calls the run made
    calls, replayed = sec["model_calls"], sec["replayed_calls"]
    assert replayed["det_10g.onnx"] == calls["detect"] and replayed["inswapper_128.onnx"] == calls["swap"] > 0
    assert set(sec["peak_memory"]) >= {"torch_max_allocated_mib", "cupy_pool_total_mib", "device_used_peak_mib"}
    assert set(sec["stages"]) >= {"analyse", "swap", "composite"} and sec["slowest_stage"] in sec["stages"]


def test_live_with_masks_figures_and_the_verdict_they_give(dry_run: tuple[dict[str, Any], str]) -> None:
    # One face live with the mouth (area) and occlusion masks: the swap ran with both, swapped
    # off the frame path at live's auto cadence, the occlusion model with each swap, and the
    # verdict is the live bench's three targets read off the figures.
    sec = dry_run[0]["sections"]["live"]
    assert sec["engine"] == "neural" and sec["masks"] == "area,occlusion" and "mouth" not in sec["areas"]
    assert sec["faces_swapped"] > 0 and 0 < sec["swaps"] and sec["mask_model_runs"] == sec["swaps"]
    assert sec["swaps_per_s_a_face"] > 0
    assert sec["frames_in"] > 0 and sec["dropped_share"] == pytest.approx(sec["drops"] / sec["frames_in"], abs=1e-4)
    targets = (sec["fps_out"] >= 29.5 and sec["dropped_share"] <= 0.01
               and sec["latency_ms"]["p95_ms"] <= sec["p95_bound_ms"])
    assert sec["meets_targets"] == targets


def test_int8_quantises_each_model_and_compares_it_with_the_float_one(dry_run: tuple[dict[str, Any], str]) -> None:
    sec = dry_run[0]["sections"]["int8"]
    assert sec["all_ok"] and sec["stand_in"] is True and "quantize" in sec["quantizer"]
    assert list(sec["models"]) == ["inswapper_128.onnx", "det_10g.onnx", "w600k_r50.onnx"]
    for name, m in sec["models"].items():
        assert m["int8_file"] == name.replace(".onnx", "_int8.onnx")
        assert m["fp16"]["p50_ms"] > 0 and m["int8"]["p50_ms"] > 0
        assert m["speedup"] == pytest.approx(m["fp16"]["p50_ms"] / m["int8"]["p50_ms"], rel=0.01)
        assert m["drift"] and all(0 < d["psnr_db"] and -1 <= d["cosine"] <= 1 for d in m["drift"].values())


def test_help_lists_the_int8_section() -> None:
    res = subprocess.run([sys.executable, "tools/gpu_check/run.py", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0 and "int8      the cost-equivalent inswapper_128" in res.stdout
    assert "live, int8" in " ".join(res.stdout.split())  # --sections: the help wraps the list


def test_int8_builds_an_int8_and_an_fp16_engine_on_tensorrt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The GPU run's path on the TensorRT stand-in (tests/fixtures/fake_tensorrt.py), with the
    # synthetic models in place of the cost-equivalent ones (too big to build here).
    import tools.gpu_check.int8 as int8
    from tests.fixtures.fake_tensorrt import V10, install_fake_gpu

    fake, _ = install_fake_gpu(monkeypatch, V10)
    synthetic = int8.write_cost_models
    monkeypatch.setattr(int8, "write_cost_models", lambda folder, dry_run, reuse=None: synthetic(folder, True))
    sec = int8.measure_int8(tmp_path, dry_run=False, warmup=1, repeats=2, calibration=2)
    assert sec["all_ok"] and sec["stand_in"] is False and sec["runtime"].startswith("tensorrt")
    assert sorted((b["int8"], b["fp16"]) for b in fake.builds) == [(False, True)] * 3 + [(True, True)] * 3
    for m in sec["models"].values():
        assert m["fp16_engine"] != m["int8_engine"] and m["drift"]


def test_int8_on_a_machine_without_tensorrt_fails_in_one_line(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import tools.gpu_check.int8 as int8

    monkeypatch.setitem(sys.modules, "tensorrt", None)
    synthetic = int8.write_cost_models
    monkeypatch.setattr(int8, "write_cost_models", lambda folder, dry_run, reuse=None: synthetic(folder, True))
    with pytest.raises(RuntimeError, match="TensorRT is not installed"):
        int8.measure_int8(tmp_path, dry_run=False, warmup=1, repeats=1, calibration=1)


def test_a_failing_section_is_recorded_and_the_others_still_run(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gc.json"
    code = main(["--dry-run", "--runtime", "onnxruntime", "--sections", "pipeline,copies", "--out", str(out),
                 "--set", "engine=no-such-engine", "--work-dir", str(tmp_path / "work")])
    assert code == 1
    report = json.loads(out.read_text())
    pipeline, copies = report["sections"]["pipeline"], report["sections"]["copies"]
    assert not pipeline["ok"] and "no-such-engine" in pipeline["error"] and "Traceback" in pipeline["traceback"]
    assert copies["ok"] and copies["all_exact"]
    assert "FAILED" in capsys.readouterr().out


# -- the ring feed's ordering, with device work that runs only when someone waits ---------

class _LateStream:
    """A stream whose work runs only when something waits on it (the laziest legal device)."""

    def __init__(self) -> None:
        self.ops: list[Callable[[], None]] = []
        self.ran = 0

    def run_until(self, position: int) -> None:
        while self.ran < position:
            self.ops[self.ran]()
            self.ran += 1

    def synchronize(self) -> None:
        self.run_until(len(self.ops))

    def wait_event(self, event: _LateEvent) -> None:
        event.synchronize()  # stricter than a device, never looser: the waited-for work is done first

    def __enter__(self) -> _LateStream:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class _LateEvent:
    def __init__(self) -> None:
        self.stream: _LateStream | None = None
        self.position = 0

    def record(self, stream: _LateStream) -> None:
        self.stream, self.position = stream, len(stream.ops)

    @property
    def done(self) -> bool:
        return self.stream is None or self.stream.ran >= self.position

    def synchronize(self) -> None:
        if self.stream is not None:
            self.stream.run_until(self.position)


class LateBackend(NumpyBackend):
    """The numpy stand-in with every copy and kernel queued, reading its input when it runs."""

    def stream(self) -> _LateStream:  # type: ignore[override]
        return _LateStream()

    def event(self) -> _LateEvent:  # type: ignore[override]
        return _LateEvent()

    def upload(self, dst: np.ndarray, src: np.ndarray, stream: Any) -> None:
        stream.ops.append(lambda: np.copyto(dst, src))

    def download(self, dst: np.ndarray, src: np.ndarray, stream: Any) -> None:
        stream.ops.append(lambda: np.copyto(dst, src))

    def work(self, src: np.ndarray, dst: np.ndarray, rounds: int, stream: Any) -> None:
        stream.ops.append(lambda: NumpyBackend.work(self, src, dst, rounds, stream))


def test_overlapped_feed_is_right_when_device_work_runs_late() -> None:
    # Slots are handed back, buffers reused and results read only after the events that
    # guard them: with work that runs as late as allowed, every checked frame still matches.
    sec = measure_feed(LateBackend(), (24, 32, 3), frames=24, slots=4)
    assert sec["checked_frames"] == 2 * 24 and sec["mismatched_frames"] == 0


# -- the torch runtime behind our protocol --------------------------------------------------

def test_torch_runtime_without_torch_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engines.errors import EngineError
    from tools.gpu_check.torch_runtime import TorchRuntime
    from tools.synth.face_models import make_arcface

    model = make_arcface(tmp_path / "arc.onnx")
    monkeypatch.setitem(sys.modules, "torch", None)  # what an install without PyTorch sees
    with pytest.raises(EngineError) as err:
        TorchRuntime(model).open_expecting("an ArcFace ONNX file")
    text = str(err.value)
    assert "\n" not in text and "PyTorch and onnx2torch" in text and "expected an ArcFace ONNX file" in text


@pytest.mark.parametrize("precision, tolerance", [("fp32", 1e-5), ("fp16", 5e-2)])
def test_torch_runtime_runs_the_swapper_like_onnxruntime(tmp_path: Path, precision: str, tolerance: float) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("onnx2torch")
    from engines.errors import EngineError
    from tools.gpu_check.runtimes import make_runtime
    from tools.synth.face_models import make_inswapper

    model = make_inswapper(tmp_path / "inswapper_128.onnx", seed=5, batch=None)
    rng = np.random.default_rng(1)
    feeds = {"target": rng.uniform(0, 1, (3, 3, 128, 128)).astype(np.float32),
             "source": rng.standard_normal((3, 512)).astype(np.float32)}
    expected = make_runtime(model, "onnxruntime", "fp32", dry_run=True).run(feeds)["output"]
    runtime = make_runtime(model, "torch", precision, dry_run=True)
    runtime.open()
    assert [(s.name, s.shape, s.dtype) for s in runtime.inputs] == [
        ("target", (None, 3, 128, 128), "tensor(float)"), ("source", (None, 512), "tensor(float)")]
    got = runtime.run(feeds)["output"]
    assert got.dtype == np.float32 and float(np.abs(got - expected).max()) <= tolerance
    into = np.zeros((4, 3, 128, 128), np.float32)  # a slot sized for the largest batch, used in part
    landed = runtime.run_into(feeds, {"output": into[:3]})["output"]  # type: ignore[attr-defined]
    assert np.shares_memory(landed, into) and float(np.abs(into[:3] - expected).max()) <= tolerance
    own = runtime.run_into(feeds, {"output": np.zeros((3, 3, 64, 64), np.float32)})["output"]  # type: ignore
    assert own.shape == (3, 3, 128, 128)  # an array that does not fit: the runtime's own comes back
    assert runtime.calls == 3
    with pytest.raises(EngineError, match="no value for input"):
        runtime.run({"target": feeds["target"]})
    buf = runtime.host_buffer("target", (2, 3, 128, 128))
    assert runtime.host_buffer("target", (2, 3, 128, 128)) is buf
    runtime.close()
    assert not runtime.is_open
