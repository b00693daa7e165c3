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

numpy's BLAS (OpenBLAS in the PyPI wheels) gets `pipeline.blas_threads` threads, one by
default, set when a job opens (`set_blas_threads`). Its only large products on the
pipeline's path are dlib's embedding network (engines/dlib/resnet.py), run when faces appear;
OpenBLAS's extra thread then spun after each product (for about 0.1 s), beside stages that
already keep both cores busy: 1.1-1.4 ms of CPU a frame (one face or six) in a thread of
its own, gone with one thread. `tools/bench.py`'s `fast` runs, alternated, four rounds
(2026-12-05): with OPENBLAS_NUM_THREADS=1, six faces 55.0 against 51.6 fps and one face
132.7 against 126.7; with this setting (1 against 0), one face 116.7 against 111.4 (a
noisier hour). Where the stages wait for a detection (a live run's first), the network's
faces run on two of our own threads instead (`DlibResNet.embed_many`).
"""
from __future__ import annotations

import os
import threading

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


_BLAS_LOCK = threading.Lock()
_BLAS_OWN: dict[str, int] = {}  # each BLAS library's own thread count, before it was first set


def set_blas_threads(count: int) -> None:
    """Give numpy's BLAS libraries `count` threads, process-wide (like cv2.setNumThreads);
    0 gives each back the count it had before this first set one."""
    from threadpoolctl import ThreadpoolController  # finds the loaded libraries (0.2 ms)

    with _BLAS_LOCK:
        for lib in ThreadpoolController().select(user_api="blas").lib_controllers:
            own = _BLAS_OWN.setdefault(lib.filepath, lib.num_threads)
            lib.set_num_threads(count if count > 0 else own)
