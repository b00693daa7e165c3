"""Section d: the whole neural pipeline (stream.job: SwapJob and run_video, engine "neural"
on the stand-in models) on a generated clip, its models on the runtime under test.

Figures:
- pipeline fps: the run's own report (decode, analyse, swap, composite, encode, staged);
- engine-alone fps: the same model calls the run made (the same runtimes, the same input
  shapes, each call's count), replayed back to back on one thread with nothing else, so
  frames / (their total time). The ratio pipeline / engine-alone says how well the rest
  of the pipeline keeps the models fed (the goal is 0.8 or more);
- peak device memory: PyTorch's peak allocation, cupy's pool, and the device's used
  memory sampled during the run (the CUDA context included).

A short warm-up run on the first frames comes first, so neither figure pays for first
calls (cuDNN's set-up, the first CUDA launches).
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from engines.backends.base import HostAllocator, InferenceRuntime, RuntimeOptions
from engines.backends.registry import RUNTIMES
from stream.config import load_config
from stream.job.runs import run_video
from stream.job.swap_job import SwapJob
from stream.media.demo_clips import astronaut, write_clip
from tools.gpu_check.device import Backend
from tools.gpu_check.runtimes import make_runtime, options_for

GOAL = 0.8
RECORDED_KIND = "gpu-check-recorded"


class CallLog:
    """Counts each model call by (runtime, input shapes and types, outputs asked for) and
    keeps the first call's inputs of each, to replay them."""

    def __init__(self) -> None:
        self.on = False
        self.counts: dict[tuple[Any, ...], int] = {}
        self.samples: dict[tuple[Any, ...], tuple[InferenceRuntime, dict[str, np.ndarray], list[str] | None]] = {}
        self._lock = threading.Lock()

    def add(self, runtime: InferenceRuntime, feeds: dict[str, np.ndarray], outputs: list[str] | None) -> None:
        key = (id(runtime), tuple((k, v.shape, v.dtype.str) for k, v in feeds.items()), tuple(outputs or ()))
        with self._lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            if key not in self.samples:
                self.samples[key] = (runtime, {k: np.array(v, copy=True) for k, v in feeds.items()}, outputs)

    def replay(self) -> dict[str, Any]:
        """Every recorded call again, back to back: total seconds, and milliseconds per model file."""
        per_model: dict[str, float] = {}
        calls: dict[str, int] = {}
        total = 0.0
        for key, count in self.counts.items():
            runtime, feeds, outputs = self.samples[key]
            t0 = time.perf_counter()
            for _ in range(count):
                runtime.run(feeds, outputs)
            spent = time.perf_counter() - t0
            total += spent
            name = runtime.path.name
            per_model[name] = per_model.get(name, 0.0) + spent
            calls[name] = calls.get(name, 0) + count
        return {"seconds": total, "per_model_s": per_model, "calls": calls}


