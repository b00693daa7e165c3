"""The benchmark script runs and prints its figures (a smoke test; speed is never asserted)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the benchmark scripts run

ROOT = Path(__file__).resolve().parent.parent


def test_bench_prints_both_modes_and_the_ratio(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    res = subprocess.run([sys.executable, "tools/bench.py", "--faces", "1", "--seconds", "0.5",
                          "--repeat", "1", "--json", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "one face: staged" in res.stdout and "ratio" in res.stdout
    runs = json.loads(out.read_text())["one face"]
    assert runs["staged"][0]["frames"] == runs["serial"][0]["frames"] == 15
    assert runs["staged"][0]["faces_swapped"] == runs["serial"][0]["faces_swapped"] > 0


def test_bench_live_prints_latency_and_the_target(tmp_path: Path) -> None:
    out = tmp_path / "live.json"
    # The A/V offset is read over 6 s (3.5 s left two flashes to catch, and CI once missed both).
    res = subprocess.run([sys.executable, "tools/bench_live.py", "--faces", "1", "--seconds", "1",
                          "--sync-seconds", "6", "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert "one face via vcam: in" in res.stdout and "latency p50" in res.stdout and "target p95" in res.stdout
    assert "one face via webrtc: in" in res.stdout and "round trip p50" in res.stdout
    reports = json.loads(out.read_text())
    rep = reports["one face"]
    # A real-time source skips what a loaded machine reads late: at least half of the 30 frames
    # come in, and every frame that came in was either delivered or counted as dropped.
    assert 15 <= rep["frames_in"] <= 30
    assert rep["frames"] + rep["drops"] >= rep["frames_in"] - 1 and rep["faces_swapped"] > 0
    # Through WebRTC: the client's numbered frames reached the server and came back swapped.
    web = reports["one face via webrtc"]
    assert web["webrtc"]["sent"] == 30 and web["frames_in"] >= 15 and web["faces_swapped"] > 0
    assert web["webrtc"]["received"] > 0 and web["webrtc"]["round_trip_ms"]["p95"] > 0
    # Beside it, the path's A/V offset: flashes and beeps read back by the client.
    assert "A/V offset (beep - flash" in res.stdout and web["webrtc"]["av_offset"]["flashes"] >= 1


def test_bench_gil_prints_each_interval_alone_and_beside_python() -> None:
    res = subprocess.run([sys.executable, "tools/bench_gil.py", "--frames", "3", "--intervals", "5,0.5"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("switch interval")]
    assert [ln.split(":")[0] for ln in lines] == ["switch interval 5 ms", "switch interval 0.5 ms"]
    assert all("alone" in ln and "beside a Python thread" in ln for ln in lines)
    bad = subprocess.run([sys.executable, "tools/bench_gil.py", "--intervals", "fast"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--intervals" in bad.stderr
