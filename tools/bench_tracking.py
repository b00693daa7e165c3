"""Benchmark the analysis stage's tracking: ms per frame of `Tracker.update` (dlib engine,
default config) on quality-suite scenes made in memory, best and median of a few passes.

The analysis stage is the dlib pipeline's busiest: this is what a change to the tracker
costs per frame. Run:

    python tools/bench_tracking.py [--scenes small,occluder] [--repeat 5]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

from engines.classic.swapper import ClassicalOptions  # noqa: E402
from engines.frame_views import FrameViews  # noqa: E402
from engines.registry import build_engines  # noqa: E402
from stream.analysis.tracklets import Tracker  # noqa: E402
from stream.config import Config, ConfigError, load_config  # noqa: E402
from tools.quality.clips import SCENES  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenes", default="small,occluder",
                        help=f"comma-separated scenes (of {', '.join(SCENES)}; default small,occluder)")
    parser.add_argument("--repeat", type=int, default=5, help="passes over each scene (default 5)")
    parser.add_argument("--against", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="also time each scene with this override (as facestream's --set; "
                             "repeatable), passes interleaved, and print the ratio (e.g. detect.refine=false)")
    args = parser.parse_args(argv)
    names = [n for n in args.scenes.split(",") if n]
    unknown = [n for n in names if n not in SCENES]
    if unknown or args.repeat < 1:
        parser.error(f"unknown scene {unknown[0]!r}" if unknown else "--repeat must be >= 1")
    try:
        setups = [("default", Config())] + ([("against", load_config(None, args.against))] if args.against else [])
    except ConfigError as exc:
        parser.error(str(exc))
    built = []
    for label, cfg in setups:
        engines = build_engines("dlib", detect=cfg.detect, swap=ClassicalOptions(), models=cfg.models)
        engines.open()
        built.append((label, cfg, engines))
    for name in names:
        scene = SCENES[name]()
        frames = [scene.frame(i)[0] for i in range(scene.n_frames)]
        passes: dict[str, list[float]] = {label: [] for label, _, _ in built}
        for _ in range(args.repeat):
            for label, cfg, engines in built:  # interleaved: a busy moment hits both
                tracker = Tracker(engines.detector, engines.landmarker, engines.embedder, cfg.detect, cfg.track)
                start = time.perf_counter()
                for i, frame in enumerate(frames):
                    tracker.update(FrameViews(frame), i, i / 30)
                passes[label].append((time.perf_counter() - start) * 1000 / len(frames))
        for label, times in passes.items():
            what = "" if len(built) == 1 else (" (default)" if label == "default" else f" ({' '.join(args.against)})")
            print(f"{name:12s} {len(frames)} frames {frame.shape[1]}x{frame.shape[0]}{what}: "
                  f"{min(times):.1f} ms/frame best, {statistics.median(times):.1f} median of {args.repeat}")
        if len(built) > 1:
            print(f"{name:12s} default / against: {min(passes['default']) / min(passes['against']):.2f}x (best passes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
