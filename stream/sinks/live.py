"""Live sinks: a virtual camera (pyvirtualcam), an RTSP push (libx264, zero latency) and a
preview window. `stream.live.LiveSink` feeds several at once (one of these plus `--record`)."""
from __future__ import annotations

import logging
import os
import time
from fractions import Fraction
from typing import Any

import av
import cv2
import numpy as np

from stream.config import EncodeConfig
from stream.errors import SinkError, StopRequested, close_quietly, reason_of
from stream.sinks.yuv import YuvFramer
from stream.slot import Slot

log = logging.getLogger(__name__)

RTP_TIME_BASE = Fraction(1, 90000)
VCAM_HINT = ("load one with: sudo modprobe v4l2loopback exclusive_caps=1 card_label=facestream "
             "(package v4l2loopback-dkms)")


class VirtualCameraSink:
    """Frames to a virtual camera (v4l2loopback on Linux, OBS's on Windows/macOS).

    Frames go out as I420, the format v4l2loopback hands to applications, converted by cv2
    into one reused buffer, so the driver passes them through; a backend that refuses I420
    gets BGR. `backend`/`device` choose a particular one (pyvirtualcam's names).
    """

    def __init__(self, width: int, height: int, fps: float, device: str | None = None,
                 backend: str | None = None) -> None:
        self.width, self.height, self.fps = width, height, fps
        self.device, self.backend = device, backend
        self.frames_written = 0
        self._cam: Any = None
        self._i420: np.ndarray | None = None

    def open(self) -> None:
        try:
            import pyvirtualcam
        except ImportError as exc:
            raise SinkError("virtual camera: pyvirtualcam is not installed (pip install pyvirtualcam)") from exc
        errors = []
        for fmt in (pyvirtualcam.PixelFormat.I420, pyvirtualcam.PixelFormat.BGR):
            try:
                self._cam = pyvirtualcam.Camera(self.width, self.height, self.fps, fmt=fmt,
                                                device=self.device, backend=self.backend,
                                                print_fps=False)
                break
            except (RuntimeError, ValueError) as exc:
                errors.append(reason_of(exc))
        if self._cam is None:
            reason = errors[0] if errors else "unknown"
            if "loopback device found" in reason.lower():
                raise SinkError(f"virtual camera: no v4l2loopback device found; {VCAM_HINT}")
            if "no backend" in reason.lower() or "device" in reason.lower():
                raise SinkError(f"virtual camera: none available ({reason}); {VCAM_HINT}")
            raise SinkError(f"virtual camera: cannot be opened ({reason})")
        if self._cam.fmt == pyvirtualcam.PixelFormat.I420:
            self._i420 = np.empty((self.height * 3 // 2, self.width), np.uint8)
        log.info("virtual camera: %s (%s)", self._cam.device, self._cam.fmt.name)

    @property
    def name(self) -> str:
        return f"virtual camera {self._cam.device if self._cam is not None else ''}".strip()

    def write(self, slot: Slot) -> None:
        if self._cam is None:
            raise SinkError("virtual camera: write before open()")
        if self._i420 is not None:
            cv2.cvtColor(slot.image, cv2.COLOR_BGR2YUV_I420, dst=self._i420)
            self._cam.send(self._i420)
        else:
            self._cam.send(slot.image)
        self.frames_written += 1

    def close(self) -> None:
        cam, self._cam = self._cam, None
        if cam is not None:
            cam.close()


class RtspSink:
    """Pushes H.264 to an RTSP server (ANNOUNCE/RECORD over TCP): libx264 with
    `tune=zerolatency`, no B-frames, a keyframe at least every 2 s, timestamps from the
    frames' capture clock, one slice per frame (zerolatency's sliced threads cut each
    frame into slices, which not every server relays intact: through GStreamer's RTSP
    server the first slices of each frame were lost; one encoder thread adds no delay).

    If the server goes away mid-run, frames are dropped (and counted) while it retries
    with backoff; the run goes on. Only the first connection must succeed.
    """

    BACKOFF = (0.5, 1.0, 2.0, 4.0)

    def __init__(self, url: str, width: int, height: int, fps: float, encode: EncodeConfig,
                 transport: str = "tcp", preset: str = "veryfast") -> None:
        self.url = url
        self.width, self.height = width, height
        self.fps = fps if fps > 0 else 30.0
        self.encode = encode
        self.transport = transport
        self.preset = preset
        self.frames_written = 0
        self.frames_dropped = 0
        self.reconnects = 0
        self._output: av.container.OutputContainer | None = None
        self._video: av.VideoStream | None = None
        self._framer = YuvFramer(width, height)
        self._t0: float | None = None
        self._last_pts = -1
        self._retry_at = 0.0
        self._attempt = 0
        self._lost_since: float | None = None

    @property
    def name(self) -> str:
        return f"rtsp {self.url!r}"

    def _connect(self) -> None:
        output = av.open(self.url, "w", format="rtsp", options={"rtsp_transport": self.transport},
                         timeout=(5.0, 5.0))
        try:
            video = output.add_stream("libx264", rate=Fraction(self.fps).limit_denominator(1001))
            video.width, video.height, video.pix_fmt = self.width, self.height, "yuv420p"
            video.time_base = RTP_TIME_BASE
            video.codec_context.time_base = RTP_TIME_BASE
            gop = max(1, int(2 * self.fps))  # a keyframe at least every 2 s
            video.options = {"preset": self.preset, "tune": "zerolatency", "bf": "0",
                             "g": str(gop), "keyint_min": str(min(gop, 10)),
                             "crf": str(self.encode.crf), "forced-idr": "1", "threads": "1"}
            output.start_encoding()  # ANNOUNCE + RECORD now: an unreachable server fails here
        except BaseException:
            close_quietly(output)
            raise
        self._output, self._video = output, video

    def open(self) -> None:
        if self.width % 2 or self.height % 2:
            raise SinkError(f"{self.name}: H.264 needs an even width and height, got {self.width}x{self.height}")
        try:
            self._connect()
        except (av.FFmpegError, OSError) as exc:
            raise SinkError(f"{self.name}: cannot publish ({reason_of(exc)})") from exc

    def _drop_connection(self, why: str) -> None:
        output, self._output, self._video = self._output, None, None
        if output is not None:
            close_quietly(output)
        if self._lost_since is None:
            self._lost_since = time.monotonic()
            log.warning("%s: connection lost (%s); retrying", self.name, why)
        delay = self.BACKOFF[min(self._attempt, len(self.BACKOFF) - 1)]
        self._attempt += 1
        self._retry_at = time.monotonic() + delay

    def write(self, slot: Slot) -> None:
        now = time.monotonic()
        if self._output is None:
            if now < self._retry_at:
                self.frames_dropped += 1
                return
            try:
                self._connect()
            except (av.FFmpegError, OSError) as exc:
                self._drop_connection(reason_of(exc))
                self.frames_dropped += 1
                return
            self.reconnects += 1
            log.warning("%s: publishing again after %.1f s", self.name, now - (self._lost_since or now))
            self._lost_since, self._attempt = None, 0
        assert self._video is not None and self._output is not None
        if self._t0 is None:
            self._t0 = slot.capture_time
        pts = max(round((slot.capture_time - self._t0) / RTP_TIME_BASE), self._last_pts + 1)
        self._last_pts = pts
        frame = self._framer(slot.image)
        frame.pts = pts
        frame.time_base = RTP_TIME_BASE
        try:
            for packet in self._video.encode(frame):
                self._output.mux(packet)
        except (av.FFmpegError, OSError) as exc:
            self._drop_connection(reason_of(exc))
            self.frames_dropped += 1
            return
        self.frames_written += 1

    def close(self) -> None:
        output, self._output = self._output, None
        if output is None:
            return
        try:
            if self._video is not None:
                for packet in self._video.encode(None):
                    output.mux(packet)
        except (av.FFmpegError, OSError):
            pass
        finally:
            close_quietly(output)


class PreviewSink:
    """A window showing the output. `q` or Esc (or closing the window) stops the run."""

    TITLE = "facestream"

    def __init__(self) -> None:
        self.frames_written = 0
        self._open = False

    name = "preview window"

    def open(self) -> None:
        if os.name == "posix" and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            raise SinkError("preview: no display to open a window on (DISPLAY is not set); "
                            "use --output vcam or rtsp://..., or --record FILE")
        try:
            cv2.namedWindow(self.TITLE, cv2.WINDOW_NORMAL)
        except cv2.error as exc:
            raise SinkError(f"preview: cannot open a window ({reason_of(exc)})") from exc
        self._open = True

    def write(self, slot: Slot) -> None:
        cv2.imshow(self.TITLE, slot.image)
        key = cv2.waitKey(1) & 0xFF
        self.frames_written += 1
        closed = cv2.getWindowProperty(self.TITLE, cv2.WND_PROP_VISIBLE) < 1
        if key in (ord("q"), 27) or closed:
            raise StopRequested("preview closed")

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                cv2.destroyWindow(self.TITLE)
                cv2.waitKey(1)
            except cv2.error:
                pass
