"""The heap of a long-running process (`serve`, `live`): what a finished session leaves behind.

Measured with tools/serve_soak.py (WHIP sessions in turn, 640x480; the issue's report was
about 20 MB a session at its size), two causes:

- A session's own objects outlive it. Its pipeline (rings and their slots, threads), its
  peer connection and aiortc's objects hold each other in reference cycles, which only
  Python's full collection frees, and that runs rarely: the server grew 6 MB a session and
  fell back only every 16-17 sessions. `give_back` runs that collection when a session ends;
  `settle`, once start-up is done, moves the start-up objects (models, modules: 100,000 of
  them) out of its sight, so that it takes milliseconds, not 40 ms.
- What they freed stays with glibc's malloc. A thread that finds the arenas busy gets an
  arena of its own, up to 8 a core, each session brings new threads, and freed memory stays,
  fragmented, in the arena it came from: with the collection and the trim but glibc's
  16 arenas (2 cores) the server still grew by 2.4 MB a session. `bound_arenas` caps the
  arenas (one for every two cores, 1 to 8), and `give_back` returns free pages (malloc_trim).

`live` and `serve` bound the arenas to one on 2 cores, before their threads start. A
thread on an arena of its own grows it afresh: a live run's first detection judges its new
faces on the analysis thread, and with glibc's arenas (or two) the embedding network's
first batch there took 50-95 ms, every buffer a fresh page, against 28 ms on the arena the
start-up warmed (tools/bench_live.py, six faces: 4-6 frames dropped at the start, 2-4 with
one arena). A file's commands (`swap`, `demo`, `benchmark`) keep glibc's arenas: with one,
the default preset's six-face demo clip took 3.9% longer (3.7% with two; all the stages'
threads then allocate from one arena, under its lock) for 14 MB less at the peak, and
`fast` ran at the same speed for 19 MB less (alternated whole-process runs, 2026-12-05).

With all three, 30 sessions in turn kept the server within a few percent of its size after
the fifth. The glibc calls do nothing elsewhere (musl, macOS, Windows), and a
`MALLOC_ARENA_MAX` set in the environment is the user's choice and is left alone.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import sys
from functools import cache

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # mallopt parameter (glibc's malloc.h)
MAX_ARENAS = 8


@cache
def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()
        libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        libc.malloc_trim.argtypes = (ctypes.c_size_t,)
        return libc
    except (OSError, AttributeError):  # not glibc (musl has no gnu_get_libc_version)
        return None


def arenas_for(cores: int | None) -> int:
    """Arenas for a machine of `cores`: one for every two cores, at least 1, at most 8
    (glibc's own bound is 8 a core: 16 on 2 cores, 128 on 16)."""
    return max(1, min(MAX_ARENAS, (cores or 1) // 2))


def bound_arenas(arenas: int | None = None) -> int | None:
    """Bound glibc's malloc arenas to `arenas` (default: `arenas_for` this machine's cores).
    Returns the bound set, or None where nothing was set (not glibc, or MALLOC_ARENA_MAX
    in the environment)."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return None
    libc = _glibc()
    if libc is None:
        return None
    n = arenas or arenas_for(os.cpu_count())
    if libc.mallopt(M_ARENA_MAX, n) != 1:
        log.debug("mallopt(M_ARENA_MAX, %d) refused", n)
        return None
    return n


def settle() -> None:
    """After start-up: what is loaded now (modules, models, the source faces) lives as long as
    the process, so it is moved out of the collector's sight (gc.freeze): the full collection
    `give_back` runs after each session then looks at that session's objects only (a few
    milliseconds, against 40 ms with a server's 100,000 start-up objects)."""
    gc.collect()
    gc.freeze()


def give_back(collect: bool = True) -> bool:
    """Free what a finished session left in reference cycles (`collect`: a full garbage
    collection), then return the heap's free pages to the system (glibc's malloc_trim);
    True when some memory was released."""
    if collect:
        gc.collect()
    libc = _glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False
