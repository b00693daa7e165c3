"""A video file as a source: demux + decode with PyAV into preallocated BGR slots."""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from stream.errors import SourceError, reason_of
from stream.media.convert import convert_into
from stream.media.video_info import VideoInfo
from stream.runtime.slot import Slot

log = logging.getLogger(__name__)

class FileSource:
    """Decodes the first video stream of a media file, one frame per `read_into` call.

    Lifecycle: `open()` (checks the file, reads its header, returns a `VideoInfo`), then
    `read_into(slot)` until it returns False, then `close()`. Every failure is a one-line
    `SourceError` naming the file; no raw PyAV exception escapes.
    """

    def __init__(self, path: str | os.PathLike[str], threaded: bool = True) -> None:
        self.path = Path(path)
        self.threaded = threaded
        self.frames_read = 0
        self.info: VideoInfo | None = None
        self._container: av.container.InputContainer | None = None
        self._stream: av.VideoStream | None = None
        self._frames: Iterator[av.VideoFrame] | None = None
        self._i420: np.ndarray | None = None
        self.shortfall: str | None = None  # set at the end when frames are missing
        self._fast_frames = 0  # frames that took the I420 path (for the benchmark and logs)
        self.wait_s = 0.0  # a file's frames are always there to decode

    def _error(self, what: str) -> SourceError:
        return SourceError(f"video {str(self.path)!r}: {what}")

    def open(self) -> VideoInfo:
        """Open the file and describe its video stream.

        Raises SourceError for a missing path, a directory, an unreadable file, something
        that is not media (or is corrupt), and a file without a video stream.
        """
        if not self.path.exists():
            raise self._error("no such file")
        if self.path.is_dir():
            raise self._error("is a directory, not a video file")
        if not os.access(self.path, os.R_OK):
            raise self._error("permission denied")
        try:
            container = av.open(str(self.path), "r")
        except (av.FFmpegError, OSError, UnicodeDecodeError, ValueError) as exc:
            raise self._error(f"not a readable media file ({reason_of(exc)})") from exc
        if not container.streams.video:
            container.close()
            raise self._error("has no video stream")
        stream = container.streams.video[0]
        if self.threaded:
            # Frame + slice threads: decoding is the source's whole cost, and PyAV drops the GIL.
            stream.thread_type = "AUTO"
        ctx = stream.codec_context
        if not ctx.width or not ctx.height:
            container.close()
            raise self._error("video stream has no picture size (corrupt header?)")
        self._container, self._stream = container, stream
        self.info = self._describe(container, stream)
        self._frames = container.decode(stream)
        if ctx.width % 2 == 0 and ctx.height % 2 == 0:
            self._i420 = np.empty((ctx.height * 3 // 2, ctx.width), np.uint8)
        log.debug("opened %s: %s", self.path, self.info)
        return self.info

    @staticmethod
    def _describe(container: av.container.InputContainer, stream: av.VideoStream) -> VideoInfo:
        rate = stream.average_rate or stream.guessed_rate or stream.base_rate or Fraction(0)
        time_base = stream.time_base or Fraction(1, 90000)
        if stream.duration:
            duration = float(stream.duration * time_base)
        elif container.duration:
            duration = container.duration / av.time_base
        else:
            duration = 0.0
        frames = stream.frames or (round(duration * rate) if rate else 0)
        return VideoInfo(
            width=stream.codec_context.width,
            height=stream.codec_context.height,
            rate=Fraction(rate),
            time_base=Fraction(time_base),
            frames=int(frames),
            duration=duration,
            has_audio=bool(container.streams.audio),
        )

    def read_into(self, slot: Slot) -> bool:
        """Decode the next frame into `slot.buffers["image"]` in place; False at the end.

        The image buffer must be a preallocated (H, W, 3) uint8 array. Sets `slot.seq`,
        `slot.pts`, `slot.time_base` and `slot.capture_time`. A decode or demux error
        raises SourceError naming the file and the frame number.
        """
        if self._frames is None or self.info is None:
            raise self._error("read before open() (or after close())")
        try:
            frame = next(self._frames)
        except StopIteration:
            self._check_complete()
            return False
        except (av.FFmpegError, OSError) as exc:
            raise self._error(
                f"decoding failed at frame {self.frames_read}: {reason_of(exc)}"
            ) from exc
        image = slot.buffers["image"]
        if image.shape != (self.info.height, self.info.width, 3) or image.dtype != np.uint8:
            raise self._error(
                f"slot image is {image.shape} {image.dtype}, "
                f"needs ({self.info.height}, {self.info.width}, 3) uint8"
            )
        self._convert(frame, image)
        slot.seq = self.frames_read
        slot.pts = frame.pts if frame.pts is not None else self.frames_read
        slot.time_base = Fraction(frame.time_base or self.info.time_base)
        slot.capture_time = time.monotonic()
        self.frames_read += 1
        return True

    def _check_complete(self) -> None:
        # Containers with an exact frame count (mp4, mov): edit lists and a dropped corrupt
        # frame can cost a frame or two; more than that is a file cut short. Containers
        # without one (mkv, webm) give duration x rate, an estimate that VFR timing can
        # miss by a little: a tenth short counts as cut. Not raised here: the frames read
        # still get processed and written; the job reports `shortfall` once the output
        # is final.
        exact = self._stream.frames if self._stream is not None else 0
        expected = exact or (self.info.frames if self.info is not None else 0)
        slack = max(2, expected // 50) if exact else max(2, expected // 10)
        if expected and self.frames_read < expected - slack:
            self.shortfall = (
                f"input {str(self.path)!r} ends early: {self.frames_read} of {expected} frames "
                "decoded (truncated or damaged file)"
            )
            log.info("%s", self.shortfall)

    def _convert(self, frame: av.VideoFrame, image: np.ndarray) -> None:
        if convert_into(frame, image, self._i420):
            self._fast_frames += 1

    def close(self) -> None:
        """Release the file; safe to call more than once."""
        self._frames = None
        container, self._container = self._container, None
        if container is not None:
            try:
                container.close()
            except (av.FFmpegError, OSError) as exc:  # closing an input loses nothing
                log.debug("closing %s: %s", self.path, exc)

    def __enter__(self) -> FileSource:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
