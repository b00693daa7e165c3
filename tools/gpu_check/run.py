"""The GPU check: what our pipeline's GPU path does on a CUDA machine without TensorRT.

Six sections, each failing on its own (its error goes into the JSON, the others still run):
  copies    pinned vs pageable host<->device bandwidth through our allocators
  ring      a ring of pinned slots feeding the device, serial vs overlapped copies
  models    the four stand-in models on the torch runtime (onnx2torch), fp32 and fp16,
            batch 1..16: latency, and the difference from ONNX Runtime on the CPU
  pipeline  the neural pipeline on a generated 1080p clip with that runtime: pipeline fps
            against engine-alone fps (goal >= 0.8), and peak device memory
  live      one face live (a 720p clip paced as a camera) with the mouth (area) and
            occlusion (XSeg) masks, on the cost-equivalent models: fps out, drops and
            latency against the live bench's targets
  int8      the cost-equivalent inswapper_128, det_10g and w600k_r50 quantised to INT8
            (QDQ) files, on TensorRT: engine-alone ms of the INT8 engine against the FP16
            one, and its drift against it (PSNR, cosine); needs TensorRT and cupy

It writes one JSON (rewritten after every section, so a cut-short run keeps what it
measured) and prints a short table. `--dry-run` runs the same code on the CPU with tiny
sizes: numpy in place of cupy, and ONNX Runtime in place of the torch runtime when
PyTorch is not installed.

    python3 tools/gpu_check/run.py --out $OUT/gpu_check.json      # on the GPU machine
    python3 tools/gpu_check/run.py --dry-run --out /tmp/gc.json   # anywhere, in seconds
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

from tools.gpu_check.report import table  # noqa: E402

SECTIONS = ("copies", "ring", "models", "pipeline", "live", "int8")


@dataclass(frozen=True)
class Sizes:
    """How much each section does: the GPU run's, and the dry run's tiny ones."""

    copy_mib: tuple[float, ...]
    copy_repeats: int
    ring_shape: tuple[int, int, int]
    ring_frames: int
    batches: tuple[int, ...]
    model_warmup: int
    model_repeats: int
    clip: tuple[int, int]  # width, height
    seconds: float
    live_clip: tuple[int, int]
    live_seconds: float


GPU_SIZES = Sizes(copy_mib=(1, 16, 256), copy_repeats=10, ring_shape=(2160, 3840, 3), ring_frames=200,
                  batches=(1, 2, 4, 8, 16), model_warmup=5, model_repeats=30, clip=(1920, 1080), seconds=3.0,
                  live_clip=(1280, 720), live_seconds=10.0)
DRY_SIZES = Sizes(copy_mib=(0.25, 1), copy_repeats=3, ring_shape=(72, 128, 3), ring_frames=16,
                  batches=(1, 2), model_warmup=1, model_repeats=2, clip=(320, 180), seconds=0.2,
                  live_clip=(320, 180), live_seconds=0.5)


def _versions() -> dict[str, str | None]:
    from importlib import metadata

    found: dict[str, str | None] = {}
    for name in ("numpy", "torch", "onnx2torch", "onnx", "onnxruntime", "cupy-cuda13x", "cupy-cuda12x",
                 "av", "dlib-bin", "opencv-python", "opencv-python-headless"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return {k: v for k, v in found.items() if v is not None or not k.startswith(("cupy", "opencv"))}


def _write(report: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(report, indent=2, default=str))
    tmp.replace(out)


def _section(report: dict[str, Any], name: str, body: Callable[[], dict[str, Any]], out: Path) -> None:
    print(f"[gpu_check] {name} ...", flush=True)
    t0 = time.perf_counter()
    try:
        entry: dict[str, Any] = {"ok": True, **body()}
    except Exception as exc:  # a section's failure is its result; the next section still runs
        text = str(exc).strip()
        entry = {"ok": False, "error": f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}",
                 "traceback": traceback.format_exc(limit=12)}
        print(f"[gpu_check] {name} failed: {entry['error']}", flush=True)
    entry["seconds"] = round(time.perf_counter() - t0, 2)
    report["sections"][name] = entry
    _write(report, out)


def default_out() -> Path:
    where = os.environ.get("OUT")
    return Path(where) / "gpu_check.json" if where else Path("gpu_check.json")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="the JSON (default: $OUT/gpu_check.json, else ./)")
    ap.add_argument("--dry-run", action="store_true", help="the CPU stand-ins and tiny sizes (no GPU needed)")
    ap.add_argument("--runtime", default="auto", choices=["auto", "torch", "onnxruntime"],
                    help="what runs the models (auto: torch when installed, else ONNX Runtime on the CPU)")
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of: {', '.join(SECTIONS)}")
    ap.add_argument("--seconds", type=float, default=None, help="pipeline clip length (default 3, dry run 0.2)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "fp16"], help="the pipeline's precision")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                    help="config overrides for the pipeline run (e.g. encode.preset=ultrafast)")
    ap.add_argument("--sizes", default="auto", choices=["auto", "gpu", "dry"],
                    help="how much each section does (auto: dry for --dry-run, else gpu)")
    ap.add_argument("--device-id", type=int, default=0)
    ap.add_argument("--work-dir", type=Path, default=None, help="keep the models and clips here (default: a temp dir)")
    args = ap.parse_args(argv)
    wanted = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in SECTIONS]
    if unknown:
        ap.error(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    # Each section imports what it needs when it runs: a package missing on the machine
    # (PyAV, dlib: carried as wheels) fails that section only.
    from tools.gpu_check.device import Backend, open_backend
    from tools.gpu_check.runtimes import choose_kind, describe

    dry_sizes = args.sizes == "dry" or (args.sizes == "auto" and args.dry_run)
    sizes = DRY_SIZES if dry_sizes else GPU_SIZES
    seconds = args.seconds if args.seconds is not None else sizes.seconds
    out = args.out or default_out()
    started = time.perf_counter()
    report: dict[str, Any] = {
        "tool": "facestream tools/gpu_check", "format": 1, "dry_run": args.dry_run,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "sizes": asdict(sizes) | {"seconds": seconds},
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpus": os.cpu_count(), "packages": _versions()},
        "sections": {},
    }
    backend: Backend | None = None
    try:
        backend = open_backend(args.dry_run, args.device_id)
        report["machine"]["device"] = backend.describe()
    except Exception as exc:  # the device sections fail with this; the report still gets written
        report["machine"]["device"] = {"error": str(exc)}
    kind = choose_kind(args.runtime)
    try:
        report["runtime"] = describe(kind, args.dry_run)
    except Exception as exc:
        report["runtime"] = {"kind": kind, "error": str(exc)}

    def need_backend() -> Backend:
        if backend is None:
            raise RuntimeError(f"no device: {report['machine']['device']['error']}")
        return backend

    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = args.work_dir or Path(tmp)
        files: dict[str, Path] = {}

        def models_written() -> dict[str, Path]:
            from tools.gpu_check.models import write_models

            if not files:
                files.update(write_models(work / "models"))
            return files

        def copies() -> dict[str, Any]:
            from tools.gpu_check.copies import measure_copies

            return measure_copies(need_backend(), sizes.copy_mib, sizes.copy_repeats)

        def ring() -> dict[str, Any]:
            from tools.gpu_check.feed import measure_feed

            return measure_feed(need_backend(), sizes.ring_shape, sizes.ring_frames)

        def models() -> dict[str, Any]:
            from tools.gpu_check.models import measure_models

            return measure_models(models_written(), kind, args.dry_run, sizes.batches, sizes.model_warmup,
                                  sizes.model_repeats)

        def pipeline() -> dict[str, Any]:
            from tools.gpu_check.pipeline import measure_pipeline

            return measure_pipeline(need_backend(), work, models_written(), kind, args.precision, args.dry_run,
                                    sizes.clip, seconds, overrides=tuple(args.overrides))

        def live() -> dict[str, Any]:
            from tools.gpu_check.live import measure_live

            return measure_live(work, kind, args.precision, args.dry_run, sizes.live_clip, sizes.live_seconds,
                                overrides=tuple(args.overrides))

        def int8() -> dict[str, Any]:
            from tools.gpu_check.int8 import measure_int8

            return measure_int8(work, args.dry_run, sizes.model_warmup, sizes.model_repeats,
                                calibration=2 if dry_sizes else 16, device_id=args.device_id,
                                reuse=work / "live-models")

        bodies: dict[str, Callable[[], dict[str, Any]]] = {
            "copies": copies, "ring": ring, "models": models, "pipeline": pipeline, "live": live, "int8": int8}
        for name in wanted:
            _section(report, name, bodies[name], out)
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    report["all_ok"] = all(s["ok"] for s in report["sections"].values())
    _write(report, out)
    print(table(report))
    print(f"[gpu_check] wrote {out} in {report['elapsed_s']} s", flush=True)
    return 0 if report["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
