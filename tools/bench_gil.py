"""What waiting for the GIL costs a stage: x264 encoding 720p frames alone, then beside a thread
that runs Python without pause, at each of the given switch intervals.

A stage's C code (x264 here) lets the GIL go while it works, but it needs the GIL back a few
times a frame (to return its packets, to mux them), and CPython hands the GIL from a thread
running Python to a waiting one only every switch interval. The difference between the two
figures is that wait. Staged runs shorten the interval to the runner's STAGED_SWITCH_S
(stream/runtime/runner.py) for this reason.

    python tools/bench_gil.py                       # 60 frames, 5 ms (CPython's default) and 0.5 ms
    python tools/bench_gil.py --frames 120 --intervals 5,1,0.5,0.25
"""
from __future__ import annotations

import argparse
import io
import sys
import threading
import time

import av
import numpy as np

WIDTH, HEIGHT = 1280, 720


def encode_ms(frames: list[av.VideoFrame], count: int) -> float:
    """ms a frame to encode `count` frames (x264 ultrafast, one thread) and mux them in memory."""
    container = av.open(io.BytesIO(), "w", format="mp4")
    stream = container.add_stream("libx264", rate=30)
    stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
    stream.codec_context.thread_count = 1
    stream.options = {"preset": "ultrafast", "crf": "23"}
    start = time.perf_counter()
    for i in range(count):
        frame = frames[i % len(frames)]
        frame.pts = i
        for packet in stream.encode(frame):
            container.mux(packet)
    took = time.perf_counter() - start
    for packet in stream.encode():
        container.mux(packet)
    container.close()
    return took / count * 1e3


def beside_python(frames: list[av.VideoFrame], count: int) -> float:
    """`encode_ms` while another thread runs Python all the time."""
    stop = threading.Event()

    def spin() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    thread = threading.Thread(target=spin, name="python-loop", daemon=True)
    thread.start()
    try:
        return encode_ms(frames, count)
    finally:
        stop.set()
        thread.join()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=60, help="frames encoded a measurement (default 60)")
    ap.add_argument("--intervals", default="5,0.5", help="switch intervals in ms, comma-separated (default 5,0.5)")
    args = ap.parse_args()
    try:
        intervals = [float(v) / 1000.0 for v in args.intervals.split(",")]
    except ValueError:
        ap.error(f"--intervals: comma-separated numbers of ms, not {args.intervals!r}")
    if args.frames < 1 or not intervals or min(intervals) <= 0:
        ap.error("--frames must be at least 1 and every interval above 0")
    rng = np.random.default_rng(0)  # noise: x264's hardest picture, so its work is the same in every run
    frames = [av.VideoFrame.from_ndarray(rng.integers(0, 256, (HEIGHT, WIDTH, 3), np.uint8), format="bgr24")
              .reformat(format="yuv420p") for _ in range(4)]
    saved = sys.getswitchinterval()
    print(f"x264 ultrafast, one thread, {WIDTH}x{HEIGHT} noise, {args.frames} frames a measurement")
    try:
        for interval in intervals:
            sys.setswitchinterval(interval)
            alone = encode_ms(frames, args.frames)
            beside = beside_python(frames, args.frames)
            print(f"switch interval {interval * 1e3:g} ms: alone {alone:.1f} ms a frame, beside a Python "
                  f"thread {beside:.1f} ms a frame ({beside / alone:.2f}x)")
    finally:
        sys.setswitchinterval(saved)
    return 0


if __name__ == "__main__":
    sys.exit(main())
