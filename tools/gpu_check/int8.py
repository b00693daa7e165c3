"""Section f: INT8 engines against FP16 ones on TensorRT.

For the cost-equivalent inswapper_128, det_10g and w600k_r50 (tools/cost_models.py: the
published models' multiply-accumulates in real layers), each quantised to a static QDQ file
(`<stem>_int8.onnx`), it builds both engines with our TensorRT runtime
(engines.backends.trt: the float file with fp16 on, the INT8 file as "int8+fp16" on
TensorRT 10, "int8" on 11) and reports:
- engine-alone ms of `run` (host in, host out) for each, p50/p95, and their ratio;
- the INT8 engine's drift against the FP16 one on the same inputs, per output: PSNR (peak:
  the FP16 output's range) and cosine (per sample, the worst).

The INT8 files come from the project's quantiser (engines.quantize.quantizer: `prepare`
then `quantize_file`, as `facestream models quantize NAME --no-budget` writes them), on
random calibration inputs: the drift then says little about real weights, the speed holds.

A dry run puts the synthetic stand-ins (tools/synth) on ONNX Runtime on the CPU, fp32
against INT8, to exercise the code in seconds; its figures are marked `stand_in`.
"""
from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engines.backends.base import InferenceRuntime, RuntimeOptions
from engines.backends.registry import runtime_factory
from tools.gpu_check.models import latency_ms

log = logging.getLogger(__name__)

Feeds = dict[str, np.ndarray]
FILES = ("inswapper_128.onnx", "det_10g.onnx", "w600k_r50.onnx")


def _unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


# Inputs in each model's real range (what its prepare_* step hands the runtime), batch 1.
FEEDS: dict[str, Callable[[np.random.Generator], Feeds]] = {
    "inswapper_128.onnx": lambda rng: {"target": rng.uniform(0, 1, (1, 3, 128, 128)).astype(np.float32),
                                       "source": _unit_rows(rng, 1, 512)},
    "det_10g.onnx": lambda rng: {"input.1": rng.uniform(-1, 1, (1, 3, 640, 640)).astype(np.float32)},
    "w600k_r50.onnx": lambda rng: {"input.1": rng.uniform(-1, 1, (1, 3, 112, 112)).astype(np.float32)},
}


def quantize_ours(src: Path, dst: Path, calibration_inputs: Sequence[Feeds]) -> Path:
    """The project's quantiser (engines.quantize.quantizer) without its budget (`--no-budget`):
    the file prepared, the first layer and the last before each output kept in float, as a
    `models quantize` run starts."""
    from engines.quantize import quantizer as ours

    with tempfile.TemporaryDirectory(prefix="gpu-check-int8-") as tmp:
        prepared, compute, unused = ours.prepare(src, Path(tmp))
        keep = ours.edge_layers(prepared)
        if set(compute) <= set(keep):  # a dry run's one-layer stand-in: quantise it whole
            keep = []
        ours.quantize_file(prepared, dst, calibration_inputs, keep, unused)
    return dst


def write_cost_models(folder: Path, dry_run: bool, reuse: Path | None = None) -> dict[str, Path]:
    """The three float files: cost-equivalent ones (built, or reused from `reuse`), or the
    synthetic stand-ins in a dry run."""
    folder.mkdir(parents=True, exist_ok=True)
    if dry_run:
        from tools.gpu_check.models import write_models

        made = write_models(folder)
        return {f: next(p for p in made.values() if p.name == f) for f in FILES}
    from tools.cost_models import build_all

    found = {f: reuse / f for f in FILES if reuse is not None and (reuse / f).is_file()}
    missing = [f for f in FILES if f not in found]
    return found | (build_all(folder, missing) if missing else {})


def _runtime(path: Path, dry_run: bool, cache: Path, device_id: int) -> InferenceRuntime:
    if dry_run:
        options = RuntimeOptions(kind="onnxruntime", providers="cpu")
    else:  # fp16 on: the float file's engine is FP16, the INT8 file's INT8 (+FP16 for its float layers)
        options = RuntimeOptions(kind="tensorrt", trt_fp16=True, trt_cache_dir=str(cache), device_id=device_id)
    return runtime_factory(options, None)(path)



