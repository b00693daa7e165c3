"""The region warp under each OpenCV dispatch level this CPU can select: which scheme each
level picks, whether it is exact, and its largest difference from the full-frame warp.

Each level runs in a fresh process (OPENCV_CPU_DISABLE is read when cv2 is imported). Per
level: the scheme `engines.geometry.region_warp` picks and what its probe measured, then every
candidate against `cv2.warpAffine` on random transforms into a 1280x720 frame (uint8
textures and the float32 white square the paste mask is made from). `--time` also times
inswapper's paste-back of one 110 px face into a 720p frame in this process: on its region
by each scheme, and over the whole frame (the reference mode's).

    .venv/bin/python tools/warp_levels.py [--transforms N] [--json] [--time]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import cv2
import numpy as np

from engines.geometry import region_warp
from engines.models.inswapper import InSwapper
from stream.runtime import cv_dispatch

SIZE = (1280, 720)


def _transform(rng: np.random.Generator) -> np.ndarray:
    angle, scale = rng.uniform(-np.pi, np.pi), rng.uniform(0.3, 3.0)
    c, s = scale * np.cos(angle), scale * np.sin(angle)
    return np.array([[c, -s, rng.uniform(-0.1, 0.9) * SIZE[0]], [s, c, rng.uniform(-0.1, 0.9) * SIZE[1]]])


def measure(transforms: int) -> dict:
    """This process's choice, and every candidate's largest difference and share of
    differing values over `transforms` random warps."""
    choice = region_warp.current()
    rng = np.random.default_rng(5)
    cases = []
    for _ in range(transforms):
        IM = _transform(rng)
        x0, y0 = int(rng.integers(0, SIZE[0] - 64)), int(rng.integers(0, SIZE[1] - 64))
        region = (x0, y0, min(SIZE[0], x0 + int(rng.integers(32, 480))), min(SIZE[1], y0 + int(rng.integers(32, 480))))
        images = [(rng.integers(0, 256, (128, 128, 3), np.uint8), 0.0), (np.full((128, 128), 255, np.float32), 0.0)]
        fulls = [cv2.warpAffine(src, IM, SIZE, borderValue=0.0)[y0:region[3], x0:region[2]] for src, _ in images]
        cases.append((IM, region, images, fulls))
    schemes = {}
    for scheme in region_warp.SCHEMES:
        worst, differing, values = 0.0, 0, 0
        try:
            for IM, region, images, fulls in cases:
                for ours, full in zip(region_warp.warp_affine_region(IM, region, images, scheme=scheme), fulls):
                    d = np.abs(ours.astype(np.float64) - full.astype(np.float64))
                    worst, differing, values = max(worst, float(d.max())), differing + int(np.count_nonzero(d)), \
                        values + d.size
        except Exception as exc:  # noqa: BLE001 - reported, as the product treats it
            schemes[scheme] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        schemes[scheme] = {"max_diff": worst, "differing": differing / max(values, 1)}
    return {"cpu": choice.cpu, "ipp": cv2.ipp.getIppVersion() if cv2.ipp.useIPP() else "off", "opencv": cv2.__version__,
            "scheme": choice.scheme, "exact_on_probe": choice.exact, "probe_max_diff": choice.max_diff,
            "schemes": schemes}


def paste_times(repeat: int) -> dict[str, float]:
    """Median ms of one 110 px face's paste-back (`InSwapper.blend_crop`) into a 720p frame,
    per region-warp scheme within the bound, and over the whole frame."""
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, (720, 1280, 3), np.uint8)
    crop = rng.integers(0, 256, (128, 128, 3), np.uint8)
    s = 128 / 110
    M = np.array([[s, 0.1, -500 * s], [-0.1, s, -300 * s]])  # frame -> crop, a face at (500, 300)
    swapper = InSwapper.__new__(InSwapper)  # only the paste-back is timed: no model file
    swapper.size = swapper.crop_size = 128  # inswapper's crop

    def median_ms() -> float:
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            swapper.blend_crop(frame, crop, M)
            samples.append(time.perf_counter() - start)
        return 1e3 * statistics.median(samples)

    times = {}
    real_current = region_warp.current
    try:
        swapper.full_frame_paste = False
        for scheme in region_warp.SCHEMES:
            if region_warp.probe_difference(scheme) <= region_warp.BOUND:
                region_warp.current = lambda scheme=scheme: region_warp.WarpChoice(scheme, False, 0.0, "")
                times[f"region, {scheme}"] = median_ms()
    finally:
        region_warp.current = real_current
    swapper.full_frame_paste = True
    times["whole frame (reference mode)"] = median_ms()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transforms", type=int, default=40, help="random warps per level (default 40)")
    parser.add_argument("--json", action="store_true", help="print one JSON list instead of the table")
    parser.add_argument("--time", action="store_true", help="also time the paste-back by scheme, in this process")
    parser.add_argument("--repeat", type=int, default=200, help="paste-backs timed per row with --time (default 200)")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a level's own process
    args = parser.parse_args()
    if args.transforms < 1 or args.repeat < 1:
        parser.error(f"--transforms and --repeat must be at least 1, got {args.transforms} and {args.repeat}")
    if args.one:
        print(json.dumps(measure(args.transforms)))
        return 0
    rows = []
    for level in cv_dispatch.current_levels():
        done = subprocess.run([sys.executable, __file__, "--one", "--transforms", str(args.transforms)],
                              env=level.environ(), capture_output=True, text=True)
        if done.returncode != 0:
            print(f"warp_levels: level {level.name!r} failed: {done.stderr.strip().splitlines()[-1:]}",
                  file=sys.stderr)
            return 1
        rows.append({"level": level.name, "env": level.describe(), **json.loads(done.stdout)})
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"OpenCV {rows[0]['opencv']}; region warp bound {region_warp.BOUND} grey levels; "
          f"{args.transforms} random warps into {SIZE[0]}x{SIZE[1]} per level")
    for row in rows:
        chosen = row["schemes"][row["scheme"]]
        print(f"\n{row['level']}: {row['env']}\n  OpenCV: {row['cpu']}\n  IPP: {row['ipp']}")
        print(f"  picks: {row['scheme']} ({'exact' if row['exact_on_probe'] else 'not exact'} on the probe, "
              f"largest difference {row['probe_max_diff']:g}); on the random warps: largest "
              f"{chosen['max_diff']:g}, {100 * chosen['differing']:.4f}% of values differ")
        for scheme, got in row["schemes"].items():
            figure = got.get("error") or f"largest {got['max_diff']:g}, {100 * got['differing']:.4f}% differ"
            print(f"    {scheme:<38} {figure}")
    if args.time:
        print(f"\nPaste-back of one 110 px face into 1280x720, median of {args.repeat} (this process's level):")
        for row, ms in paste_times(args.repeat).items():
            print(f"  {row:<50} {ms:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
