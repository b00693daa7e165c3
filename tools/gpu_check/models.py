"""Section c: the synthetic stand-ins of SCRFD, ArcFace, inswapper_128 and GFPGAN (tools/synth:
the real models' names, shapes and value ranges) run through the runtime under test, at
fp32 and fp16 and, for the models that take a batch, at each batch size: latency of
`run` (host arrays in, host arrays out: the copies are part of it) and the largest
difference from ONNX Runtime on the CPU on the same inputs.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engines.backends.base import InferenceRuntime
from tools.gpu_check.runtimes import PRECISIONS, make_runtime
from tools.synth.face_models import make_arcface, make_inswapper
from tools.synth.fan import make_fan
from tools.synth.gfpgan import make_gfpgan
from tools.synth.scrfd import build_scrfd_model

Feeds = Callable[[np.random.Generator, int], dict[str, np.ndarray]]


def write_models(folder: Path) -> dict[str, Path]:
    """The stand-in files under their catalog names (the pipeline finds them there too).
    inswapper, ArcFace and GFPGAN take any batch; SCRFD and 2dfan4 are batch-1 like theirs."""
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "scrfd_10g": build_scrfd_model(folder / "det_10g.onnx", seed=3),
        "arcface_w600k_r50": make_arcface(folder / "w600k_r50.onnx", seed=4),
        "inswapper_128": make_inswapper(folder / "inswapper_128.onnx", seed=5, batch=None),
        "gfpgan_1.4": make_gfpgan(folder / "gfpgan_1.4.onnx", scale=(0.9, 1.0, 1.1), bias=0.02, batch="N"),
        "2dfan4": make_fan(folder / "2dfan4.onnx"),
    }


def _unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@dataclass(frozen=True)
class Case:
    name: str  # the catalog name (write_models' key)
    batched: bool
    feeds: Feeds


# Inputs in each model's real range (what its prepare_* step hands the runtime).
CASES = (
    Case("scrfd_10g", False,
         lambda rng, n: {"input.1": rng.uniform(-1, 1, (1, 3, 640, 640)).astype(np.float32)}),
    Case("arcface_w600k_r50", True,
         lambda rng, n: {"input.1": rng.uniform(-1, 1, (n, 3, 112, 112)).astype(np.float32)}),
    Case("inswapper_128", True,
         lambda rng, n: {"target": rng.uniform(0, 1, (n, 3, 128, 128)).astype(np.float32),
                         "source": _unit_rows(rng, n, 512)}),
    Case("gfpgan_1.4", True,
         lambda rng, n: {"input": rng.uniform(-1, 1, (n, 3, 512, 512)).astype(np.float32)}),
)


def latency_ms(runtime: InferenceRuntime, feeds: dict[str, np.ndarray], warmup: int,
                repeats: int) -> dict[str, float]:
    for _ in range(warmup):
        runtime.run(feeds)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        runtime.run(feeds)
        samples.append((time.perf_counter() - t0) * 1e3)
    samples.sort()
    return {"p50_ms": round(statistics.median(samples), 4),
            "p95_ms": round(samples[min(len(samples) - 1, int(0.95 * len(samples)))], 4)}


def _max_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return max(float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)))) for k in b)


def measure_models(files: dict[str, Path], kind: str, dry_run: bool, batches: Sequence[int],
                   warmup: int, repeats: int, seed: int = 0) -> dict[str, Any]:
    """Per model and precision: latency per batch, and the max abs difference from ONNX
    Runtime on the CPU (at the smallest and the largest batch). A precision that fails
    records its error and the others go on."""
    results: dict[str, Any] = {}
    for case in CASES:
        path = files[case.name]
        sizes = list(batches) if case.batched else [1]
        reference = make_runtime(path, "onnxruntime", "fp32", dry_run=True)
        reference.open()
        rng = np.random.default_rng(seed)
        inputs = {n: case.feeds(rng, n) for n in sizes}
        compare_at = sorted({sizes[0], sizes[-1]})
        expected = {n: reference.run(inputs[n]) for n in compare_at}
        reference.close()
        entry: dict[str, Any] = {"file": path.name, "batches": sizes,
                                 "inputs": {k: list(v.shape[1:]) for k, v in inputs[sizes[0]].items()},
                                 "reference_max_abs": round(max(float(np.abs(v).max())
                                                                for v in expected[compare_at[0]].values()), 4)}
        for precision in PRECISIONS:
            one: dict[str, Any] = {"ok": False}
            runtime: InferenceRuntime | None = None
            try:
                runtime = make_runtime(path, kind, precision, dry_run)
                runtime.open()
                one["latency"] = {str(n): latency_ms(runtime, inputs[n], warmup, repeats) for n in sizes}
                one["max_abs_diff"] = max(_max_diff(runtime.run(inputs[n]), expected[n]) for n in compare_at)
                one["diff_at_batches"] = compare_at
                notes = getattr(runtime, "notes", None)
                if notes:
                    one["converter_notes"] = list(notes)
                one["ok"] = True
            except Exception as exc:  # one precision of one model: recorded, the rest goes on
                one["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            finally:
                if runtime is not None:
                    runtime.close()
            entry[precision] = one
        results[case.name] = entry
    return {"runtime": kind, "warmup": warmup, "repeats": repeats, "models": results,
            "all_ok": all(r[p]["ok"] for r in results.values() for p in PRECISIONS)}
