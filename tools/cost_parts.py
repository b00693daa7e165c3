"""Where a frame's time goes: the cost of each part of the per-frame path, in ms a frame.

Runs a bench clip (the 720p demo clip with six faces, or the one-face clip) through the
serial pipeline (one thread, so a part's time is its own and not another thread's wait for
the GIL) with a timer wrapped around each named part, and prints, per part, its calls a
frame, ms a call and ms a frame (inclusive: a part's time holds the parts it calls), and
the process's CPU time in it a frame (every thread's: more than its wall time where OpenCV
or x264 split the work over the cores; on 2 cores the CPU, not the wall, is what the other
stages of a staged run lose). The parts are named by module and attribute; a name this
tree does not have is listed as absent, so the same command runs on an older commit for a
before/after table:

    python tools/cost_parts.py                      # six faces, `fast`, 5 s
    python tools/cost_parts.py --faces 1 --config ""  # one face, the default preset
    git worktree add /tmp/old b653149 && python /tmp/old/../main/tools/cost_parts.py --root /tmp/old

The timers add about a microsecond a call; parts are wrapped once per process.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

# (label, [(module, attribute path), ...]): what the issue asked to be measured. The first
# candidate this tree has is timed (modules moved between commits). The stages' own times come
# from the run's report (its per-stage means), so they are measured the same way in any tree.
PARTS = [
    ("analyse", "tracking (all of it)", [("stream.analysis.tracklets", "Tracker.update"),
                                         ("stream.tracklets", "Tracker.update")]),
    ("analyse", "  detection (HOG + filter)", [("engines.dlib.face_filter", "FaceFilter.forward"),
                                               ("engines.dlib.detector", "DlibHogDetector.forward")]),
    ("analyse", "    HOG detector", [("engines.dlib.detector", "DlibHogDetector.forward")]),
    ("analyse", "      box refinement", [("engines.dlib.detector", "DlibHogDetector.refine_boxes"),
                                            ("engines.dlib.detector", "DlibHogDetector.refine_box")]),
    ("analyse", "    near the faces only", [("engines.dlib.detector", "DlibHogDetector.forward_near")]),
    ("analyse", "    face filter: embedding", [("engines.dlib.face_filter", "FaceFilter.embedding_scores"),
                                                 ("engines.dlib.face_filter", "FaceFilter.embedding_score")]),
    ("analyse", "  landmarks (68 points)", [("engines.dlib.landmarker", "DlibLandmarker.forward_many")]),
    ("analyse", "  optical flow", [("stream.analysis.face_motion", "follow_face")]),
    ("analyse", "  pose smoother (Kalman)", [("stream.analysis.pose_smoother", "PoseShapeSmoother.__call__")]),
    ("swap", "piecewise warp", [("engines.geometry.piecewise_affine", "forward_warp"),
                                ("engines.classic.piecewise_affine", "forward_warp")]),
    ("composite", "occlusion finder", [("engines.classic.occlusion", "find_occluders")]),
    ("composite", "paste (all of it)", [("engines.classic.swapper", "ClassicalSwapper.paste")]),
    ("composite", "  masks", [("engines.classic.blend", "prepare_masks")]),
    ("composite", "  forehead and hair", [("engines.classic.swapper", "keep_target_hair")]),
    ("composite", "  occluder cut", [("engines.classic.occlusion", "cut_occlusion")]),
    ("composite", "  colour transfer", [("engines.classic.blend", "color_matrix"),
                                        ("engines.classic.blend", "transfer_color")]),
    ("composite", "    its matrix applied", [("engines.classic.blend", "apply_color")]),
    # Lip colour and detail are measured at swap.color_every (older trees: every frame, with
    # the measurement and its application in one function).
    ("composite", "  lip colour: measured", [("engines.classic.blend", "lip_shift"),
                                             ("engines.classic.blend", "match_lips")]),
    ("composite", "    its shift applied", [("engines.classic.blend", "shift_lips")]),
    ("composite", "  shading", [("engines.classic.blend", "match_shading")]),
    ("composite", "  detail: measured", [("engines.classic.blend", "detail_mix"),
                                         ("engines.classic.blend", "match_detail")]),
    ("composite", "    its softening applied", [("engines.classic.blend", "soften_by")]),
    ("composite", "  feather blend", [("engines.classic.blend", "blend_feather")]),
]

# engines/ was flat before its wings: an older tree (b653149, say) has the same parts under these
# module names, tried after the current ones.
BEFORE_WINGS = {"engines.dlib.face_filter": "engines.face_filter", "engines.dlib.detector": "engines.dlib_detector",
                "engines.dlib.landmarker": "engines.dlib_landmarker",
                "engines.classic.piecewise_affine": "engines.piecewise_affine",
                "engines.classic.occlusion": "engines.occlusion",
                "engines.classic.swapper": "engines.classical_swapper",
                "engines.classic.blend": "engines.blend"}


def _candidates(candidates: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return candidates + [(BEFORE_WINGS[m], a) for m, a in candidates if m in BEFORE_WINGS]


def _wrap(owner: object, name: str, label: str, totals: dict, calls: dict, cpu: dict) -> bool:
    fn = getattr(owner, name, None)
    if fn is None or getattr(fn, "_cost_parts", False):
        return fn is not None

    @functools.wraps(fn)
    def timed(*args, **kwargs):
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[label] += time.perf_counter() - t0
            cpu[label] += time.process_time() - c0
            calls[label] += 1

    timed._cost_parts = True  # type: ignore[attr-defined]
    setattr(owner, name, timed)
    return True


def install(totals: dict, calls: dict, cpu: dict) -> list[str]:
    """Wrap every part this tree has (a plain function also where other modules imported it
    by name). Returns the labels this tree does not have."""
    absent = []
    for _, label, candidates in PARTS:
        for module, attr in _candidates(candidates):
            try:
                mod = importlib.import_module(module)
            except ImportError:
                continue
            *owners, name = attr.split(".")
            owner = mod
            for o in owners:
                owner = getattr(owner, o, None)
            if owner is None or not _wrap(owner, name, label, totals, calls, cpu):
                continue
            if not owners:
                wrapped = getattr(mod, name)
                for other in list(sys.modules.values()):
                    if other is not mod and getattr(other, "__name__", "").startswith(("stream", "engines")) \
                            and getattr(other, name, None) is getattr(wrapped, "__wrapped__", None):
                        setattr(other, name, wrapped)
            break
        else:
            absent.append(label)
    return absent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faces", choices=["1", "6"], default="6")
    ap.add_argument("--config", default="fast", help="preset (default fast; \"\" for the default)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent),
                    help="the tree to measure (default: this one)")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    sys.path.insert(0, args.root)
    # An editable install of another tree resolves `stream` and `engines` ahead of sys.path.
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]

    import cv2

    from stream.config import load_config
    try:
        from stream.job.runs import run_video
        from stream.job.swap_job import SwapJob
        from stream.media.demo_clips import astronaut, bench_clips
    except ImportError:  # the layout before stream/ had its layers (b653149 and older)
        from stream.demo_media import astronaut, bench_clips
        from stream.pipeline import SwapJob

        def run_video(job, clip, out):
            return job.run_video(clip, out)

    totals: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    cpu: dict[str, float] = defaultdict(float)  # the process's CPU time in each part (every thread's)
    with tempfile.TemporaryDirectory(prefix="fs-parts-") as tmp:
        source = str(Path(tmp) / "source.png")
        cv2.imwrite(source, astronaut())
        (_, clip), = bench_clips(tmp, args.faces, args.seconds)
        cfg = load_config(args.config or None, [*args.overrides, "pipeline.staged=false"])
        job = SwapJob(cfg, [source])
        job.open()
        absent = install(totals, calls, cpu)
        t0, c0 = time.perf_counter(), time.process_time()
        report = run_video(job, clip, str(Path(tmp) / "out.mp4")).report
        wall, run_cpu = time.perf_counter() - t0, time.process_time() - c0
    frames = max(report["frames"], 1)
    print(f"{args.faces} face(s), preset {args.config or 'default'}, serial, {frames} frames, "
          f"{frames / wall:.1f} fps over the run ({1000 * wall / frames:.1f} ms a frame, "
          f"{1000 * run_cpu / frames:.1f} ms of CPU a frame over all threads)")
    print(f"{'part':<34} {'calls/frame':>11} {'ms/call':>8} {'ms/frame':>9} {'CPU ms/frame':>12}")
    rows: dict[str, dict] = {}
    stages = report["stages"]
    for stage in ("decode", "analyse", "swap", "composite", "encode"):
        if stage in stages:
            rows[stage] = {"ms_per_frame": stages[stage]["mean_ms"]}
            print(f"{stage + ' stage':<34} {'':>11} {'':>8} {stages[stage]['mean_ms']:>9.2f}")
        for owner, label, _ in PARTS:
            if owner != stage:
                continue
            shown = "  " + label
            if label in absent:
                print(f"{shown:<34} {'(not in this tree)':>30}")
                continue
            n, t = calls[label], totals[label]
            rows[label.strip()] = {"calls_per_frame": n / frames, "ms_per_call": 1000 * t / n if n else 0.0,
                                   "ms_per_frame": 1000 * t / frames, "cpu_ms_per_frame": 1000 * cpu[label] / frames}
            r = rows[label.strip()]
            print(f"{shown:<34} {r['calls_per_frame']:>11.2f} {r['ms_per_call']:>8.2f} {r['ms_per_frame']:>9.2f} "
                  f"{r['cpu_ms_per_frame']:>12.2f}")
    if args.json:
        summary = {"frames": frames, "wall_s": wall, "cpu_s": run_cpu, "parts": rows}
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
