"""Media made in code for the tests: H.264 clips (optionally with an AAC tone, optionally VFR).

Nothing here is downloaded; every clip is generated with PyAV from numpy pictures.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from fractions import Fraction
from itertools import islice

import av
import numpy as np

FrameMaker = Callable[[int], np.ndarray]

AUDIO_RATE = 48000
AUDIO_FRAME = 1024  # AAC's frame size
TONE_HZ = 440.0


def pattern_frame(i: int, width: int = 320, height: int = 240, seed: int = 0) -> np.ndarray:
    """A BGR picture that changes smoothly with `i`: gradients, a moving box, mild noise.

    Smooth content keeps H.264's error small, so round-trip pixel checks stay meaningful.
    """
    yy, xx = np.mgrid[0:height, 0:width]
    frame = np.empty((height, width, 3), np.uint8)
    frame[..., 0] = (xx * 255 // max(width - 1, 1) + 3 * i) % 256
    frame[..., 1] = yy * 255 // max(height - 1, 1)
    frame[..., 2] = 128
    size = min(width, height) // 4
    x0 = (7 * i) % max(width - size, 1)
    y0 = (5 * i) % max(height - size, 1)
    frame[y0:y0 + size, x0:x0 + size] = (40, 200, 230)
    rng = np.random.default_rng(seed * 100_003 + i)
    noise = rng.integers(-3, 4, size=frame.shape)
    return np.clip(frame.astype(np.int16) + noise, 0, 255).astype(np.uint8)


def vfr_pts(n: int, seed: int = 0) -> list[int]:
    """Strictly increasing pts in 1/1000 s with irregular gaps (20 to 60 ms), starting at 0."""
    rng = np.random.default_rng(seed)
    gaps = rng.integers(20, 61, size=n)
    pts = np.concatenate([[0], np.cumsum(gaps[:-1])])
    return [int(p) for p in pts]


def _frames(frames: Iterable[np.ndarray] | FrameMaker, n: int) -> Iterator[np.ndarray]:
    if callable(frames):
        return (frames(i) for i in range(n))
    return islice(iter(frames), n)


def make_clip(
    path: str | os.PathLike[str],
    frames: Iterable[np.ndarray] | FrameMaker = pattern_frame,
    n: int = 30,
    fps: int = 30,
    audio: bool = True,
    vfr: bool = False,
    seed: int = 0,
    options: dict[str, str] | None = None,
) -> list[int]:
    """Write `n` BGR frames as H.264 (yuv420p), plus an AAC 440 Hz tone when `audio`.

    `frames` is an iterable of (H, W, 3) uint8 BGR pictures or a callable `i -> picture`.
    CFR clips use time base 1/fps and pts 0..n-1; VFR clips (`vfr=True`) use time base
    1/1000 with irregular gaps (seeded). `options` are container options, e.g.
    {"movflags": "faststart"}. Returns the video pts written, in the codec time base.
    """
    pictures = _frames(frames, n)
    first = next(pictures)
    height, width = first.shape[:2]
    if vfr:
        time_base = Fraction(1, 1000)
        pts_list = vfr_pts(n, seed)
        # The gap after the last frame: the last one lasts as long as the average one.
        last_duration = max(1, round((pts_list[-1] / max(n - 1, 1)))) if n > 1 else 33
    else:
        time_base = Fraction(1, fps)
        pts_list = list(range(n))
        last_duration = 1
    durations = [b - a for a, b in zip(pts_list, pts_list[1:])] + [last_duration]

    with av.open(os.fspath(path), "w", options=options or {}) as out:
        video = out.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        video.time_base = time_base
        video.codec_context.time_base = time_base
        video.options = {"preset": "ultrafast", "crf": "18"}
        tone = None
        if audio:
            tone = out.add_stream("aac", rate=AUDIO_RATE)
            tone.layout = "mono"

        def pictures_all() -> Iterator[np.ndarray]:
            yield first
            yield from pictures

        written = 0
        for picture, pts, duration in zip(pictures_all(), pts_list, durations):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(picture), format="bgr24")
            frame.pts, frame.time_base, frame.duration = pts, time_base, duration
            out.mux(video.encode(frame))
            written += 1
        out.mux(video.encode(None))

        if tone is not None:
            end = (pts_list[written - 1] + durations[written - 1]) * time_base
            total = int(end * AUDIO_RATE)
            t = np.arange(total, dtype=np.float64) / AUDIO_RATE
            samples = (0.3 * np.sin(2 * np.pi * TONE_HZ * t)).astype(np.float32)
            for start in range(0, total, AUDIO_FRAME):
                chunk = samples[start:start + AUDIO_FRAME]
                aframe = av.AudioFrame.from_ndarray(chunk[None, :], format="fltp", layout="mono")
                aframe.sample_rate = AUDIO_RATE
                aframe.pts = start
                aframe.time_base = Fraction(1, AUDIO_RATE)
                out.mux(tone.encode(aframe))
            out.mux(tone.encode(None))
    return pts_list[:written]


def probe(path: str | os.PathLike[str]) -> dict[str, object]:
    """What the tests compare: video pts (in seconds and stream units), durations, audio packets."""
    with av.open(os.fspath(path)) as container:
        vstream = container.streams.video[0]
        vtb = vstream.time_base
        pts = [f.pts for f in container.decode(vstream)]
    with av.open(os.fspath(path)) as container:
        vdur = container.streams.video[0].duration
        result: dict[str, object] = {
            "frames": len(pts),
            "pts": pts,
            "time_base": vtb,
            "times": [p * vtb for p in pts],
            "video_duration": float(vdur * vtb) if vdur else 0.0,
            "duration": (container.duration or 0) / 1e6,
            "audio": None,
        }
        if container.streams.audio:
            astream = container.streams.audio[0]
            packets = [p for p in container.demux(astream) if p.size]
            result["audio"] = {
                "codec": astream.codec_context.name,
                "packets": len(packets),
                "duration": float(astream.duration * astream.time_base) if astream.duration else 0.0,
                "payloads": [bytes(p) for p in packets],
            }
    return result


def write_y4m(path: str | os.PathLike[str], frames: Iterable[np.ndarray], fps: int = 30) -> int:
    """BGR pictures of one (even) size as a YUV4MPEG2 4:2:0 file: what Chromium's
    `--use-file-for-fake-video-capture` plays as a camera (in a loop). Returns the count."""
    import cv2

    n = 0
    with open(path, "wb") as out:
        for picture in frames:
            h, w = picture.shape[:2]
            if n == 0:
                out.write(f"YUV4MPEG2 W{w} H{h} F{fps}:1 Ip A1:1 C420jpeg\n".encode())
            out.write(b"FRAME\n")
            out.write(cv2.cvtColor(picture, cv2.COLOR_BGR2YUV_I420).tobytes())
            n += 1
    return n
