"""Benchmark the classical swapper: mean / p95 ms of forward and paste for one ~110 px face.

The source is skimage's astronaut; the target is the same picture on a 1280x720 frame,
rotated a little and scaled so the face spans about 110 px. Run:

    python tools/bench_swapper.py [--repeat 500] [--size 110]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import cv2
import dlib
import numpy as np
from skimage import data

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

from engines.classic.swapper import ClassicalOptions, ClassicalSwapper  # noqa: E402
from engines.dlib.models import model_path  # noqa: E402
from engines.face import Face  # noqa: E402
from engines.geometry.measures import face_turn  # noqa: E402


def astronaut_landmarks() -> tuple[np.ndarray, np.ndarray]:
    """The astronaut picture (BGR) and its 68 dlib landmarks."""
    rgb = data.astronaut()
    detector = dlib.get_frontal_face_detector()
    predictor = dlib.shape_predictor(model_path("landmarks"))
    box = max(detector(rgb, 1), key=lambda r: r.area())
    shape = predictor(rgb, box)
    points = np.array([(p.x, p.y) for p in shape.parts()], np.float32)
    return cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), points


def stats(samples: list[float]) -> str:
    ms = np.array(samples) * 1e3
    return f"mean {ms.mean():6.3f} ms  p95 {np.percentile(ms, 95):6.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=500)
    parser.add_argument("--size", type=float, default=110.0, help="target face size in px")
    parser.add_argument("--threads", type=int, default=-1,
                        help="cv2.setNumThreads (default: leave OpenCV's choice)")
    parser.add_argument("--soft", type=float, default=1.2,
                        help="Gaussian blur (px) of the frame, a softer target than the source "
                             "photo, so that swap.detail has something to match (default 1.2)")
    parser.add_argument("--turned", action="store_true",
                        help="a face turned to its side (the half past the nose squeezed to a "
                             "fifth), where swap.shading takes the frame's light: rows with "
                             "it off and on")
    args = parser.parse_args()
    if args.threads >= 0:
        cv2.setNumThreads(args.threads)

    image, points = astronaut_landmarks()
    span = points.max(axis=0) - points.min(axis=0)
    scale = args.size / float(np.sqrt(span[0] * span[1]))
    centre = points.mean(axis=0)
    matrix = cv2.getRotationMatrix2D((float(centre[0]), float(centre[1])), 8.0, scale)
    matrix[:, 2] += np.array([640.0, 360.0]) - centre  # face centred in a 720p frame
    frame = cv2.warpAffine(image, matrix, (1280, 720), borderMode=cv2.BORDER_REFLECT)
    if args.soft > 0:
        frame = cv2.GaussianBlur(frame, (0, 0), args.soft)
    target = (np.c_[points, np.ones(68)] @ matrix.T).astype(np.float32)
    if args.turned:
        far = target[:, 0] > target[30, 0]
        target[far, 0] = target[30, 0] + 0.2 * (target[far, 0] - target[30, 0])
    face = Face(box=(*target.min(axis=0), *target.max(axis=0)), landmarks=target)

    print(f"cv2 {cv2.__version__}, threads {cv2.getNumThreads()}, face {args.size:.0f} px, "
          f"frame blurred {args.soft} px, turn {face_turn(target):.2f}")
    # detail 0: the source's own sharpness pasted; the default matches the frame's (one or two
    # extra blurs of the patch). shading only acts on a turned face (--turned). lips off: the
    # lips keep the colour the transfer gives them (swap.lip_color=false).
    shading = ClassicalOptions().shading
    # bands: the feather blend in two bands (swap.fine_feather, `quality`'s edges).
    rows = [("feather", 0.0, shading, True), ("feather", 1.0, shading, False), ("feather", 1.0, shading, True),
            ("bands", 1.0, shading, True), ("poisson", 1.0, shading, True)]
    if args.turned:
        rows.insert(1, ("feather", 1.0, 0.0, True))
    for blend, detail, shade, lips in rows:
        bands = {"blend": "feather", "feather": 0.1, "fine_feather": 0.03} if blend == "bands" else {"blend": blend}
        swapper = ClassicalSwapper(ClassicalOptions(detail=detail, shading=shade, lip_color=lips, **bands))
        swapper.open()
        source = swapper.prepare_source(image, points)
        fwd: list[float] = []
        paste: list[float] = []
        work = frame.copy()
        for i in range(args.repeat + 20):
            t0 = time.perf_counter()
            result = swapper.forward(work, face, source)
            t1 = time.perf_counter()
            assert result is not None
            swapper.paste(work, face, result)
            t2 = time.perf_counter()
            if i >= 20:  # warm-up
                fwd.append(t1 - t0)
                paste.append(t2 - t1)
            x0, y0, x1, y1 = result.region
            work[y0:y1, x0:x1] = frame[y0:y1, x0:x1]  # same input every iteration
        region = result.region
        print(f"{blend:8s} detail {detail:.0f} shading {shade:.1f} lips {'on ' if lips else 'off'} "
              f"forward {stats(fwd)} | paste {stats(paste)} | "
              f"region {region[2] - region[0]}x{region[3] - region[1]}")


if __name__ == "__main__":
    main()