class RecordedRuntime:
    """A runtime that logs its calls to a CallLog while the log is on (else a pass-through)."""

    def __init__(self, inner: InferenceRuntime, log: CallLog) -> None:
        self.inner = inner
        self.log = log

    def __getattr__(self, name: str) -> Any:  # path, calls, inputs, outputs, is_open, open, close, ...
        return getattr(self.inner, name)

    def run(self, feeds: dict[str, np.ndarray], outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        if self.log.on:
            self.log.add(self.inner, feeds, outputs)
        return self.inner.run(feeds, outputs)

    def run_into(self, feeds: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs into the caller's arrays where the runtime can write there (the optional
        capability a swap stage may use); otherwise a plain run, whose own arrays come back,
        which that capability allows. Logged either way (replayed as a plain run)."""
        if self.log.on:
            self.log.add(self.inner, feeds, list(outputs))
        into = getattr(self.inner, "run_into", None)
        if into is not None:
            return into(feeds, outputs)
        return self.inner.run(feeds, list(outputs))


def target_frames(n: int, size: tuple[int, int], blobs: int = 3) -> list[np.ndarray]:
    """`n` frames of `size` (w, h): `blobs` soft blobs drifting on black.

    The stand-in detector is not a face detector: it answers to local contrast, so a
    textured picture gives it dozens of boxes a frame (and a grey frame one more row
    along the letterbox padding). Soft blobs on black give it a few boxes a frame
    (3 to 5 at 1080p), which is the load of a few faces."""
    w, h = size
    side = max(8, h // 8)
    sigma = 15.0 * w / 1920
    pad = int(3 * sigma) + 1
    sprite = np.zeros((side + 2 * pad, side + 2 * pad, 3), np.uint8)
    cv2.circle(sprite, (pad + side // 2, pad + side // 2), side // 2, (60, 90, 180), -1)
    sprite = np.asarray(cv2.GaussianBlur(sprite, (0, 0), sigma), np.uint8)
    sh, sw = sprite.shape[:2]
    frames = []
    for i in range(n):
        frame = np.zeros((h, w, 3), np.uint8)
        for j in range(blobs):
            x = int((j + 0.5) * w / blobs - sw / 2 + (i % 60 - 30) * w / 1920)
            y = int(h / 2 - sh / 2 + (j - (blobs - 1) / 2) * h / 8)
            x, y = min(max(0, x), max(0, w - sw)), min(max(0, y), max(0, h - sh))
            region = frame[y:y + sh, x:x + sw]
            np.maximum(region, sprite[:region.shape[0], :region.shape[1]], out=region)
        frames.append(frame)
    return frames


def _peak_sampler(backend: Backend, stop: threading.Event, peak: list[float]) -> None:
    while not stop.is_set():
        used = backend.memory().get("device_used_mib")
        if used is not None:
            peak[0] = max(peak[0], used)
        stop.wait(0.05)


def measure_pipeline(backend: Backend, folder: Path, files: dict[str, Path], kind: str, precision: str,
                     dry_run: bool, size: tuple[int, int], seconds: float, fps: int = 30,
                     overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    """One measured run of the neural pipeline on a generated clip (after a short warm-up run)."""
    n = max(2, int(round(seconds * fps)))
    frames = target_frames(n, size)
    clip = folder / "target.mp4"
    warm_clip = folder / "warmup.mp4"
    write_clip(clip, frames, fps=fps, audio=False)
    write_clip(warm_clip, frames[: min(n, 8)], fps=fps, audio=False)
    source = folder / "source.png"
    cv2.imwrite(str(source), astronaut())

    log = CallLog()
    options = options_for(kind, precision, dry_run)

    def recorded(path: str | os.PathLike[str], opts: RuntimeOptions,
                 allocator: HostAllocator | None) -> InferenceRuntime:
        return RecordedRuntime(make_runtime(Path(path), kind, precision, dry_run, allocator), log)

    RUNTIMES[RECORDED_KIND] = recorded
    torch = _torch_if_cuda(kind, dry_run)
    try:
        cfg = load_config(None, ["engine=neural", f"models.dir={files['inswapper_128'].parent}", *overrides])
        cfg.runtime = RuntimeOptions(kind=RECORDED_KIND, device_id=options.device_id, extra=options.extra)
        if torch is not None:
            torch.cuda.reset_peak_memory_stats()
        job = SwapJob(cfg, [str(source)])
        job.open()
        run_video(job, str(warm_clip), str(folder / "warmup_out.mp4"))
        stop, peak = threading.Event(), [0.0]
        sampler = threading.Thread(target=_peak_sampler, args=(backend, stop, peak), daemon=True)
        sampler.start()
        log.on = True
        try:
            result = run_video(job, str(clip), str(folder / "out.mp4"))
        finally:
            log.on = False
            stop.set()
            sampler.join(timeout=5)
        memory = backend.memory()
        replay = log.replay()
    finally:
        RUNTIMES.pop(RECORDED_KIND, None)
    rep = result.report
    engine_fps = rep["frames"] / replay["seconds"] if replay["seconds"] > 0 else None
    ratio = rep["fps"] / engine_fps if engine_fps else None
    stages = {name: {"p50_ms": s["p50_ms"], "p95_ms": s["p95_ms"]} for name, s in rep["stages"].items()}
    slowest = max(stages, key=lambda name: stages[name]["p50_ms"]) if stages else None
    return {
        "clip": {"width": size[0], "height": size[1], "frames": n, "fps": fps},
        "runtime": kind, "precision": precision, "allocator": job.allocator.name,
        "engine": rep["engine"], "frames": rep["frames"], "faces_swapped": rep["faces_swapped"],
        "frames_with_faces": rep["frames_with_faces"], "model_calls": rep["model_calls"],
        "pipeline_fps": rep["fps"],
        "engine_alone_fps": round(engine_fps, 1) if engine_fps else None,
        "engine_ms_per_frame": {name: round(s * 1e3 / max(1, rep["frames"]), 3)
                                for name, s in replay["per_model_s"].items()},
        "replayed_calls": replay["calls"],
        "ratio": round(ratio, 3) if ratio is not None else None, "goal": GOAL,
        "meets_goal": bool(ratio is not None and ratio >= GOAL),
        "stages": stages, "slowest_stage": slowest, "latency_ms": rep["latency"],
        "peak_memory": {
            "torch_max_allocated_mib": (round(torch.cuda.max_memory_allocated() / 2**20, 1)
                                        if torch is not None else None),
            "cupy_pool_used_mib": memory["cupy_pool_used_mib"],
            "cupy_pool_total_mib": memory["cupy_pool_total_mib"],
            "device_used_peak_mib": peak[0] or memory["device_used_mib"],
            "host_peak_rss_mb": rep["peak_rss_mb"],
        },
    }


def _torch_if_cuda(kind: str, dry_run: bool) -> Any:
    if kind != "torch" or dry_run:
        return None
    import torch

    return torch if torch.cuda.is_available() else None
