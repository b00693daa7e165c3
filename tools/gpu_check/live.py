"""Section e: a live run of the neural set with the masks users ask for live (the mouth kept
by an area mask, occluders by XSeg) on the runtime under test, paced as a camera delivers.

What it answers: with mouth (area) and occlusion masks, does one face keep the live bench's
targets (tools/live_targets.py: >= 29.5 fps out, <= 1% of frames dropped, latency p95 within
the processing time plus two frame intervals)? On our 2 CPU cores the neural swap alone
takes 0.6-1.7 s a face, so this can only be answered on a GPU.

The models: in a real run, the cost-equivalent stand-ins (tools/cost_models.py: SCRFD-10GF,
ArcFace R50, inswapper_128, 2dfan4 and XSeg with the published models' multiply-accumulates
in real layers), so the figures carry over to the real files; in a dry run, the cheap
synthetic models of the same I/O (tools/synth), to exercise the code in seconds. The clip:
one soft blob drifting on black (the stand-in detector answers to it as to a face), at the
frame rate of a camera; the source face: scikit-image's astronaut.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2

from engines.backends.base import RuntimeOptions
from engines.backends.registry import RUNTIMES
from stream.config import load_config
from stream.job.runs import run_live, run_video
from stream.job.swap_job import SwapJob
from stream.media.demo_clips import astronaut, write_clip
from stream.runtime.slot import Slot
from stream.sources.open import open_source
from tools.gpu_check.pipeline import target_frames
from tools.gpu_check.runtimes import make_runtime, options_for
from tools.live_targets import SOURCE_FPS, dropped_share, meets_targets, p95_bound_ms, processing_ms

MASKS = "area,occlusion"
AREAS = "upper-face,lower-face"  # the mouth left out: the target's own mouth is kept
LIVE_KIND = "gpu-check-live"
FPS = int(SOURCE_FPS)


class NullSink:
    """A live output that takes each frame and keeps nothing (the virtual camera's place)."""

    name = "discard"

    def open(self) -> None:
        pass

    def write(self, slot: Slot) -> None:
        pass

    def close(self) -> None:
        pass


def live_models(folder: Path, dry_run: bool) -> Path:
    """The models folder: cost-equivalent stand-ins (a real run) or synthetic ones (dry)."""
    folder.mkdir(parents=True, exist_ok=True)
    if dry_run:
        from tools.gpu_check.models import write_models
        from tools.synth.masks import make_xseg

        write_models(folder)
        make_xseg(folder / "xseg_1.onnx")
    else:
        from tools.cost_models import build_all

        build_all(folder, ["det_10g.onnx", "w600k_r50.onnx", "inswapper_128.onnx", "2dfan4.onnx", "xseg_1.onnx"])
    return folder


def measure_live(folder: Path, kind: str, precision: str, dry_run: bool, size: tuple[int, int],
                 seconds: float, overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    """One live run (after a short warm-up file run) of one face with the area and
    occlusion masks, through a paced clip to a discarding sink."""
    models = live_models(folder / "live-models", dry_run)
    n = max(4, int(round(seconds * FPS)))
    frames = target_frames(n, size, blobs=1)
    clip, warm_clip = folder / "live.mp4", folder / "live-warmup.mp4"
    write_clip(clip, frames, fps=FPS, audio=False)
    write_clip(warm_clip, frames[: min(n, 8)], fps=FPS, audio=False)
    source_photo = folder / "source.png"
    cv2.imwrite(str(source_photo), astronaut())
    options = options_for(kind, precision, dry_run)

    def runtime(path: Any, opts: Any, allocator: Any) -> Any:
        return make_runtime(Path(path), kind, precision, dry_run, allocator)

    RUNTIMES[LIVE_KIND] = runtime
    try:
        cfg = load_config("fast", ["engine=neural", f"models.dir={models}", f"mask.types={MASKS}",
                                   f"mask.areas={AREAS}", *overrides])
        cfg.runtime = RuntimeOptions(kind=LIVE_KIND, device_id=options.device_id, extra=options.extra)
        job = SwapJob(cfg, [str(source_photo)])
        job.open()
        run_video(job, str(warm_clip), str(folder / "live-warmup-out.mp4"))  # first calls paid here
        inner = getattr(job.models.swapper, "swapper", None)  # the InSwapper behind the adapter
        masker = getattr(inner, "masker", None)
        masked_before = masker.model_runs if masker is not None else 0
        source = open_source(str(clip))
        source.open()
        rep = run_live(job, source, NullSink(), "discard").report
    finally:
        RUNTIMES.pop(LIVE_KIND, None)
    stages = rep["stages"]
    return {
        "clip": {"width": size[0], "height": size[1], "frames": n, "fps": FPS},
        "runtime": kind, "precision": precision, "masks": MASKS, "areas": AREAS,
        "models": "synthetic (dry run)" if dry_run else "cost-equivalent (tools/cost_models.py)",
        "engine": rep["engine"], "faces_swapped": rep["faces_swapped"],
        # the live run's: with each swap (swapped off the frame path at live's auto cadence and
        # carried between, stream/stages/carry.py, its model masks are made with it)
        "mask_model_runs": masker.model_runs - masked_before if masker is not None else None,
        "swaps": rep["cadence"]["swaps"] if "cadence" in rep else None,
        "fps_in": round(rep["frames_in"] / (rep["elapsed_s"] or 1.0), 1), "fps_out": rep["fps"],
        "frames_in": rep["frames_in"], "drops": rep["drops"], "dropped_share": round(dropped_share(rep), 4),
        "latency_ms": rep["latency"], "processing_ms": round(processing_ms(rep), 1),
        "p95_bound_ms": round(p95_bound_ms(rep), 1),
        "stages": {name: {"p50_ms": s["p50_ms"], "p95_ms": s["p95_ms"]} for name, s in stages.items()},
        "meets_targets": meets_targets(rep),  # the live bench's (tools/live_targets.py), one face
        "swaps_per_s_a_face": rep["cadence"]["swaps_per_s_a_face"] if "cadence" in rep else None,
    }
