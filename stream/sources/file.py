"""A video file as a source: demux + decode with PyAV into preallocated BGR slots.

Frames come out upright (a phone video's display matrix is applied: the pipeline finds
faces in upright pictures and the output plays the right way up) and with increasing
timestamps (containers without presentation times, such as AVI with B-frames, get them
from the frame index)."""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

from stream.errors import SourceError, reason_of
from stream.media.convert import ColourTags, colour_tags, convert_into
from stream.media.deep import deep_buffers, keep_planes
from stream.media.dynamic_range import AS_IS, DEEP, TONE_MAP
from stream.media.hdr import dynamic_of
from stream.media.tone_map import ToneMapper
from stream.media.video_info import VideoInfo
from stream.runtime.cores import codec_threads
from stream.runtime.slot import Slot

log = logging.getLogger(__name__)

# Counter-clockwise display rotation -> the cv2 turn that makes stored frames upright.
_UPRIGHT = {90: cv2.ROTATE_90_COUNTERCLOCKWISE, 180: cv2.ROTATE_180, 270: cv2.ROTATE_90_CLOCKWISE}
# Containers whose frames carry no presentation time of their own (libavformat guesses one
# from the decode order, which B-frames scramble): pts come from the frame index.
_NO_PTS_FORMATS = {"avi"}


def display_rotation(frame: av.VideoFrame) -> int:
    """The display matrix's rotation of `frame`, as 0, 90, 180 or 270 (counter-clockwise)."""
    try:
        degrees = float(frame.rotation or 0)
    except (AttributeError, TypeError, ValueError):  # no display matrix
        return 0
    return int(round(degrees / 90.0)) * 90 % 360


def _decoded(container: av.container.InputContainer, stream: av.VideoStream) -> Iterator[av.VideoFrame]:
    """The stream's frames in order, as `container.decode(stream)` gives them, except at a file
    cut short: its last packet is partial, and where FFmpeg's frame threads drop it, a decoder
    in one thread fails on it. Here it is dropped in both cases (the frames end, and
    `FileSource` says the file ends early); a packet that fails anywhere else raises."""
    packets = container.demux(stream)
    ahead = next(packets, None)
    while ahead is not None:
        packet, ahead = ahead, next(packets, None)
        try:
            frames = packet.decode()
        except av.FFmpegError:
            if ahead is not None and ahead.size:  # more of the file follows: damaged, not cut
                raise
            continue  # the last packet (only the decoder's flush follows): the file is cut short
        yield from frames


