"""What pixel boost costs: ms per face at each boosted size, on inswapper_128's cost-equivalent
stand-in (tools/cost_models.py: its multiply-accumulates in real conv layers; the real weights
cannot be fetched here) and the CPU's ONNX Runtime.

A boost of k x 128 px runs the model k*k times a face (the tiles), and crops, normalises,
re-assembles and pastes a k x 128 crop. Each size's figure is the median of `--repeat` swaps
of one face in a 720p frame (crop, model calls, decode, paste-back mask and blend):

    python tools/bench_pixel_boost.py                       # 128, 256, 512
    python tools/bench_pixel_boost.py --sizes 128 256 512 1024 --repeat 2
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from engines.backends.base import RuntimeOptions  # noqa: E402
from engines.backends.ort import OrtRuntime  # noqa: E402
from engines.models.inswapper import InSwapper  # noqa: E402
from stream.media.demo_clips import astronaut  # noqa: E402
from tools.cost_models import build_inswapper  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 256, 512], help="pixel boosts to time")
    ap.add_argument("--repeat", type=int, default=3, help="swaps timed per size (median)")
    args = ap.parse_args(argv)
    frame = np.zeros((720, 1280, 3), np.uint8)
    face = astronaut()
    frame[100:100 + face.shape[0], 400:400 + face.shape[1]] = face
    # the astronaut's eyes, nose and mouth corners in the frame (a 512 px picture at 400, 100)
    kps5 = np.array([[197, 210], [293, 210], [245, 262], [205, 310], [285, 310]], np.float32) + [400, 100]
    with tempfile.TemporaryDirectory() as tmp:
        path = build_inswapper(Path(tmp) / "inswapper_128.onnx")
        print(f"inswapper_128 cost-equivalent stand-in, one face in a 1280x720 frame, median of {args.repeat}:")
        base = None
        for size in args.sizes:
            swapper = InSwapper(OrtRuntime(path, RuntimeOptions()), pixel_boost=size)
            swapper.open()
            latent = swapper.prepare_source(np.random.default_rng(0).standard_normal(512).astype(np.float32))
            swapper.forward(frame, kps5, latent)  # warm-up: the session's first run
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                swapper.forward(frame, kps5, latent)
                times.append(1e3 * (time.perf_counter() - start))
            ms = statistics.median(times)
            base = base or ms
            print(f"  pixel boost {size:>4}: {swapper.tiles:>2} model call(s) a face, {ms:8.0f} ms a face "
                  f"({ms / base:.1f}x the model's own size)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
