"""tools/bench_tracking.py: it times the tracker on a suite scene and refuses bad arguments."""
from __future__ import annotations

import re

import pytest

from tools import bench_tracking


def test_it_prints_the_tracker_time_per_frame_of_a_scene(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_tracking.main(["--scenes", "face-like", "--repeat", "1"]) == 0
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(r"face-like +60 frames \d+x\d+: \d+\.\d ms/frame best, \d+\.\d median of 1", line), line


@pytest.mark.parametrize("args", [["--scenes", "nope"], ["--repeat", "0"]])
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_tracking.main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "nope" in err or "--repeat" in err
