"""`facestream doctor` on this CPU-only machine, and with a fake CUDA device."""
from __future__ import annotations

import pytest

from stream.cli import doctor
from stream.config import load_config
from stream.job.vram_plan import DeviceMemory, GiB


def test_doctor_on_a_cpu_machine_says_there_is_no_gpu_and_how_to_get_one(capsys: pytest.CaptureFixture[str],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("stream.job.vram_plan.device_memory", lambda device_id=0: None)
    assert doctor.run_doctor(load_config()) == 0
    out = capsys.readouterr().out
    for title in ("Python and packages", "GPU", "Models", "Live I/O", "Test servers", "Plan for the default run"):
        assert f"\n{title}\n" in f"\n{out}"
    assert "CUDA device" in out and "none found" in out
    assert "fix: an NVIDIA GPU" in out
    assert "no GPU: every model runs on the CPU" in out
    assert "inswapper_128" in out  # the models, found or with where to put them
    assert "facestream runs here" in out  # nothing required is missing on the test machine


@pytest.mark.parametrize("scheme, exact, diff, expected", [
    ("float32, fused column term", True, 0.0, ["ok opencv dispatch        SSE *AVX2; ",
                                                "region warp: float32, fused column term, equals the full warp"]),
    ("shifted translation", False, 1.0, ["ok opencv dispatch", "region warp: shifted translation, within 1 grey "
                                                               "levels of the full warp"]),
    ("shifted translation", False, 3.0, ["-- opencv dispatch",
                                         "fix: report this line: the region warp exceeds its bound (2)"]),
])
def test_doctor_says_what_opencv_dispatches_to_and_the_region_warps_choice(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, scheme: str, exact: bool, diff: float,
        expected: list[str]) -> None:
    import cv2

    from engines.geometry import region_warp

    monkeypatch.setattr("stream.job.vram_plan.device_memory", lambda device_id=0: None)
    monkeypatch.setattr(region_warp, "current", lambda: region_warp.WarpChoice(scheme, exact, diff, "SSE *AVX2"))
    assert doctor.run_doctor(load_config()) == 0
    out = capsys.readouterr().out
    for line in expected:
        assert line in out
    assert (cv2.ipp.getIppVersion() if cv2.ipp.useIPP() else "IPP off") in out


def test_doctor_with_a_gpu_prints_the_plan(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    card = DeviceMemory("Fake GPU 8 GB", 8 * GiB, 7 * GiB)
    monkeypatch.setattr("stream.job.vram_plan.device_memory", lambda device_id=0: card)
    monkeypatch.setattr(doctor, "_pinned_memory", lambda: doctor.Finding("gpu", "pinned memory", "fake", True))
    assert doctor.run_doctor(load_config(), max_vram=2 * GiB) == 0
    out = capsys.readouterr().out
    assert "Fake GPU 8 GB, 7.0 GB free of 8.0 GB" in out
    assert "VRAM plan on Fake GPU 8 GB:" in out and "of 2.00 GB budget" in out


def test_a_missing_required_package_is_named_with_its_fix(capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    real = doctor._version
    monkeypatch.setattr(doctor, "_version", lambda module: None if module == "av" else real(module))
    assert doctor.run_doctor(load_config()) == 0
    out = capsys.readouterr().out
    assert "!! av" in out and "fix: pip install av" in out
    assert "required part(s) missing" in out


def test_a_check_that_breaks_is_reported_not_raised(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> list[doctor.Finding]:
        raise OSError("no /dev")

    monkeypatch.setattr(doctor, "check_live", broken)
    assert doctor.run_doctor(load_config()) == 0
    assert "could not run (OSError: no /dev)" in capsys.readouterr().out


def test_the_doctor_command_exits_0_and_takes_the_run_options(capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from stream.cli.main import main

    monkeypatch.setattr("stream.job.vram_plan.device_memory", lambda device_id=0: None)
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "none found: the models run on the CPU" in out and "fix: pip install cupy-cuda12x" in out
    card = DeviceMemory("Fake GPU 24 GB", 24 * GiB, 23 * GiB)
    monkeypatch.setattr("stream.job.vram_plan.device_memory", lambda device_id=0: card)
    monkeypatch.setattr(doctor, "_pinned_memory", lambda: doctor.Finding("gpu", "pinned memory", "fake", True))
    assert main(["doctor", "--max-vram", "3G", "--set", 'runtime.kind="tensorrt"']) == 0
    out = capsys.readouterr().out
    assert "VRAM plan on Fake GPU 24 GB:" in out and "of 3.00 GB budget" in out
    assert main(["doctor", "--max-vram", "lots"]) == 1
    said = capsys.readouterr().err.strip()
    assert said == "facestream: error: --max-vram 'lots': a size like 1.5G, 800M or a byte count"


def test_a_gpu_the_installed_runtime_cannot_use_is_said(capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    card = DeviceMemory("Fake GPU 8 GB", 8 * GiB, 7 * GiB)
    monkeypatch.setattr("stream.job.vram_plan.device_memory", lambda device_id=0: card)
    monkeypatch.setattr(doctor, "_pinned_memory", lambda: doctor.Finding("gpu", "pinned memory", "fake", True))
    monkeypatch.setattr("engines.backends.ort.available_providers", lambda: ["CPUExecutionProvider"])
    assert doctor.run_doctor(load_config()) == 0
    assert "the GPU is not used by this runtime as installed" in capsys.readouterr().out
