"""The VRAM plan of a run: applied to its config before the models load, printed first, and
a plan that cannot fit ends the run in one line (fake GPUs from 2 GB to 80 GB; the CLI run
through the stand-in TensorRT and cupy)."""
from __future__ import annotations

from pathlib import Path

import pytest

from stream.cli.main import main
from stream.config import load_config
from stream.job.run_plan import PlanDoesNotFit, gpu_runtime, plan_run
from stream.job.vram_plan import DeviceMemory, GiB, MiB
from tests.fixtures import build_scrfd_model, make_arcface, make_inswapper, probe
from tests.fixtures.fake_cupy import FakeCupy, FakeDevice
from tests.fixtures.fake_tensorrt import install_fake_gpu


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("models")
    build_scrfd_model(folder / "det_10g.onnx", seed=3)
    make_arcface(folder / "w600k_r50.onnx", seed=4)
    make_inswapper(folder / "inswapper_128.onnx", seed=5, batch=None)
    return folder


def _config(models_dir: Path, *extra: str, kind: str = "tensorrt"):
    return load_config(None, [f'runtime.kind="{kind}"', f'models.dir="{models_dir}"', 'engine="neural"', *extra])


def _card(gb: float) -> DeviceMemory:
    return DeviceMemory(f"Fake {gb:g} GB", int(gb * GiB), int(gb * GiB) - 200 * MiB)


def test_a_large_card_keeps_the_first_choices(models_dir: Path) -> None:
    config = _config(models_dir)
    planned = plan_run(config, _card(80))
    assert planned.plan is not None and planned.plan.given_up == []
    assert planned.notes[0].startswith("VRAM plan on Fake 80 GB:") and "fp32" in planned.notes[0]
    rt = config.runtime
    assert (rt.trt_fp16, rt.trt_max_batch, rt.trt_workspace) == (False, 8, GiB)


@pytest.mark.parametrize("gb", [2, 3, 4, 6, 8, 12, 16, 24, 40, 80])
def test_every_card_gets_a_plan_within_its_budget_written_into_the_config(models_dir: Path, gb: int) -> None:
    config = _config(models_dir, "enhance.enabled=true")
    planned = plan_run(config, _card(gb))
    plan = planned.plan
    assert plan is not None and plan.estimate <= plan.budget <= 0.85 * gb * GiB
    rt = config.runtime
    assert rt.trt_fp16 == (plan.precision == "fp16") and rt.trt_max_batch == plan.batch
    assert rt.trt_workspace == plan.workspace
    assert config.enhance.enabled == (plan.enhancer is not None)
    if not config.enhance.enabled:  # what the run gave up is said
        assert any(n.startswith("enhancer off: gfpgan_1.4 does not fit") for n in planned.notes)


def test_max_vram_caps_the_plan(models_dir: Path) -> None:
    config = _config(models_dir, 'runtime.max_vram="1.5G"')
    plan = plan_run(config, _card(80)).plan
    assert plan is not None and plan.budget == int(1.5 * GiB) and plan.estimate <= plan.budget
    assert plan.precision == "fp16" and config.runtime.trt_fp16


def test_a_plan_that_cannot_fit_is_one_line(models_dir: Path) -> None:
    with pytest.raises(PlanDoesNotFit) as err:
        plan_run(_config(models_dir, "runtime.max_vram=300000000"), _card(80))
    text = str(err.value)
    assert "\n" not in text and text.startswith("VRAM plan: the smallest set") and "raise --max-vram" in text


def test_the_smaller_detector_only_when_its_file_is_there(models_dir: Path, tmp_path: Path) -> None:
    config = _config(models_dir, 'runtime.max_vram="1.1G"')
    with pytest.raises(PlanDoesNotFit):  # scrfd_2.5g is not in the folder: no switching to it
        plan_run(config, _card(80))
    for f in models_dir.iterdir():
        (tmp_path / f.name).symlink_to(f)
    build_scrfd_model(tmp_path / "det_2.5g.onnx", seed=6)
    config = _config(tmp_path, 'runtime.max_vram="1.1G"')
    planned = plan_run(config, _card(80))
    assert config.models.detector == "scrfd_2.5g"
    assert "detector scrfd_2.5g instead of scrfd_10g, to fit the VRAM plan" in planned.notes


def test_cpu_runs_have_no_plan_and_say_max_vram_changes_nothing(models_dir: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(models_dir, 'runtime.providers="cpu"', 'runtime.max_vram="2G"', kind="onnxruntime")
    assert not gpu_runtime(config.runtime)
    planned = plan_run(config, _card(80))
    assert planned.plan is None
    assert planned.notes == ["--max-vram has no effect: the models run on the CPU"]
    dlib = load_config(None, ['engine="dlib"', 'runtime.kind="tensorrt"'])
    assert plan_run(dlib, _card(80)).plan is None and plan_run(dlib, _card(80)).notes == []
    monkeypatch.setattr("engines.backends.ort.available_providers",  # onnxruntime-gpu's providers
                        lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert gpu_runtime(load_config(None, ['runtime.providers="cuda"']).runtime)
    assert gpu_runtime(load_config(None, []).runtime)  # auto: CUDA first when it is installed


@pytest.mark.slow
def test_a_gpu_swap_prints_the_plan_first_and_builds_what_it_chose(
        models_dir: Path, face_clip: Path, source_photo: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _ = install_fake_gpu(monkeypatch, cupy=FakeCupy([FakeDevice(name="NVIDIA Fake 80GB", total=80 * GiB,
                                                                      free=79 * GiB)]))
    out = tmp_path / "out.mp4"
    code = main(["swap", "--source", str(source_photo), "--input", str(face_clip), "--output", str(out),
                 "--models-dir", str(models_dir), "--engine", "neural", "--x264-preset", "ultrafast", "-q",
                 "--set", 'runtime.kind="tensorrt"', "--set", f'runtime.trt_cache_dir="{tmp_path / "cache"}"',
                 "--max-vram", "1.5G"])
    said = capsys.readouterr().out.splitlines()
    assert code == 0 and probe(out)["frames"] > 0
    assert said[0].startswith("note: VRAM plan on NVIDIA Fake 80GB:") and "of 1.50 GB budget" in said[0]
    assert "fp16" in said[0] and "batch 4" in said[0]
    assert fake.builds and all(b["fp16"] for b in fake.builds)  # the plan's precision is what was built
    batched = [b for b in fake.builds if any(lo[0] != hi[0] for lo, _, hi in b["profile"].values())]
    assert batched and all(hi[0] == 4 for b in batched for _, _, hi in b["profile"].values())


def test_a_gpu_run_that_cannot_fit_ends_before_loading_in_one_line(
        models_dir: Path, face_clip: Path, source_photo: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _ = install_fake_gpu(monkeypatch)
    out = tmp_path / "out.mp4"
    code = main(["swap", "--source", str(source_photo), "--input", str(face_clip), "--output", str(out),
                 "--models-dir", str(models_dir), "--engine", "neural", "--set", 'runtime.kind="tensorrt"',
                 "--set", f'runtime.trt_cache_dir="{tmp_path}"', "--max-vram", "300M"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and not out.exists() and fake.builds == []
    assert err.startswith("facestream: error: VRAM plan: the smallest set") and "\n" not in err
    assert "more than the 300 MB --max-vram allows" in err