class FileSource:
    """Decodes the first video stream of a media file, one frame per `read_into` call.

    Lifecycle: `open()` (checks the file, reads its header, returns a `VideoInfo`), then
    `read_into(slot)` until it returns False, then `close()`. Every failure is a one-line
    `SourceError` naming the file; no raw PyAV exception escapes.
    """

    def __init__(self, path: str | os.PathLike[str], threads: int = 0) -> None:
        """`threads`: the decoder's; 0 (what runs use) picks as x264's are picked
        (`stream.runtime.cores.codec_threads`: one on a machine of 4 cores or fewer for a
        picture up to 720p, where the pipeline's stages already fill the cores, FFmpeg's own
        frame and slice threads otherwise), or that many (tools/bench_io.py compares them)."""
        self.path = Path(path)
        self.threads = threads
        self.frames_read = 0
        self.info: VideoInfo | None = None
        self._container: av.container.InputContainer | None = None
        self._stream: av.VideoStream | None = None
        self._frames: Iterator[av.VideoFrame] | None = None
        self._i420: np.ndarray | None = None
        self.shortfall: str | None = None  # set at the end when frames are missing
        self._fast_frames = 0  # frames that took the I420 path (for the benchmark and logs)
        self.wait_s = 0.0  # a file's frames are always there to decode
        self._pending: av.VideoFrame | None = None  # the first frame, read by open()
        self._stored: np.ndarray | None = None  # the frame as stored, when it must be turned
        self._turn: int | None = None  # cv2 rotate code, or None when frames are upright
        self._index_pts = False  # pts from the frame index (see _NO_PTS_FORMATS)
        self._step = 1  # one frame, in the stream's time base
        self._first_pts = 0
        self._last_pts: int | None = None
        self.pts_repaired = 0  # frames whose pts did not increase and were given one
        self.range_mode = AS_IS  # see set_range
        self._mapper: ToneMapper | None = None
        self.frame_buffers: dict[str, tuple[tuple[int, ...], type]] = {}  # ring A's, beside "image"

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
        ctx = stream.codec_context
        if not ctx.width or not ctx.height:
            container.close()
            raise self._error("video stream has no picture size (corrupt header?)")
        threads = self.threads or codec_threads(0, ctx.width * ctx.height)
        if threads != 1:
            # Frame + slice threads (PyAV drops the GIL while decoding).
            stream.thread_type = "AUTO"
        ctx.thread_count = threads
        self._container, self._stream = container, stream
        self._frames = _decoded(container, stream)
        try:  # the first frame says how it must be turned (and checks the stream decodes)
            self._pending = next(self._frames)
        except StopIteration:
            self._pending = None
        except (av.FFmpegError, OSError) as exc:
            self.close()
            raise self._error(f"decoding failed at frame 0: {reason_of(exc)}") from exc
        rotation = display_rotation(self._pending) if self._pending is not None else 0
        info = self._describe(container, stream)
        if rotation in (90, 270):
            info = replace(info, width=info.height, height=info.width)
        colour = colour_tags(self._pending if self._pending is not None else ctx)
        self.info = replace(info, rotation=rotation, colour=colour, dynamic=dynamic_of(self._pending))
        self._turn = _UPRIGHT.get(rotation)
        if self._turn is not None:
            self._stored = np.empty((ctx.height, ctx.width, 3), np.uint8)
            log.info("%s: turned by %d degrees (its display matrix)", self.path, rotation)
        if ctx.width % 2 == 0 and ctx.height % 2 == 0:
            self._i420 = np.empty((ctx.height * 3 // 2, ctx.width), np.uint8)
        self._index_pts = container.format.name in _NO_PTS_FORMATS
        self._step = max(1, round(self.info.frame_duration / self.info.time_base))
        if self._pending is not None and self._pending.pts is not None and not self._index_pts:
            self._first_pts = self._pending.pts
        log.debug("opened %s: %s", self.path, self.info)
        return self.info

    def set_range(self, mode: str) -> VideoInfo:
        """What becomes of the input's dynamic range (stream.media.dynamic_range's plan),
        before the first read: AS_IS (8-bit pictures in the input's colours), TONE_MAP (HDR
        tone-mapped to BT.709 SDR; `info.colour` says BT.709), or DEEP (each frame's 10-bit
        planes and its 8-bit picture kept in the slot's "deep" and "before" buffers, which
        `frame_buffers` lists for the ring). The updated info."""
        if self.info is None or self._stream is None:
            raise self._error("set_range before open()")
        ctx = self._stream.codec_context
        if mode == TONE_MAP:
            self._mapper = ToneMapper(self.info.dynamic, ctx.width, ctx.height)
            self.info = replace(self.info, colour=ColourTags.of("bt709"))
        elif mode == DEEP:
            if not self.info.dynamic.deep:
                raise self._error(f"{self.info.dynamic.pix_fmt} cannot be kept at its depth")
            self.frame_buffers = deep_buffers(self.info.height, self.info.width)
        elif mode != AS_IS:
            raise ValueError(f"unknown range mode {mode!r}")
        self.range_mode = mode
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
            frame = self._pending if self._pending is not None else next(self._frames)
            self._pending = None
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
        if self.range_mode == DEEP:
            if frame.format.name != self.info.dynamic.pix_fmt:
                raise self._error(f"frame {self.frames_read} is {frame.format.name}, the stream began "
                                  f"{self.info.dynamic.pix_fmt}")
            keep_planes(frame, slot.buffers["deep"], self._turn)
            np.copyto(slot.buffers["before"], image)
        slot.seq = self.frames_read
        slot.pts = self._pts_of(frame)
        slot.time_base = self.info.time_base
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

    def _pts_of(self, frame: av.VideoFrame) -> int:
        """The frame's pts in the stream's time base, strictly increasing."""
        if self._index_pts or frame.pts is None:
            pts = self._first_pts + self.frames_read * self._step
        else:
            pts = frame.pts
        if self._last_pts is not None and pts <= self._last_pts:
            # A timestamp going back (B-frames in a container that guessed pts from the
            # decode order, a damaged file): the frame is shown in decode order, one frame on.
            if not self.pts_repaired:
                log.info("%s: frame %d has pts %d after %d; numbering frames from here", self.path,
                         self.frames_read, pts, self._last_pts)
            self.pts_repaired += 1
            pts = self._last_pts + self._step
        self._last_pts = pts
        return pts

    def _convert(self, frame: av.VideoFrame, image: np.ndarray) -> None:
        target = image if self._stored is None else self._stored
        if self._mapper is not None:
            self._mapper(frame, target)
        elif convert_into(frame, target, self._i420):
            self._fast_frames += 1
        if self._stored is not None and self._turn is not None:
            cv2.rotate(self._stored, self._turn, dst=image)

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
