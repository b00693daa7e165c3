"""Benchmark of file I/O: decode fps, encode fps per preset (and with six small faces encoded
finer, `encode.face_qp`), and the colour-conversion paths.

Run: python tools/bench_io.py [--frames 150] [--width 1280] [--height 720]
Makes a 30 fps H.264 clip in a temporary folder, then prints the figures.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import av
import cv2
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

from stream.config import EncodeConfig  # noqa: E402
from stream.media.convert import YuvFramer, copy_yuv420p_planes  # noqa: E402
from stream.runtime.cores import codec_threads, usable_cores  # noqa: E402
from stream.runtime.slot import Pasted, Slot  # noqa: E402
from stream.sinks.file import FileSink  # noqa: E402
from stream.sources.file import FileSource  # noqa: E402
from tools.media import make_clip, pattern_frame  # noqa: E402


def bench_decode(path: Path, threads: int) -> tuple[float, float, int]:
    """fps, CPU ms a frame (every thread's) and the frames on the fast colour path, of
    FileSource with `threads` decoder threads."""
    source = FileSource(path, threads=threads)
    info = source.open()
    slot = Slot(0, {"image": np.empty((info.height, info.width, 3), np.uint8)})
    start, cpu = time.perf_counter(), time.process_time()
    while source.read_into(slot):
        pass
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    source.close()
    return source.frames_read / elapsed, cpu / source.frames_read * 1e3, source._fast_frames


def bench_encode(path: Path, out: Path, preset: str, face_qp: float = 0.0,
                 boxes: tuple[tuple[float, float, float, float], ...] = (), threads: int = 0
                 ) -> tuple[float, float]:
    """fps and CPU ms a frame (every thread's) of FileSink at `preset` with `threads` x264
    threads (0: auto); with `boxes`, each frame comes with those faces pasted."""
    source = FileSource(path)
    info = source.open()
    images = []
    for _ in range(10):  # a few decoded pictures, cycled, so decoding stays out of the figure
        slot = Slot(0, {"image": np.empty((info.height, info.width, 3), np.uint8)})
        if not source.read_into(slot):
            break
        images.append(slot.image)
    source.close()
    sink = FileSink(out, info, EncodeConfig(preset=preset, face_qp=face_qp, threads=threads), audio_from=path)
    sink.open()
    slot = Slot(0, {"image": images[0]})
    slot.payload = Pasted(boxes)
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(info.frames):
        np.copyto(slot.buffers["image"], images[i % len(images)])
        slot.seq, slot.pts, slot.time_base = i, round(i / info.rate / info.time_base), info.time_base
        sink.write(slot)
    sink.close()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    return sink.frames_written / elapsed, cpu / sink.frames_written * 1e3


def bench_decode_paths(path: Path) -> tuple[float, float, float, float]:
    """ms per frame: I420 copy + cv2 vs to_ndarray(bgr24) + copy; max and mean difference."""
    with av.open(str(path)) as container:
        frames = list(container.decode(video=0))
    h, w = frames[0].height, frames[0].width
    i420 = np.empty((h * 3 // 2, w), np.uint8)
    image = np.empty((h, w, 3), np.uint8)
    start = time.perf_counter()
    for frame in frames:
        copy_yuv420p_planes(frame, i420)
        cv2.cvtColor(i420, cv2.COLOR_YUV2BGR_I420, dst=image)
    fast = (time.perf_counter() - start) / len(frames) * 1e3
    start = time.perf_counter()
    for frame in frames:
        np.copyto(image, frame.to_ndarray(format="bgr24"))
    slow = (time.perf_counter() - start) / len(frames) * 1e3
    copy_yuv420p_planes(frames[-1], i420)
    ours = cv2.cvtColor(i420, cv2.COLOR_YUV2BGR_I420).astype(np.int16)
    diff = np.abs(ours - frames[-1].to_ndarray(format="bgr24").astype(np.int16))
    return fast, slow, float(diff.max()), float(diff.mean())


def bench_encode_paths(width: int, height: int, n: int) -> tuple[float, float, float, float]:
    """ms per frame: YuvFramer into its reused VideoFrame (BT.601 limited, then BT.709 full),
    cv2's BGR2YUV_I420 alone (what the framer was before it averaged chroma), and
    from_ndarray(bgr24) + swscale."""
    image = pattern_frame(0, width, height)
    figures = []
    for framer in (YuvFramer(width, height), YuvFramer(width, height, "bt709", True)):
        start = time.perf_counter()
        for _ in range(n):
            framer(image)
        figures.append((time.perf_counter() - start) / n * 1e3)
    fast, bt709 = figures
    i420 = np.empty((height * 3 // 2, width), np.uint8)
    start = time.perf_counter()
    for _ in range(n):
        cv2.cvtColor(image, cv2.COLOR_BGR2YUV_I420, dst=i420)
    cv2_only = (time.perf_counter() - start) / n * 1e3
    start = time.perf_counter()
    for _ in range(n):
        # What the encoder does with a bgr24 frame: swscale into a new yuv420p frame.
        av.VideoFrame.from_ndarray(image, format="bgr24").reformat(format="yuv420p")
    slow = (time.perf_counter() - start) / n * 1e3
    return fast, bt709, cv2_only, slow


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=150)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / "bench.mp4"
        make_clip(clip, lambda i: pattern_frame(i, args.width, args.height), args.frames, fps=30)
        print(f"clip: {args.width}x{args.height}, 30 fps, {args.frames} frames, H.264 + AAC")
        auto = codec_threads(0, args.width * args.height)
        print(f"this machine: {usable_cores()} cores; encode.threads 'auto' gives x264 "
              f"{auto or 'its own choice of'} thread(s) at this size (and the file decoder as many)")
        many = max(2, usable_cores() * 3 // 2)  # what the codecs themselves choose: 1.5 a core
        # Best of 3 each: the machine's drift hits every setting alike.
        for threads, label in ((many, f"{many} threads"), (1, "one thread")):
            runs = [bench_decode(clip, threads) for _ in range(3)]
            fps, cpu, fast = max(runs)[0], min(r[1] for r in runs), runs[-1][2]
            print(f"decode (FileSource, {label}): {fps:7.1f} fps, {cpu:.2f} ms of CPU a frame "
                  f"({fast}/{args.frames} frames on the I420 path)")
        for preset in ("ultrafast", "veryfast"):
            for threads in (many, 1):
                runs = [bench_encode(clip, Path(tmp) / f"out-{preset}.mp4", preset, threads=threads)
                        for _ in range(3)]
                print(f"encode (FileSink, libx264 {preset}, crf 20, audio copied, {threads} thread(s)): "
                      f"{max(r[0] for r in runs):7.1f} fps, {min(r[1] for r in runs):.2f} ms of CPU a frame")
        # Six 48 px faces in a row across the picture's middle, pasted on every frame.
        side, y = 48.0, args.height / 2 - 24
        faces = tuple((args.width * (k + 0.5) / 6 - side / 2, y, args.width * (k + 0.5) / 6 + side / 2, y + side)
                      for k in range(6))
        sized = []
        steps = tuple(sorted({0.0, 2.5, EncodeConfig().face_qp}))  # off, the first default, the default
        for face_qp in steps * 2:  # alternated: the machine's drift hits each
            out = Path(tmp) / f"faces-{face_qp}.mp4"
            sized.append((face_qp, bench_encode(clip, out, "veryfast", face_qp, faces)[0], out.stat().st_size))
        for face_qp in steps:
            runs = [(fps, size) for q, fps, size in sized if q == face_qp]
            print(f"encode (veryfast, six 48 px faces pasted, encode.face_qp={face_qp}): "
                  f"{max(f for f, _ in runs):7.1f} fps (best of 2), {runs[-1][1] / 1e3:.0f} kB")
        fast, slow, dmax, dmean = bench_decode_paths(clip)
        print(f"decode colour: I420 + cv2 {fast:.2f} ms/frame, to_ndarray(bgr24) {slow:.2f} ms/frame "
              f"(x{slow / fast:.1f}); difference max {dmax:.0f}, mean {dmean:.2f} grey levels")
        fast, bt709, cv2_only, slow = bench_encode_paths(args.width, args.height, args.frames)
        print(f"encode colour: YuvFramer (2x2-mean chroma) into a reused frame {fast:.2f} ms/frame "
              f"(BT.709 full {bt709:.2f}; cv2 BGR2YUV_I420 alone {cv2_only:.2f}), "
              f"from_ndarray(bgr24) + swscale {slow:.2f} ms/frame (x{slow / fast:.1f})")


if __name__ == "__main__":
    main()
