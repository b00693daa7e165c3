"""How long a reader joining an RTSP camera already playing waits for its first picture.

Starts the tests' RTSP relay (GStreamer's RTSP server, tests/fixtures/rtsp_relay.py; `make
test-deps`), publishes a 1280x720 30 fps clip to it with keyframes `--gop` seconds apart,
then joins it `--joins` times at random moments, with each way of opening in turn:

- `ffmpeg`: FFmpeg's defaults (what `ffmpeg -i rtsp://...` does), through PyAV;
- `old`: the low-delay options `live` used up to 2026-12-04 (with `fflags nobuffer`, 1 s of analysis);
- `live`: `facestream live`'s RTSP input as it is now (stream.sources.rtsp.RtspSource).

For each join: how far the next keyframe was, and the seconds to the first decoded picture.
The first picture cannot come before the next keyframe; a way of opening that waits longer
than that lost a keyframe.

    python tools/rtsp_join.py                  # keyframes 6 s apart, 3 joins each
    python tools/rtsp_join.py --gop 10 --joins 5
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

import av  # noqa: E402
import numpy as np  # noqa: E402

from stream.media.close import close_quietly  # noqa: E402
from stream.media.demo_clips import astronaut, pan_zoom_frames  # noqa: E402
from stream.sources.rtsp import RtspSource  # noqa: E402
from tools.relay import start_relay  # noqa: E402

FPS = 30
OPTIONS = {
    "ffmpeg": {"rtsp_transport": "tcp"},
    "old": {"rtsp_transport": "tcp", "fflags": "nobuffer", "flags": "low_delay", "max_delay": "0",
            "analyzeduration": "1000000", "probesize": "500000"},
}


class Camera(threading.Thread):
    """Publishes `frames` in a loop, in real time, H.264 with a keyframe every `gop` frames
    exactly (no scene cuts), as an IP camera set that way does."""

    def __init__(self, url: str, frames: list[np.ndarray], gop: int) -> None:
        super().__init__(daemon=True, name="camera")
        self.url, self.frames, self.gop = url, frames, gop
        self.sent = 0
        self.stop = threading.Event()

    def run(self) -> None:
        h, w = self.frames[0].shape[:2]
        out = av.open(self.url, "w", format="rtsp", options={"rtsp_transport": "tcp"}, timeout=(5, 5))
        try:
            video = out.add_stream("libx264", rate=FPS)
            video.width, video.height, video.pix_fmt = w, h, "yuv420p"
            video.time_base = Fraction(1, 90000)
            video.options = {"preset": "ultrafast", "tune": "zerolatency", "g": str(self.gop),
                             "keyint_min": str(self.gop), "sc_threshold": "0", "bf": "0", "threads": "1"}
            started = time.monotonic()
            while not self.stop.is_set():
                frame = av.VideoFrame.from_ndarray(self.frames[self.sent % len(self.frames)], format="bgr24")
                frame.pts, frame.time_base = self.sent * 90000 // FPS, Fraction(1, 90000)
                for packet in video.encode(frame):
                    out.mux(packet)
                self.sent += 1
                self.stop.wait(max(0.0, started + self.sent / FPS - time.monotonic()))
        finally:
            close_quietly(out)


def first_picture_pyav(url: str, options: dict[str, str]) -> float:
    started = time.monotonic()
    with av.open(url, options=options, timeout=(30, 30)) as container:
        stream = container.streams.video[0]
        next(container.decode(stream))
    return time.monotonic() - started


def first_picture_live(url: str) -> float:
    source = RtspSource(url, open_timeout=30.0)
    started = time.monotonic()
    try:
        source.open()
        return time.monotonic() - started
    finally:
        source.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gop", type=float, default=6.0, help="seconds between the camera's keyframes")
    ap.add_argument("--joins", type=int, default=3, help="joins for each way of opening")
    a = ap.parse_args()
    gop = round(a.gop * FPS)
    relay, port = start_relay("cam")
    url = f"rtsp://127.0.0.1:{port}/cam"
    camera = Camera(url + "/push", list(pan_zoom_frames(astronaut(), 30)), gop)
    camera.start()
    rows: dict[str, list[tuple[float, float]]] = {"ffmpeg": [], "old": [], "live": []}
    try:
        time.sleep(2.0)
        for _ in range(a.joins):
            for way in rows:
                time.sleep(random.uniform(0, a.gop))
                next_key = (gop - camera.sent % gop) / FPS
                took = first_picture_live(url) if way == "live" else first_picture_pyav(url, OPTIONS[way])
                rows[way].append((next_key, took))
                print(f"  {way:6s} next keyframe in {next_key:4.1f} s: first picture after {took:5.2f} s", flush=True)
    finally:
        camera.stop.set()
        camera.join(10)
        relay.kill()
        relay.wait(10)
    print(f"keyframes {a.gop:g} s apart, 1280x720 {FPS} fps, {a.joins} joins each "
          "(first picture minus the wait for the next keyframe, median; the first picture, median):")
    for way, got in rows.items():
        late = statistics.median(took - key for key, took in got)
        print(f"  {way:6s} {late:+5.2f} s after the next keyframe; {statistics.median(t for _, t in got):5.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
