"""Live behaviour under real-time input: a generated 1280x720 30 fps clip, paced as a
camera would deliver it, through the live pipeline (drop-oldest rings, adaptive detection)
to a virtual-camera sink (pyvirtualcam's backend registry with a backend that discards,
so the I420 conversion a real loopback device needs is still paid).

Prints, per clip: fps in and out, drops, capture-to-sink latency p50/p95, the per-frame
processing time (the mean time of analyse + swap + composite + sink for one frame), and
the target: p95 latency <= processing + two frame intervals (no standing queue).

    python tools/bench_live.py                  # one face and six faces, 10 s each
    python tools/bench_live.py --faces 1 --seconds 20 --config quality
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import pyvirtualcam  # noqa: E402

from stream.config import load_config  # noqa: E402
from stream.demo_media import astronaut, bench_clips  # noqa: E402
from stream.live import LiveSink, open_source  # noqa: E402
from stream.pipeline import SwapJob  # noqa: E402
from stream.sinks.live import VirtualCameraSink  # noqa: E402


class DiscardingCamera:
    """A virtual camera that drops what it is sent (no loopback device on this machine)."""

    def __init__(self, *, width: int, height: int, fps: float, fourcc: int, device: str | None, **kw) -> None:
        self.fourcc = fourcc

    def send(self, frame: np.ndarray) -> None:
        pass

    def close(self) -> None:
        pass

    def device(self) -> str:
        return "discard"

    def native_fourcc(self) -> int:
        return self.fourcc


def run(job: SwapJob, clip: str) -> dict:
    source = open_source(clip)
    info = source.open()
    sink = VirtualCameraSink(info.width, info.height, float(info.rate), backend="bench-discard")
    return job.run_live(source, LiveSink([sink]), "vcam").report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faces", choices=["1", "6", "both"], default="both")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--config", default="fast", help="preset (default: fast)")
    ap.add_argument("--json", metavar="PATH", help="also write the reports as JSON")
    args = ap.parse_args()
    pyvirtualcam.register_backend("bench-discard", DiscardingCamera)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        source = str(Path(tmp) / "astronaut.png")
        cv2.imwrite(source, astronaut())
        job = SwapJob(load_config(args.config, []), [source])
        job.open()
        clips = bench_clips(tmp, args.faces, args.seconds)
        print(f"1280x720 30 fps clip paced in real time -> virtual camera (discarding); preset {args.config}")
        for name, clip in clips:
            rep = run(job, clip)
            results[name] = rep
            st = rep["stages"]
            processing = sum(st[k]["mean_ms"] for k in ("analyse", "swap", "composite", "encode") if k in st)
            interval = 1000.0 / 30
            lat = rep["latency"]
            bound = processing + 2 * interval
            print(f"{name:>9}: in {rep['frames_in'] / rep['elapsed_s']:.1f} fps, out {rep['fps']:.1f} fps, "
                  f"drops {rep['drops']} of {rep['frames_in']}; latency p50 {lat['p50_ms']:.0f} ms "
                  f"p95 {lat['p95_ms']:.0f} ms; processing {processing:.0f} ms/frame; "
                  f"target p95 <= {bound:.0f} ms: {'met' if lat['p95_ms'] <= bound else 'NOT met'}; "
                  f"detection every {rep['live']['detect_every_base']}-{rep['live']['detect_every_max']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
