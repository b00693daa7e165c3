"""The same results on every CPU: the region warp's tests and the reference mode's
bit-exactness run again under each OpenCV dispatch level this CPU and this cv2 can select
(stream/runtime/cv_dispatch.py: without AVX-512, without AVX2, IPP off, the baseline only), each in
its own process, since OpenCV reads `OPENCV_CPU_DISABLE` and `OPENCV_IPP` when imported.

Which levels exist depends on the CPU (an ARM machine has fewer); what each must pass does not.
"""
from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from engines.geometry.region_warp import BOUND, SCHEMES
from stream.runtime.cv_dispatch import DispatchLevel, current_levels, dispatched_features, levels

ROOT = Path(__file__).resolve().parent.parent
LEVELS = current_levels()
log = logging.getLogger(__name__)

AVX512 = "SSE SSE2 SSE3 *SSE4.1 *SSE4.2 *AVX *FP16 *AVX2 *AVX_VNNI *AVX512-SKX *AVX512-CLX"
AVX2 = "SSE SSE2 SSE3 *SSE4.1 *SSE4.2 *AVX *FP16 *AVX2"
ARM = "NEON FP16 *NEON_DOTPROD *NEON_FP16 *NEON_BF16"


@pytest.mark.parametrize("line, ipp, expected", [
    (AVX512, True, [("all dispatched", "", None),
                    ("no AVX-512", "AVX512-SKX,AVX512-CLX", "avx2"),
                    ("no AVX2 or above", "AVX2,AVX_VNNI,AVX512-SKX,AVX512-CLX", "sse42"),
                    ("IPP off", "", "disabled"),
                    ("baseline only, IPP off", "SSE4.1,SSE4.2,AVX,FP16,AVX2,AVX_VNNI,AVX512-SKX,AVX512-CLX",
                     "disabled")]),
    (AVX2, True, [("all dispatched", "", None), ("no AVX2 or above", "AVX2", "sse42"),
                  ("IPP off", "", "disabled"), ("baseline only, IPP off", "SSE4.1,SSE4.2,AVX,FP16,AVX2", "disabled")]),
    (ARM, False, [("all dispatched", "", None), ("baseline only, IPP off", "NEON_DOTPROD,NEON_FP16,NEON_BF16", None)]),
    ("SSE SSE2 SSE3", False, [("all dispatched", "", None)]),
    # A process started under a level sees its features marked off ('?'): the same levels.
    (AVX2.replace("*AVX2", "*AVX2?"), True, [("all dispatched", "", None), ("no AVX2 or above", "AVX2", "sse42"),
                                            ("IPP off", "", "disabled"),
                                            ("baseline only, IPP off", "SSE4.1,SSE4.2,AVX,FP16,AVX2", "disabled")]),
])
def test_levels_follow_the_cpu(line: str, ipp: bool, expected: list[tuple[str, str, str | None]]) -> None:
    found = levels(line, ipp)
    assert [(lv.name, ",".join(lv.disabled), lv.ipp) for lv in found] == expected
    assert "?" not in "".join(dispatched_features(line))


def test_a_level_sets_exactly_its_environment() -> None:
    level = DispatchLevel("no AVX2 or above", ("AVX2", "AVX512-SKX"), "sse42")
    env = level.environ({"OPENCV_CPU_DISABLE": "X", "OPENCV_IPP": "avx2", "PATH": "/bin"})
    assert env == {"OPENCV_CPU_DISABLE": "AVX2,AVX512-SKX", "OPENCV_IPP": "sse42", "PATH": "/bin"}
    assert DispatchLevel("all dispatched").environ({"OPENCV_CPU_DISABLE": "AVX2", "PATH": "/bin"}) == {"PATH": "/bin"}
    assert level.describe() == "OPENCV_CPU_DISABLE=AVX2,AVX512-SKX OPENCV_IPP=sse42"


@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS, ids=lambda lv: lv.name)
def test_warp_and_reference_tests_pass_at_each_level(level: DispatchLevel) -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/test_region_warp.py", "tests/test_reference_mode.py"],
                          cwd=ROOT, env=level.environ(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{level.name} ({level.describe()}):\n{done.stdout[-4000:]}{done.stderr[-2000:]}"
    assert " passed" in done.stdout and "skipped" not in done.stdout


@pytest.mark.slow
def test_each_level_picks_a_scheme_within_the_bound() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "warp_levels.py"), "--json", "--transforms", "12"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [row["level"] for row in rows] == [lv.name for lv in LEVELS]
    assert len({(row["cpu"], row["ipp"]) for row in rows}) == len(rows)  # each level narrows OpenCV
    for row in rows:
        assert row["scheme"] in SCHEMES
        assert row["probe_max_diff"] <= BOUND and row["schemes"][row["scheme"]]["max_diff"] <= BOUND
        log.info("%s: %s (%s on the probe)", row["level"], row["scheme"],
                 "exact" if row["exact_on_probe"] else f"largest difference {row['probe_max_diff']:g}")
