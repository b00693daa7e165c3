"""An RTSP push as a live sink: libx264 with zero latency, riding out a server that goes away."""
from __future__ import annotations

import logging
import time
from fractions import Fraction

import av

from stream.config import EncodeConfig
from stream.errors import SinkError, reason_of
from stream.media.backoff import backoff_delay
from stream.media.clock import VIDEO_TIME_BASE
from stream.media.close import close_quietly
from stream.media.convert import YuvFramer
from stream.runtime.slot import Slot

log = logging.getLogger(__name__)


class RtspSink:
    """Pushes H.264 to an RTSP server (ANNOUNCE/RECORD over TCP): libx264 with
    `tune=zerolatency`, no B-frames, a keyframe at least every 2 s, timestamps from the
    frames' capture clock, one slice per frame (zerolatency's sliced threads cut each
    frame into slices, which not every server relays intact: through GStreamer's RTSP
    server the first slices of each frame were lost; one encoder thread adds no delay).

    If the server goes away mid-run, frames are dropped (and counted) while it retries
    with backoff; the run goes on. Only the first connection must succeed.
    """

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
            video.time_base = VIDEO_TIME_BASE
            video.codec_context.time_base = VIDEO_TIME_BASE
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
        delay = backoff_delay(self._attempt)
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
        pts = max(round((slot.capture_time - self._t0) / VIDEO_TIME_BASE), self._last_pts + 1)
        self._last_pts = pts
        frame = self._framer(slot.image)
        frame.pts = pts
        frame.time_base = VIDEO_TIME_BASE
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
