"""Test helpers around the RTSP relay: start/stop it, publish a clip into it, read from it."""
from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from stream.errors import close_quietly

RELAY = Path(__file__).with_name("rtsp_relay.py")
SYSTEM_PYTHON = "/usr/bin/python3"


def relay_available() -> str | None:
    """None when the relay can run here, else why not."""
    if not Path(SYSTEM_PYTHON).exists():
        return f"{SYSTEM_PYTHON} not found"
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import gi; gi.require_version('GstRtspServer', '1.0'); "
                            "from gi.repository import GstRtspServer"], capture_output=True, text=True)
    if probe.returncode:
        return "GStreamer's RTSP server is not installed (apt-get install python3-gi gir1.2-gst-rtsp-server-1.0)"
    return None


def require_relay() -> None:
    why = relay_available()
    if why is None:
        return
    if os.environ.get("FACESTREAM_REQUIRE_SERVERS"):  # CI installs them: missing is a failure there
        pytest.fail(why)
    pytest.skip(why)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Relay:
    def __init__(self, port: int, names: list[str]) -> None:
        self.port, self.names = port, names
        self.proc: subprocess.Popen[str] | None = None

    def url(self, path: str) -> str:
        return f"rtsp://127.0.0.1:{self.port}/{path}"

    def start(self) -> None:
        self.proc = subprocess.Popen([SYSTEM_PYTHON, str(RELAY), "--port", str(self.port), *self.names],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if line.strip() != "ready":
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise RuntimeError(f"rtsp relay did not start: {line!r} {err[-500:]!r}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(5)
            self.proc = None


class Publisher(threading.Thread):
    """Pushes `frames` (BGR) in a loop at `fps`, in real time, reconnecting when the
    server goes away: an IP camera publishing to the server."""

    def __init__(self, url: str, frames: list[np.ndarray], fps: int = 30) -> None:
        super().__init__(daemon=True, name="test-publisher")
        self.url, self.frames, self.fps = url, frames, fps
        self.stop_event = threading.Event()
        self.sent = 0

    def run(self) -> None:
        h, w = self.frames[0].shape[:2]
        i = 0
        while not self.stop_event.is_set():
            try:
                out = av.open(self.url, "w", format="rtsp", options={"rtsp_transport": "tcp"}, timeout=(3, 3))
            except (av.FFmpegError, OSError):
                self.stop_event.wait(0.3)
                continue
            try:
                stream = out.add_stream("libx264", rate=self.fps)
                stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
                stream.time_base = Fraction(1, 90000)
                # One slice per frame (threads=1): multi-slice frames come out of this relay
                # corrupted (the first slices lost), which would look like failed swaps.
                stream.options = {"preset": "ultrafast", "tune": "zerolatency", "g": str(self.fps), "bf": "0",
                                  "crf": "18", "threads": "1"}
                t0 = time.monotonic()
                n = 0
                while not self.stop_event.is_set():
                    frame = av.VideoFrame.from_ndarray(self.frames[i % len(self.frames)], format="bgr24")
                    frame.pts = n * 90000 // self.fps
                    frame.time_base = Fraction(1, 90000)
                    for packet in stream.encode(frame):
                        out.mux(packet)
                    i += 1
                    n += 1
                    self.sent += 1
                    delay = t0 + n / self.fps - time.monotonic()
                    if delay > 0:
                        self.stop_event.wait(delay)
            except (av.FFmpegError, OSError):
                pass
            finally:
                close_quietly(out)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(10)


class Reader(threading.Thread):
    """Reads an RTSP path (retrying until it is there) and keeps every `keep_every`-th frame."""

    def __init__(self, url: str, keep_every: int = 10) -> None:
        super().__init__(daemon=True, name="test-reader")
        self.url, self.keep_every = url, keep_every
        self.stop_event = threading.Event()
        self.frames = 0
        self.kept: list[np.ndarray] = []

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                c = av.open(self.url, options={"rtsp_transport": "tcp"}, timeout=(3, 3))
            except (av.FFmpegError, OSError):
                self.stop_event.wait(0.3)
                continue
            try:
                for frame in c.decode(video=0):
                    if self.frames % self.keep_every == 0:
                        self.kept.append(frame.to_ndarray(format="bgr24"))
                    self.frames += 1
                    if self.stop_event.is_set():
                        break
            except (av.FFmpegError, OSError):
                pass
            finally:
                c.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(10)
