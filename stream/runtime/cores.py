"""How many cores this process may use, and how many threads a codec gets from them.

On a machine of few cores the pipeline's own stage threads keep every core busy, and the
H.264 decoder's and x264's frame threads only add work: their hand-offs, and frames held
for reordering. On 2 cores, decoding the one-face 720p bench clip took 1.6 ms of CPU a
frame with FFmpeg's threads against 1.3 ms in one (medians of 6), and x264 (ultrafast) 2.9
against 2.7 ms (medians of 5); the pictures are the same. tools/bench_io.py prints both
settings. With more cores the codecs' own threads are free to use.
"""
from __future__ import annotations

import os

FEW_CORES = 4  # at or below this, the stages fill the cores: a codec gets one thread


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS says, else all)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # macOS, Windows
        return os.cpu_count() or 1


def codec_threads(setting: int) -> int:
    """A codec's thread count for `setting`: itself when given (> 0); for 0 (auto), one
    thread on a machine of FEW_CORES or fewer, else 0 (the codec's own choice)."""
    if setting > 0:
        return setting
    return 1 if usable_cores() <= FEW_CORES else 0
