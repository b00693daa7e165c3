"""How many cores this process may use, and how many threads x264 and the file decoder get
from them.

On a machine of few cores the pipeline's own stage threads keep every core busy, and x264's
frame threads add work (their hand-offs, frames held for reordering): on 2 cores x264
(ultrafast) took 2.9 ms of CPU a 720p frame in its own threads against 2.7 ms in one
(medians of 5). Where the picture is large the encoder is the pipeline's longest stage, and
its threads pay: the `fast` benchmark's 1080p one-face clip ran at 58-66 fps staged with
one codec thread and 64-71 with three, where 720p ran as fast or a little faster with one
(`tools/bench.py`, three rounds: six faces 42.9 against 40.6 fps, one face 102.4 against
100.8). So x264 gets one thread on a machine of FEW_CORES or fewer for pictures up to
SMALL_PICTURE, and chooses for itself otherwise. The file decoder follows the same rule: on
its own its three frame threads take no more CPU than one (tools/bench_io.py prints both
settings' fps and CPU), but in a staged run on 2 cores they are three more threads beside
the stages': `speed_ab.py --base HEAD` (`fast`, three rounds, 2026-12-05), one face 1.07x
and six faces 1.02x with one decoder thread, and 14.1 against 14.8 ms of CPU a one-face
frame over all threads (alternated whole runs).
"""
from __future__ import annotations

import os

FEW_CORES = 4  # at or below this, the stages fill the cores
SMALL_PICTURE = 1280 * 720  # pixels: up to this, a codec in one thread is not the longest stage


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS says, else all)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # macOS, Windows
        return os.cpu_count() or 1


def codec_threads(setting: int, pixels: int) -> int:
    """The encoder's thread count for `setting` and a picture of `pixels`: the setting when given
    (> 0); for 0 (auto), one thread on a machine of FEW_CORES or fewer for a picture up to
    SMALL_PICTURE, else 0 (the codec's own choice)."""
    if setting > 0:
        return setting
    return 1 if usable_cores() <= FEW_CORES and pixels <= SMALL_PICTURE else 0
