"""Throughput of the staged pipeline against one thread doing every stage in turn.

Runs the 720p demo clip (six faces) and a one-face 720p clip through `SwapJob`, staged
and serial, and prints fps, the staged/serial ratio, per-stage p50/p95, capture-to-sink
latency and model calls. The machines here are shared and noisy (the same run varies by
+-20%), so the two modes alternate, `--repeat` times each, in one process: the figures
are medians, and the ratio is the median of the ratios of neighbouring runs.

    python tools/bench.py                 # both clips, 10 s each, the 'fast' preset
    python tools/bench.py --faces 6 --seconds 5 --repeat 5 --config quality
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

import cv2  # noqa: E402

from stream.config import load_config  # noqa: E402
from stream.job.runs import run_video  # noqa: E402
from stream.job.swap_job import SwapJob  # noqa: E402
from stream.media.demo_clips import astronaut, bench_clips  # noqa: E402


def run(config_name: str, overrides: list[str], source: str, clip: str, out: str, staged: bool) -> dict:
    cfg = load_config(config_name, [*overrides, f"pipeline.staged={'true' if staged else 'false'}"])
    job = SwapJob(cfg, [source])
    job.open()
    return run_video(job, clip, out).report


def stage_line(rep: dict) -> str:
    parts = [f"{k} {v['p50_ms']:.1f}/{v['p95_ms']:.1f}" for k, v in rep["stages"].items()]
    return "  ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faces", choices=["1", "6", "both"], default="both")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--config", default="fast", help="preset (default: fast)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each mode, alternating (default 3)")
    ap.add_argument("--json", metavar="PATH", help="also write every report as JSON")
    args = ap.parse_args()

    results = {}
    with tempfile.TemporaryDirectory(prefix="fs-bench-") as tmp:
        source = str(Path(tmp) / "source.png")
        cv2.imwrite(source, astronaut())
        clips = bench_clips(tmp, args.faces, args.seconds)[::-1]  # six faces first
        print(f"preset {args.config} {' '.join(args.overrides)}; 1280x720 30 fps, {args.seconds:g} s clips")
        for label, clip in clips:
            runs: dict[str, list[dict]] = {"staged": [], "serial": []}
            for _ in range(args.repeat):
                for staged in (True, False):
                    mode = "staged" if staged else "serial"
                    out = str(Path(tmp) / "out.mp4")
                    runs[mode].append(run(args.config, args.overrides, source, clip, out, staged))
            results[label] = runs
            fps = {m: [r["fps"] for r in rs] for m, rs in runs.items()}
            ratios = [a / b for a, b in zip(fps["staged"], fps["serial"]) if b]
            st_fps, se_fps = statistics.median(fps["staged"]), statistics.median(fps["serial"])
            faces = runs["staged"][0]
            print(f"\n{label}: staged {st_fps:.1f} fps, serial {se_fps:.1f} fps, "
                  f"ratio {statistics.median(ratios):.2f}x (median of {len(ratios)}; "
                  f"range {min(ratios):.2f}-{max(ratios):.2f})"
                  f"  [{faces['faces_swapped']} faces swapped in {faces['frames']} frames]")
            for mode, rs in runs.items():
                rep = sorted(rs, key=lambda r: r["fps"])[len(rs) // 2]  # the median run
                lat = rep["latency"]
                print(f"  {mode:<7} fps {' '.join(f'{f:.1f}' for f in fps[mode])}")
                print(f"  {'':<7} p50/p95 ms: {stage_line(rep)}")
                print(f"  {'':<7} latency p50 {lat['p50_ms']:.0f} ms, p95 {lat['p95_ms']:.0f} ms;"
                      f" model calls {rep['model_calls']}; peak RSS {rep['peak_rss_mb']:.0f} MB")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