def drift(reference: dict[str, np.ndarray], other: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Per output: PSNR in dB (peak: the reference's range; inf when equal) and the worst
    per-sample cosine of `other` against `reference`."""
    out: dict[str, dict[str, float]] = {}
    for name, ref in reference.items():
        a = ref.astype(np.float64)
        b = other[name].astype(np.float64)
        mse = float(np.mean((a - b) ** 2))
        peak = float(a.max() - a.min()) or 1.0
        psnr = float("inf") if mse == 0 else 10 * np.log10(peak * peak / mse)
        rows_a, rows_b = a.reshape(len(a), -1), b.reshape(len(b), -1)
        norms = np.linalg.norm(rows_a, axis=1) * np.linalg.norm(rows_b, axis=1)
        cosine = np.where(norms > 0, np.sum(rows_a * rows_b, axis=1) / np.maximum(norms, 1e-30), 1.0)
        out[name] = {"psnr_db": round(psnr, 2), "cosine": round(float(cosine.min()), 6)}
    return out


def measure_int8(folder: Path, dry_run: bool, warmup: int, repeats: int, calibration: int,
                 device_id: int = 0, reuse: Path | None = None, seed: int = 0) -> dict[str, Any]:
    """Per model: the FP16 and INT8 engines' latency, their ratio, and the INT8 engine's drift."""
    from engines.backends.onnx_io import is_quantized

    quantize, made_by = quantize_ours, "engines.quantize.quantizer (edge layers in float, no budget)"
    floats = write_cost_models(folder / "int8-models", dry_run, reuse)
    cache = folder / "int8-engines"
    results: dict[str, Any] = {}
    for file in FILES:
        src = floats[file]
        dst = src.with_name(f"{src.stem}_int8{src.suffix}")
        rng = np.random.default_rng(seed)
        entry: dict[str, Any] = {"file": src.name, "int8_file": dst.name, "ok": False}
        runtimes: list[InferenceRuntime] = []
        try:
            t0 = time.perf_counter()
            quantize(src, dst, [FEEDS[file](rng) for _ in range(calibration)])
            entry["quantize_s"] = round(time.perf_counter() - t0, 2)
            if not is_quantized(dst):
                raise RuntimeError(f"{dst.name} has no Q/DQ nodes: the quantiser wrote a float file")
            feeds = FEEDS[file](np.random.default_rng(seed + 1))  # held out: not a calibration input
            outputs = {}
            for label, path in (("fp16", src), ("int8", dst)):
                t0 = time.perf_counter()
                runtime = _runtime(path, dry_run, cache, device_id)
                runtimes.append(runtime)
                runtime.open()
                entry[f"{label}_open_s"] = round(time.perf_counter() - t0, 2)  # the engine build, first time
                entry[label] = latency_ms(runtime, feeds, warmup, repeats)
                outputs[label] = runtime.run(feeds)
                engine = getattr(runtime, "engine_path", None)
                if engine is not None:
                    entry[f"{label}_engine"] = Path(engine).name
            entry["speedup"] = round(entry["fp16"]["p50_ms"] / entry["int8"]["p50_ms"], 3)
            entry["drift"] = drift(outputs["fp16"], outputs["int8"])
            entry["ok"] = True
        except Exception as exc:  # one model: recorded, the others go on
            text = str(exc).strip()
            entry["error"] = f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
            log.warning("int8 %s: %s", file, entry["error"])
        finally:
            for runtime in runtimes:
                runtime.close()
        results[file] = entry
    if not any(r["ok"] for r in results.values()):  # e.g. no TensorRT here: the section failed, say why
        raise RuntimeError(next(iter(results.values()))["error"])
    return {"runtime": "onnxruntime (cpu, fp32 against int8)" if dry_run else "tensorrt (fp16 against int8)",
            "stand_in": dry_run, "models_kind": "synthetic (dry run)" if dry_run else
            "cost-equivalent (tools/cost_models.py)", "quantizer": made_by, "calibration_inputs": calibration,
            "warmup": warmup, "repeats": repeats, "models": results,
            "all_ok": all(r["ok"] for r in results.values())}
