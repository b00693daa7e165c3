"""Twenty jobs in one process (what `serve` does with its sessions) stay on a plateau: what
one job holds is given back when the next one starts, nothing piles up."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import cv2
import pytest

from stream.media.demo_clips import astronaut
from tests.fixtures import make_clip

pytestmark = pytest.mark.slow  # twenty jobs in turn

ROOT = Path(__file__).resolve().parent.parent
JOBS = 20

SCRIPT = textwrap.dedent("""
    import gc, json, sys
    import psutil
    from stream.config import load_config
    from stream.job.runs import run_video
    from stream.job.swap_job import SwapJob

    source, clip, out, jobs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    overrides = sys.argv[5:]
    proc = psutil.Process()
    after = []
    for i in range(jobs):
        job = SwapJob(load_config(None, overrides), [source])
        job.open()
        report = run_video(job, clip, out).report
        assert report["faces_swapped"] > 0, report
        del job, report
        gc.collect()
        after.append(proc.memory_info().rss / 2 ** 20)
    print(json.dumps(after))
""")


@pytest.mark.parametrize("overrides", [["detect.every=3"], ["detect.every=3", "detect.lag=2"]],
                         ids=["in-line", "detection-thread"])
def test_twenty_jobs_stay_on_a_plateau(tmp_path: Path, overrides: list[str]) -> None:
    # detect.lag: each job's detection on a thread of its own (and its frame buffers).
    source = tmp_path / "source.png"
    face = cv2.resize(astronaut(), (256, 256))  # small: each job finds its source face anew
    cv2.imwrite(str(source), face)
    clip = tmp_path / "clip.mp4"
    make_clip(clip, [face] * 6, n=6)
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(source), str(clip), str(tmp_path / "out.mp4"),
                          str(JOBS), *overrides], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    rss = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(rss) == JOBS
    # The first jobs warm up (allocator arenas, caches); from then on a job leaves nothing
    # behind: the second half's highest is within 12 MB of the first half's (one leaked
    # 720p frame a job would be 55 MB over twenty).
    first, second = rss[: JOBS // 2], rss[JOBS // 2:]
    assert max(second) <= max(first) + 12, rss
    # And no steady climb: the last five jobs end no higher than 8 MB above jobs 6-10.
    assert sum(rss[-5:]) / 5 <= sum(rss[5:10]) / 5 + 8, rss
