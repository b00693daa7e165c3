"""tools/bench_tracking.py: it times the tracker on a suite scene and refuses bad arguments."""
from __future__ import annotations

import re

import pytest

from tools import bench_tracking


@pytest.mark.slow
def test_it_prints_the_tracker_time_per_frame_of_a_scene(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_tracking.main(["--scenes", "face-like", "--repeat", "1"]) == 0
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(r"face-like +60 frames \d+x\d+: \d+\.\d ms/frame best, \d+\.\d median of 1", line), line


def test_against_times_an_override_beside_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_tracking.main(["--scenes", "face-like", "--repeat", "1", "--against", "detect.refine=false"]) == 0
    default, other, ratio = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"face-like +60 frames 640x360 \(default\): \d+\.\d ms/frame best, .*", default), default
    assert re.fullmatch(r"face-like +60 frames 640x360 \(detect.refine=false\): \d+\.\d ms/frame best, .*",
                        other), other
    assert re.fullmatch(r"face-like +default / against: \d+\.\d\dx \(best passes\)", ratio), ratio


@pytest.mark.parametrize("args", [["--scenes", "nope"], ["--repeat", "0"], ["--against", "detect.refine=maybe"]])
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_tracking.main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "nope" in err or "--repeat" in err or "detect.refine must be true or false" in err
