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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import av  # noqa: E402

from stream.media.demo_clips import astronaut, pan_zoom_frames  # noqa: E402
from stream.sources.rtsp import RtspSource  # noqa: E402
from tests.fixtures.rtsp import Publisher, Relay, free_port, relay_available  # noqa: E402

FPS = 30
OPTIONS = {
    "ffmpeg": {"rtsp_transport": "tcp"},
    "old": {"rtsp_transport": "tcp", "fflags": "nobuffer", "flags": "low_delay", "max_delay": "0",
            "analyzeduration": "1000000", "probesize": "500000"},
}


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
    why = relay_available()
    if why:
        raise SystemExit(f"rtsp_join: {why}")
    gop = round(a.gop * FPS)
    relay = Relay(free_port(), ["cam"])
    relay.start()
    publisher = Publisher(relay.url("cam/push"), list(pan_zoom_frames(astronaut(), 30)), fps=FPS, gop=gop)
    publisher.start()
    rows: dict[str, list[tuple[float, float]]] = {"ffmpeg": [], "old": [], "live": []}
    try:
        time.sleep(2.0)
        for _ in range(a.joins):
            for way in rows:
                time.sleep(random.uniform(0, a.gop))
                next_key = (gop - publisher.sent % gop) / FPS
                took = (first_picture_live(relay.url("cam")) if way == "live"
                        else first_picture_pyav(relay.url("cam"), OPTIONS[way]))
                rows[way].append((next_key, took))
                print(f"  {way:6s} next keyframe in {next_key:4.1f} s: first picture after {took:5.2f} s", flush=True)
    finally:
        publisher.stop()
        relay.stop()
    print(f"keyframes {a.gop:g} s apart, 1280x720 {FPS} fps, {a.joins} joins each "
          "(first picture minus the wait for the next keyframe, median; the first picture, median):")
    for way, got in rows.items():
        late = statistics.median(took - key for key, took in got)
        print(f"  {way:6s} {late:+5.2f} s after the next keyframe; {statistics.median(t for _, t in got):5.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
