"""Benchmark of the HDR paths: what the tone map and the 10-bit merge cost a frame beside
the plain 8-bit conversion, and whole swaps of one face clip as SDR H.264, as HDR10 kept
10-bit, and as HDR10 tone-mapped.

Run: python tools/bench_hdr.py [--frames 60] [--repeat 20]
Makes its clips (tools/hdr_clip.py) in a temporary folder, then prints the figures.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import av
import cv2
import numpy as np
from skimage import data

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

from stream.cli.main import main as facestream  # noqa: E402
from stream.media.convert import convert_into  # noqa: E402
from stream.media.deep import DeepFramer, deep_buffers, keep_planes  # noqa: E402
from stream.media.demo_clips import pan_zoom_frames, single_face_picture  # noqa: E402
from stream.media.hdr import dynamic_of  # noqa: E402
from stream.media.tone_map import ToneMapper  # noqa: E402
from tools.hdr_clip import graded, write_hdr_clip, yuv10_frame  # noqa: E402
from tools.media import make_clip  # noqa: E402


def _ms(call: object, repeat: int) -> float:
    """Median milliseconds of `call()` over `repeat` runs (after one warm-up)."""
    call()  # type: ignore[operator]
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()  # type: ignore[operator]
        times.append((time.perf_counter() - t0) * 1000)
    return float(np.median(times))


def steps(picture: np.ndarray, centre: tuple[float, float], width: int, height: int,
          repeat: int) -> list[tuple[str, float]]:
    """Each per-frame step's median ms at one size."""
    bgr = next(pan_zoom_frames(picture, 1, (width, height), zoom=(1.8, 1.8), centre=centre))
    hdr = yuv10_frame(graded(bgr))
    sdr = av.VideoFrame.from_ndarray(bgr, format="bgr24").reformat(format="yuv420p")
    image = np.empty((height, width, 3), np.uint8)
    i420 = np.empty((height * 3 // 2, width), np.uint8)
    mapper = ToneMapper(dynamic_of(hdr), width, height)
    buffers = {k: np.empty(s, t) for k, (s, t) in deep_buffers(height, width).items()}
    framer = DeepFramer(width, height, 9, False)
    convert_into(hdr, buffers["before"], None)
    keep_planes(hdr, buffers["deep"])
    swapped = buffers["before"].copy()
    face = (slice(height // 3, height // 3 + height // 4), slice(width // 3, width // 3 + height // 4))
    swapped[face] = cv2.GaussianBlur(swapped[face], (0, 0), 3)

    def keep() -> None:
        keep_planes(hdr, buffers["deep"])
        np.copyto(image, buffers["before"])

    return [
        ("8-bit yuv420p -> BGR (convert_into, I420 path)", _ms(lambda: convert_into(sdr, image, i420), repeat)),
        ("10-bit PQ -> BGR as it is (convert_into)", _ms(lambda: convert_into(hdr, image, None), repeat)),
        ("10-bit PQ -> BT.709 SDR (ToneMapper)", _ms(lambda: mapper(hdr, image), repeat)),
        ("keep the 10-bit planes (keep_planes + copy)", _ms(keep, repeat)),
        ("merge a swapped face into them (DeepFramer)",
         _ms(lambda: framer.fill(swapped, buffers["before"], buffers["deep"]), repeat)),
    ]


def per_frame(repeat: int) -> None:
    picture, centre = single_face_picture()
    for width, height in ((1280, 720), (1920, 1080)):
        print(f"{width}x{height}, ms a frame (median of {repeat}):")
        for name, ms in steps(picture, centre, width, height, repeat):
            print(f"  {name:48s} {ms:6.2f}")


def whole_runs(frames: int) -> None:
    picture, centre = single_face_picture()
    pictures = list(pan_zoom_frames(picture, frames, (1280, 720), zoom=(1.8, 2.0), centre=centre, sweep=30.0))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        source = folder / "source.png"
        cv2.imwrite(str(source), cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR))
        sdr, hdr = folder / "sdr.mp4", folder / "hdr10.mp4"
        make_clip(sdr, pictures, n=frames, fps=30, audio=False)
        write_hdr_clip(hdr, pictures, fps=30)
        print(f"\nwhole swaps, 1280x720, {frames} frames, one face (fps, the run's own count):")
        for name, clip, extra in (("SDR H.264 in, H.264 out", sdr, []),
                                  ("HDR10 in, HEVC Main10 out (kept)", hdr, []),
                                  ("HDR10 in, --tone-map, H.264 out", hdr, ["--tone-map"])):
            stats = folder / "stats.json"
            t0 = time.perf_counter()
            facestream(["swap", "--source", str(source), "-i", str(clip), "-o", str(folder / "out.mp4"), "-q",
                  "--stats-json", str(stats), *extra])
            wall = time.perf_counter() - t0
            report = json.loads(stats.read_text())
            print(f"  {name:34s} {report['fps']:6.1f} fps  ({wall:.1f} s with loading)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=60, help="frames of the whole-run clips (default 60)")
    parser.add_argument("--repeat", type=int, default=20, help="timed calls of each per-frame step (default 20)")
    args = parser.parse_args()
    cv2.setNumThreads(1)  # as the runs set it (pipeline.cv_threads)
    per_frame(args.repeat)
    whole_runs(args.frames)


if __name__ == "__main__":
    main()
