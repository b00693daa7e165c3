"""A clip's sound when the clip is played as a camera: decoded beside its pictures and put
on an `AudioBus` stamped on the same capture clock, so every live output carries it as it
carries an RTSP camera's sound.

The clip's frame k is due k frame times after its first frame was captured (see
`WebcamSource`); its sound at clip time t is stamped first capture + (t - the video's start
time), so the two keep the clip's own sync. The sound is read ahead of time by
`LEAD_S` (a file has it all): the outputs hold it until it is due, never the pictures for it.
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import av
import numpy as np

from stream.errors import reason_of
from stream.media.audio_delay import LIVE_RATE, AudioBus, AudioFormat, live_pieces, live_resampler

log = logging.getLogger(__name__)

LEAD_S = 0.1  # how far ahead of its capture time a piece is handed on


class ClipSound:
    """The first audio track of `path` on `bus`, once `start(first_capture)` says when the
    clip's first frame was captured; `stop()` ends it (also at the clip's end)."""

    def __init__(self, path: Path, bus: AudioBus) -> None:
        self.path = path
        self.bus = bus
        self.pieces = 0
        self._origin: float | None = None  # capture time - clip time
        self._started = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._container: av.container.InputContainer | None = None
        self._video_start = 0.0

    def open(self) -> bool:
        """Open the clip's sound (False when it has none or it cannot be read: the clip
        plays without sound, which the log says)."""
        try:
            container = av.open(str(self.path), "r")
        except (av.FFmpegError, OSError, UnicodeDecodeError, ValueError) as exc:
            log.info("%s: its sound cannot be read (%s); playing without", self.path, reason_of(exc))
            return False
        if not container.streams.audio:
            container.close()
            return False
        video = container.streams.video[0] if container.streams.video else None
        if video is not None and video.start_time is not None and video.time_base is not None:
            self._video_start = float(video.start_time * video.time_base)
        self._container = container
        self.bus.format = AudioFormat(LIVE_RATE, 2)
        self._thread = threading.Thread(target=self._run, name="fs-clip-sound", daemon=True)
        self._thread.start()
        return True

    def start(self, first_capture: float) -> None:
        """The clip's first frame was captured at `first_capture` (time.monotonic())."""
        if self._origin is None:
            self._origin = first_capture - self._video_start
            self._started.set()

    def _run(self) -> None:
        container = self._container
        assert container is not None
        try:
            self._started.wait()
            stream = container.streams.audio[0]
            resampler = live_resampler()
            at: float | None = None  # clip time where the next piece starts
            for frame in container.decode(stream):
                if self._stop.is_set():
                    return
                if at is None or (frame.time is not None and abs(frame.time - at) > 0.05):
                    at = frame.time if frame.time is not None else (at or self._video_start)
                for piece in live_pieces(resampler, frame):
                    if not self._hand_on(at, piece):
                        return
                    at += piece.shape[1] / 2 / LIVE_RATE
        except (av.FFmpegError, OSError) as exc:
            log.info("%s: its sound stopped (%s)", self.path, reason_of(exc))
        finally:
            container.close()

    def _hand_on(self, at: float, piece: np.ndarray) -> bool:
        assert self._origin is not None
        captured = self._origin + at
        wait = captured - LEAD_S - time.monotonic()
        if wait > 0 and self._stop.wait(wait):
            return False
        self.bus.push(captured, piece)
        self.pieces += 1
        return True

    def stop(self) -> None:
        self._stop.set()
        self._started.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)
