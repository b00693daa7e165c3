"""`facestream benchmark`: what it prints and writes, its verdict, and its errors. No test
asserts a speed: the figures are whatever this machine measures; what is checked is that
they are there, agree with each other, and come from real runs."""
from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from stream.cli.main import main
from stream.job.benchmark import reset_peak_rss, run_peak_rss_mb, verdict
from tests.fixtures import make_clip


def _bench(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["benchmark", "--config", "fast", *args])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def built_in(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    """One short run on the 720p one-face clip, printed and written as JSON with the table."""
    tmp = tmp_path_factory.mktemp("bench")
    path = tmp / "bench.json"
    buf = io.StringIO()  # capsys is per test: this module-wide run is captured by hand
    with contextlib.redirect_stdout(buf):
        rc = main(["benchmark", "--config", "fast", "--clips", "720p-1", "--seconds", "0.5",
                   "--repeat", "2", "--json", str(path), "--markdown"])
    assert rc == 0
    return buf.getvalue(), json.loads(path.read_text())


def test_prints_every_figure_the_issue_names(built_in: tuple[str, dict]) -> None:
    out, data = built_in
    assert re.search(r"^720p, one face \(1280x720, 15 frames, \d+ faces swapped\)$", out, re.M)
    assert re.search(r"^  fps +staged [\d.]+, serial [\d.]+ \([\d.]+x\)$", out, re.M)
    for stage in ("decode", "analyse", "swap", "composite", "encode", "latency"):
        assert re.search(rf"^  {stage} +[\d.]+ +[\d.]+", out, re.M), stage
    assert re.search(r"^  peak RSS +\d+ MB$", out, re.M)
    assert re.search(r"^  real time at 30 fps: (yes, with [\d.]+ ms a frame to spare|no, [\d.]+ ms a frame over)$",
                     out, re.M)
    # The machine and the date head the output and the Markdown table.
    assert re.search(r"^\d{4}-\d\d-\d\d, .+ cores, ", out, re.M)
    assert "| clip | staged fps | serial fps |" in out
    assert re.search(r"^Measured \d{4}-\d\d-\d\d with `facestream benchmark --config fast", out, re.M)


def test_json_holds_the_same_runs(built_in: tuple[str, dict]) -> None:
    out, data = built_in
    assert data["preset"] == "fast" and data["engine"] == "dlib" and data["machine"]
    (clip,) = data["clips"]
    assert clip["size"] == [1280, 720] and clip["frames"] == 15 and clip["faces_swapped"] > 0
    runs = clip["fps"]["runs"]
    assert len(runs["staged"]) == 2 and len(runs["serial"]) == 2  # --repeat 2, both modes
    assert clip["fps"]["staged"] == pytest.approx(sum(runs["staged"]) / 2, abs=0.01)  # the median of two
    assert clip["fps"]["ratio"] == pytest.approx(clip["fps"]["staged"] / clip["fps"]["serial"], rel=1e-2)
    assert set(clip["stages"]) >= {"decode", "analyse", "swap", "composite", "encode"}
    assert clip["latency"]["p95_ms"] >= clip["latency"]["p50_ms"] > 0
    assert clip["peak_rss_mb"] > 50
    # The verdict follows from the figures: 30 fps is 33.3 ms a frame.
    # (fps is shown to 0.01, so the ms it gives are good to 0.1%)
    assert clip["frame_ms"] == pytest.approx(1000 / clip["fps"]["staged"], rel=1e-3)
    assert clip["spare_ms"] == pytest.approx(1000 / 30 - clip["frame_ms"], abs=0.02)
    assert clip["real_time"] == (clip["fps"]["staged"] >= 30)
    assert verdict(clip) in out
    assert f"staged {clip['fps']['staged']:.1f}, serial {clip['fps']['serial']:.1f}" in out


@pytest.mark.parametrize("fps, real_time, text", [
    (40.0, True, "real time at 30 fps: yes, with 8.3 ms a frame to spare"),
    (20.0, False, "real time at 30 fps: no, 16.7 ms a frame over"),
])
def test_verdict_wording(fps: float, real_time: bool, text: str) -> None:
    frame_ms = 1000 / fps
    assert verdict({"target_fps": 30.0, "real_time": real_time, "spare_ms": 1000 / 30 - frame_ms}) == text


def test_own_clip_at_its_own_rate(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    clip = tmp_path / "mine.mp4"
    make_clip(clip, n=10, fps=25)
    rc, out, err = _bench(capsys, "--input", str(clip), "--json", str(tmp_path / "b.json"))
    assert rc == 0, err
    data = json.loads((tmp_path / "b.json").read_text())
    (summary,) = data["clips"]
    assert summary["clip"] == "mine.mp4" and summary["target_fps"] == 25.0 and summary["frames"] == 10
    assert "real time at 25 fps: " in out
    assert "building the" not in out  # no built-in clip is made for a user's own


def test_peak_rss_is_the_runs_own() -> None:
    """After a reset the high-water mark is this moment's, not the process's past peak."""
    import numpy as np

    big = np.ones(300 * 2 ** 20 // 8)  # 300 MiB resident
    big[::512] = 2.0
    before = run_peak_rss_mb(False)
    del big
    if not reset_peak_rss():
        pytest.skip("this kernel has no /proc/self/clear_refs")
    assert run_peak_rss_mb(True) < before - 200


@pytest.mark.parametrize("args, message", [
    (["--clips", "720p-9"], "--clips '720p-9' is not a built-in clip"),
    (["--seconds", "0"], "--seconds must be above 0"),
    (["--repeat", "0"], "--repeat must be 1 or more"),
    (["--serial"], "--serial: the benchmark runs every clip both ways"),
    (["--input", "/nonexistent/clip.mp4"], "input '/nonexistent/clip.mp4' does not exist"),
])
def test_bad_options_get_one_line(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    rc, out, err = _bench(capsys, *args)
    assert rc != 0
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_a_file_that_is_no_video(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "notes.mp4"
    bad.write_text("not a video")
    rc, out, err = _bench(capsys, "--input", str(bad))
    assert rc != 0 and "notes.mp4" in err and err.count("\n") == 1 and "Traceback" not in err
