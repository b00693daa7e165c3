"""The live bench's targets, read off a live run's report (stream.job.runs.run_live): what
tools/bench_live.py prints and tools/gpu_check's live section judges by.

- Processing: the mean time one frame spends in analyse, swap, composite and encode.
- The latency bound: p95 capture-to-sink latency within the processing time plus two
  frame intervals (no standing queue).
- Real time: at least 29.5 fps out of a 30 fps source, at most 1% of its frames dropped,
  and the bound met.
"""
from __future__ import annotations

from typing import Any

SOURCE_FPS = 30.0
MIN_FPS_OUT = 29.5
MAX_DROPPED = 0.01


def processing_ms(rep: dict[str, Any]) -> float:
    stages = rep["stages"]
    return float(sum(stages[k]["mean_ms"] for k in ("analyse", "swap", "composite", "encode") if k in stages))


def p95_bound_ms(rep: dict[str, Any]) -> float:
    return processing_ms(rep) + 2 * 1000.0 / SOURCE_FPS


def dropped_share(rep: dict[str, Any]) -> float:
    return rep["drops"] / rep["frames_in"] if rep["frames_in"] else 0.0


def meets_targets(rep: dict[str, Any]) -> bool:
    p95 = rep["latency"]["p95_ms"]
    return bool(rep["fps"] >= MIN_FPS_OUT and dropped_share(rep) <= MAX_DROPPED
                and p95 is not None and p95 <= p95_bound_ms(rep))
