"""Swap quality, measured: identity distance to the source, landmark shift, flicker, seams and
swaps on things that are not faces, for one output clip or for the project's clip set.

One clip (ground truth optional: without it the faces are those dlib finds in the input):

    python tools/eval_quality.py --source photo.png --input in.mp4 --output out.mp4 [--truth in.json]

The suite (clips made from installed pictures, `facestream swap` in fast, default and quality):

    python tools/eval_quality.py --suite [--clips rotate,small] [--configs default] [--json PATH]
    python tools/eval_quality.py --suite --configs default --set detect.refine=false   # a switch off

Swapping at a cadence (`--swap-every N`: each face swapped every N frames, carried between),
against every frame (N = 1, always run: the reference):

    python tools/eval_quality.py --suite --engine dlib --configs default --swap-every 2,4,8
    python tools/eval_quality.py --suite --configs default --swap-every 4,8 --stand-in

The first prints the table's rows per cadence (config `default@4`; the outputs are written
lossless, `--set encode.crf=0`, so the encoder's loss stays out of the PSNR), then for each
N > 1 the face regions' PSNR against every frame's output (the carry's error:
tools/quality/cadence.py says which pixels), the change of identity distance and shift, the
flicker (output / input) and against every frame's, and the issue's goals each misses
(identity within 0.02, shift within 0.01, flicker at most 1.15), then the curve: the means
over the clips per N. `--stand-in` runs the neural engine on synthetic stand-in models in
place of `facestream swap` (tools/quality/standin.py: in memory, PSNR only: its random
weights make no face to measure); `--stand-in identity` carries the target's own face (what
the warp and the tracked points cost alone).

`--per-face` adds a row per face (its identity distance, shift, how turned it is, its width, and
which goals it misses: identity under 0.6, shift under 0.05), to see which faces carry a mean.

Columns: before/after (mean distance of dlib's 128-d embedding to the source photo; under
0.6 is the same person), closer (share of face samples swapped and whose distance went down
by more than 0.02), <0.6 (share under 0.6 after), swapped (share of face samples changed at
all), shift (mean distance of the output face's 68 landmarks from the input face's, in
inter-ocular distances: between the eyes' outer corners, as 300-W measures landmark error),
noise (how far the input's own landmarks move, in the same units, when the face's box moves
by 5% of its size, the mean of six such moves: dlib's points depend on the box they are
given, and facestream's detector boxes differ from the ground truth's by up to 17%; a face with
a high noise has landmarks the shift cannot pin down), flicker (frame-to-frame change inside
the face boxes, output / input),
jitter (the same after moving each frame's predecessor by the motion the input shows in the
face box, so only change that motion does not explain is left: output / input),
seam (gradient along the swapped region's border, output / input at the same pixels),
non-face (changed blobs wholly away from every face, summed over frames), overpaint (share
of an occluder's pixels in front of a face that the swap changed). ArcFace distances are
added when its model file (w600k_r50.onnx) is found by the model catalog.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

import cv2  # noqa: E402

from engines.catalog import locate  # noqa: E402
from engines.dlib.embedder import SAME_PERSON  # noqa: E402
from tools.quality.cadence import CadenceRow, mean_by_cadence, parse_cadences, suite_rows  # noqa: E402
from tools.quality.clips import SCENES  # noqa: E402
from tools.quality.measure import MeasureError, Models, QualityReport, Reference  # noqa: E402
from tools.quality.suite import CONFIGS, run_suite  # noqa: E402
from tools.quality.truth import ClipTruth  # noqa: E402

COLUMNS = (("clip", "clip", "{}"), ("config", "config", "{}"), ("faces", "faces", "{}"),
           ("dist_before", "before", "{:.3f}"), ("dist_after", "after", "{:.3f}"),
           ("closer", "closer", "{:.0%}"), ("under", "<0.6", "{:.0%}"), ("swapped", "swapped", "{:.0%}"),
           ("landmark_shift", "shift", "{:.3f}"), ("shift_noise", "noise", "{:.3f}"), ("flicker", "flicker", "{:.2f}"),
           ("jitter", "jitter", "{:.2f}"),
           ("seam", "seam", "{:.2f}"), ("nonface_swaps", "non-face", "{}"))
OCCLUDER_COLUMNS = (("occluder_overpaint", "overpaint", "{:.0%}"),)
ARC_COLUMNS = (("arc_before", "arc before", "{:.3f}"), ("arc_after", "arc after", "{:.3f}"),
               ("arc_closer", "arc closer", "{:.0%}"))


def table(reports: list[QualityReport]) -> str:
    columns = (COLUMNS + (OCCLUDER_COLUMNS if any(r.occluder_overpaint is not None for r in reports) else ())
               + (ARC_COLUMNS if any(r.arc_after is not None for r in reports) else ()))
    rows = [[title for _, title, _ in columns]]
    for r in reports:
        row = []
        for key, _, fmt in columns:
            value = getattr(r, key)
            row.append("-" if value is None else fmt.format(value))
        rows.append(row)
    return _layout(rows, left=(0, 1))


def _layout(rows: list[list[str]], left: tuple[int, ...]) -> str:
    """Rows of cells as aligned text under a rule: the `left` columns left-aligned, the rest
    right-aligned."""
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) if c in left else cell.rjust(w)
                       for c, (cell, w) in enumerate(zip(row, widths))).rstrip() for row in rows]
    return "\n".join([lines[0], "-" * len(lines[0])] + lines[1:])


FACE_COLUMNS = (("face", "face", "{}"), ("samples", "samples", "{}"), ("dist_before", "before", "{:.3f}"),
                ("dist_after", "after", "{:.3f}"), ("landmark_shift", "shift", "{:.3f}"),
                ("shift_noise", "noise", "{:.3f}"),
                ("turn", "turn", "{:.2f}"), ("width", "width", "{:.0f}"))
SHIFT_GOAL = 0.05  # inter-ocular units: the pose and expression the swap must keep


def face_table(reports: list[QualityReport]) -> str:
    """One row per face of each output: which faces carry a clip's mean over or under a goal
    (identity under dlib's 0.6, shift under 0.05), with how turned and how large they are."""
    rows = [["clip", "config"] + [title for _, title, _ in FACE_COLUMNS] + ["misses"]]
    for r in reports:
        for f in r.per_face:
            misses = [name for name, missed in (("identity", f.dist_after >= SAME_PERSON),
                                                ("shift", f.landmark_shift > SHIFT_GOAL)) if missed]
            rows.append([r.clip, r.config] + [fmt.format(getattr(f, key)) for key, _, fmt in FACE_COLUMNS]
                        + [",".join(misses) or "-"])
    return _layout(rows, left=(0, 1, len(rows[0]) - 1))


CADENCE_COLUMNS = (("clip", "clip", "{}"), ("config", "config", "{}"), ("every", "N", "{}"),
                   ("psnr", "psnr", "{:.1f}"), ("carried_psnr", "carried", "{:.1f}"),
                   ("worst_psnr", "worst", "{:.1f}"), ("worst_frame", "at", "{}"),
                   ("dist_delta", "d after", "{:+.3f}"), ("shift_delta", "d shift", "{:+.3f}"),
                   ("flicker", "flicker", "{:.2f}"), ("flicker_vs_every", "vs N=1", "{:.2f}"),
                   ("jitter_vs_every", "jitter vs N=1", "{:.2f}"), ("swaps", "swaps", "{}"),
                   ("carried", "faces carried", "{}"))
# A suite at several cadences writes its outputs lossless (H.264 at QP 0), so that their PSNR
# against every frame's output reads the carry: at the default crf 20 the encoder's own
# differences between two outputs hold it at 38-45 dB on the suite's clips, whatever N.
LOSSLESS = "encode.crf=0"
CURVE_COLUMNS = (("psnr", "psnr", "{:.1f}"), ("carried_psnr", "carried", "{:.1f}"),
                 ("dist_delta", "d after", "{:+.3f}"), ("shift_delta", "d shift", "{:+.3f}"),
                 ("flicker", "flicker", "{:.2f}"), ("flicker_vs_every", "vs N=1", "{:.2f}"),
                 ("jitter_vs_every", "jitter vs N=1", "{:.2f}"))


def _cell(value: object, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def cadence_table(rows: list[CadenceRow]) -> str:
    """One row per output swapped every N > 1 frames, against its config every frame: the
    face regions' PSNR in dB (all frames, the frames with a carried face where known, the
    worst frame and its number), the deltas, and the goals it misses."""
    used = [c for c in CADENCE_COLUMNS if c[0] in ("clip", "config", "every")
            or any(getattr(r, c[0]) is not None for r in rows)]
    lines = [[title for _, title, _ in used] + ["misses"]]
    for r in rows:
        lines.append([_cell(getattr(r, key), fmt) for key, _, fmt in used] + [",".join(r.misses) or "-"])
    return _layout(lines, left=(0, 1, len(lines[0]) - 1))


def curve_table(rows: list[CadenceRow]) -> str:
    """The curve: per config and N, the share of frames a face is swapped on and the means
    over the clips."""
    curve = mean_by_cadence(rows)
    used = [c for c in CURVE_COLUMNS if any(c[0] in means for means in curve.values())]
    lines = [["config", "N", "swapped"] + [title for _, title, _ in used]]
    for (config, every), means in curve.items():
        lines.append([config, str(every), f"1/{every}"] + [_cell(means.get(key), fmt) for key, _, fmt in used])
    return _layout(lines, left=(0,))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", help="the source photo the output was swapped with")
    p.add_argument("--input", help="the input clip")
    p.add_argument("--output", help="the swapped clip")
    p.add_argument("--truth", help="the input's ground truth (JSON from the clip maker)")
    p.add_argument("--label", help="the config name shown in the table (default: the output's file name)")
    p.add_argument("--suite", action="store_true", help="make the clip set, swap it in each config, measure")
    p.add_argument("--clips", help=f"suite: comma-separated clip names (default all: {', '.join(SCENES)})")
    p.add_argument("--configs", help=f"suite: configs to run (default {','.join(CONFIGS)})")
    p.add_argument("--engine", choices=("auto", "dlib", "neural"),
                   help="suite: facestream swap's --engine (default: its own, auto)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="suite: passed to every `facestream swap` as --set (repeatable): run the suite "
                        "with and without a switch to see what it does, e.g. --set detect.refine=false")
    p.add_argument("--swap-every", dest="cadences", type=_cadences, metavar="N[,N...]",
                   help="suite: run each config at each N (facestream swap --swap-every N; 1, the reference, "
                        "always), labelled config@N, and print what the carry costs against N=1")
    p.add_argument("--stand-in", nargs="?", const="neural", choices=("neural", "identity"),
                   help="suite, with --swap-every: the neural engine on synthetic stand-in models in this "
                        "process instead of facestream swap (PSNR only); identity: each crop swapped for itself")
    p.add_argument("--source-views", action="store_true",
                   help="the several-views measurement: a turning head swapped with one frontal photo and with "
                        "a folder of three views (front, left, right) in each of --configs (default fast,quality), "
                        "measured against the frontal photo (tools/quality/source_views.py)")
    p.add_argument("--workdir", help="suite: folder for the clips and outputs (default: a temp folder)")
    p.add_argument("--make-clips", metavar="DIR", help="only write the clip set (and its ground truth) to DIR")
    p.add_argument("--sample-every", type=int, default=5, help="identity measured every N-th frame (default 5)")
    p.add_argument("--models-dir", help="where to look for ArcFace's w600k_r50.onnx (as facestream does)")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON (per face included; with "
                                                  "--swap-every: {outputs, cadence, curve})")
    p.add_argument("--per-face", action="store_true",
                   help="also print each face's identity, landmark shift, turn and size, and which goals it misses")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    if args.sample_every < 1:
        p.error(f"--sample-every must be >= 1, got {args.sample_every}")
    if not (args.suite or args.make_clips or args.source_views) and not (args.source and args.input and args.output):
        p.error("give --source, --input and --output, or --suite, or --source-views, or --make-clips DIR")
    if args.source_views and (args.suite or args.cadences):
        p.error("--source-views runs its own clip: leave out --suite and --swap-every")
    if args.configs is None:
        args.configs = "fast,quality" if args.source_views else ",".join(CONFIGS)
    if args.cadences and not args.suite:
        p.error("--swap-every runs the suite: give --suite")
    if args.stand_in and not args.cadences:
        p.error("--stand-in measures the carry: give --swap-every")
    if args.stand_in and args.engine:
        p.error("--stand-in runs the neural swapper on its own models: leave out --engine")
    return args


def _cadences(text: str) -> tuple[int, ...]:
    try:
        return parse_cadences(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--swap-every: ")) from exc


def swap_args(args: argparse.Namespace) -> tuple[str, ...]:
    """What the suite adds to every `facestream swap` command line: --engine and each --set;
    with --swap-every, lossless outputs first (LOSSLESS), which a --set of the user's overrides."""
    extra = ["--engine", args.engine] if args.engine else []
    if args.cadences:
        extra += ["--set", LOSSLESS]
    for override in args.overrides:
        extra += ["--set", override]
    return tuple(extra)


def one_clip(args: argparse.Namespace, models: Models) -> list[QualityReport]:
    for flag in ("source", "input", "output", "truth"):
        value = getattr(args, flag)
        if value and not Path(value).is_file():
            raise MeasureError(f"--{flag} {value}: no such file")
    source = cv2.imread(args.source)
    if source is None:
        raise MeasureError(f"--source {args.source}: not a picture")
    try:
        truth = ClipTruth.load(args.truth) if args.truth else None
    except (ValueError, KeyError, TypeError) as exc:
        raise MeasureError(f"--truth {args.truth}: not a clip maker's ground truth ({exc})") from exc
    ref = Reference(models, source, args.input, truth, sample_every=args.sample_every)
    return [ref.compare(args.output, args.label or Path(args.output).name)]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        if args.make_clips:
            from tools.quality.clips import make_clip_set

            names = args.clips.split(",") if args.clips else None
            for files in make_clip_set(args.make_clips, names):
                print(f"{files.video}  {files.truth.name}  {files.source.name}")
            return 0
        arc_path = locate("arcface_w600k_r50", args.models_dir)
        models = Models(arc_path)
        started = time.monotonic()
        rows: list[CadenceRow] = []
        reports: list[QualityReport] = []
        if args.source_views:
            from tools.quality.source_views import run_source_views

            with tempfile.TemporaryDirectory(prefix="facestream-views-") as tmp:
                workdir = Path(args.workdir or tmp)
                workdir.mkdir(parents=True, exist_ok=True)
                reports = run_source_views(workdir, models, tuple(c for c in args.configs.split(",") if c),
                                           args.sample_every, swap_args(args),
                                           on_report=lambda r: print(f"  {r.clip} / {r.config} measured",
                                                                     file=sys.stderr))
        elif args.suite:
            configs = tuple(c for c in args.configs.split(",") if c)
            names = args.clips.split(",") if args.clips else None
            if names:
                unknown = [n for n in names if n not in SCENES]
                if unknown:
                    raise MeasureError(f"--clips: unknown clip {unknown[0]!r}; known: {', '.join(SCENES)}")
            with tempfile.TemporaryDirectory(prefix="facestream-quality-") as tmp:
                workdir = Path(args.workdir or tmp)
                if args.stand_in:
                    from tools.quality.clips import make_clip_set
                    from tools.quality.standin import run_standin

                    rows = run_standin(workdir, models, make_clip_set(workdir, names), args.cadences, configs,
                                       tuple(args.overrides), identity=args.stand_in == "identity",
                                       on_row=lambda r: print(f"  {r.clip} / {r.config} @{r.every} measured",
                                                              file=sys.stderr))
                else:
                    reports = run_suite(workdir, models, names, configs, args.sample_every,
                                        on_report=lambda r: print(f"  {r.clip} / {r.config} measured",
                                                                  file=sys.stderr),
                                        swap_args=swap_args(args), cadences=args.cadences or ())
                    if args.cadences:
                        rows = suite_rows(workdir, reports)
        else:
            reports = one_clip(args, models)
    except MeasureError as exc:
        print(f"eval_quality: {exc}", file=sys.stderr)
        return 2
    if reports:
        print(table(reports))
    if args.per_face and reports:
        print()
        print(face_table(reports))
    if rows:
        if reports:
            print()
        print(cadence_table(rows))
        print()
        print(curve_table(rows))
    what = f"{len(reports)} outputs" if reports else f"{len(rows)} stand-in runs at a cadence"
    print(f"({what} measured in {time.monotonic() - started:.0f} s; ArcFace: "
          f"{arc_path if arc_path else 'model file not found, dlib only'})")
    if args.json:
        outputs = [dataclasses.asdict(r) for r in reports]
        Path(args.json).write_text(json.dumps(outputs if not args.cadences else {
            "outputs": outputs, "cadence": [dataclasses.asdict(r) for r in rows],
            "curve": [{"config": c, "every": n, **means} for (c, n), means in mean_by_cadence(rows).items()]},
            indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
