"""A video file as a sink: H.264 with PyAV, the input's timing kept, its audio copied untouched."""
from __future__ import annotations

import logging
import os
from collections import deque
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from stream.config import EncodeConfig
from stream.errors import SinkError, SourceError, reason_of
from stream.media.close import close_quietly
from stream.media.convert import YuvFramer
from stream.media.video_info import VideoInfo
from stream.runtime.slot import Slot

log = logging.getLogger(__name__)

# Encoders that understand x264-style rate control; others only get the preset.
_CRF_CODECS = {"libx264", "libx265"}


class _AudioCopy:
    """Audio packets of another file, muxed unchanged into the output as video time advances.

    A demuxer of its own (not the video source's) keeps source and sink independent.
    """

    def __init__(self, path: Path, output: av.container.OutputContainer) -> None:
        self.path = path
        try:
            self._input = av.open(str(path), "r")
        except (av.FFmpegError, OSError, ValueError) as exc:
            raise SourceError(f"audio {str(path)!r}: cannot be read ({reason_of(exc)})") from exc
        self.stream: av.AudioStream | None = None
        if self._input.streams.audio:
            source = self._input.streams.audio[0]
            self.stream = output.add_stream_from_template(source)
            self._packets = self._input.demux(source)
        self._pending: av.Packet | None = None
        self.packets = 0

    def mux_until(self, output: av.container.OutputContainer, until: float | None) -> None:
        """Mux the audio packets that start before `until` seconds (all of them for None)."""
        if self.stream is None:
            return
        while True:
            packet = self._pending
            if packet is None:
                try:
                    packet = next(self._packets)
                except (StopIteration, av.FFmpegError, OSError) as exc:
                    if not isinstance(exc, StopIteration):
                        log.warning("audio %s: stopped at packet %d: %s", self.path, self.packets, exc)
                    self.stream = None  # nothing more to copy
                    return
                if packet.dts is None and packet.pts is None:  # the demuxer's end-of-stream flush
                    continue
            stamp = packet.dts if packet.dts is not None else packet.pts
            if until is not None and stamp * packet.time_base >= until:
                self._pending = packet
                return
            self._pending = None
            packet.stream = self.stream
            output.mux(packet)
            self.packets += 1

    def close(self) -> None:
        self._input.close()


class FileSink:
    """Encodes BGR slots into a video file with the input's exact pts.

    Lifecycle: `open()`, `write(slot)` per frame, `close()`. `close()` always finalises
    the container, so a run stopped by an exception or Ctrl-C leaves a playable file
    with the frames written so far.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        info: VideoInfo,
        encode: EncodeConfig,
        audio_from: str | os.PathLike[str] | None = None,
    ) -> None:
        self.path = Path(path)
        self.info = info
        self.encode = encode
        self.audio_from = Path(audio_from) if audio_from is not None else None
        self.frames_written = 0
        self._output: av.container.OutputContainer | None = None
        self._video: av.VideoStream | None = None
        self._audio: _AudioCopy | None = None
        self._framer: YuvFramer | None = None
        self._time_base = info.time_base
        # Packets wait (in decode order) until the pts of the frame after theirs is known,
        # so each gets its true duration: mp4 ends the track at max(pts + duration), and
        # without durations the muxer guesses the last frame from the nominal rate.
        self._waiting: deque[av.Packet] = deque()
        self._next_pts: dict[int, int] = {}
        self._first_pts: int | None = None
        self._last_pts: int | None = None
        self._last_gap: int | None = None

    @property
    def name(self) -> str:
        return str(self.path)

    def _error(self, what: str) -> SinkError:
        return SinkError(f"output {str(self.path)!r}: {what}")

    def open(self) -> None:
        """Create the file and set up the H.264 stream (and the audio copy).

        Raises SinkError when the path cannot be written: missing folder, permission,
        a directory, or an extension no muxer knows.
        """
        if self.info.width % 2 or self.info.height % 2:
            # 4:2:0 chroma is subsampled by two both ways; x264 refuses odd sizes with a
            # "generic error", so say what is wrong before trying.
            raise self._error(f"H.264 in yuv420p needs an even width and height; the input is "
                              f"{self.info.width}x{self.info.height}")
        if self.path.is_dir():
            raise self._error("is a directory")
        if not self.path.parent.is_dir():
            raise self._error(f"folder {str(self.path.parent)!r} does not exist")
        if not os.access(self.path.parent, os.W_OK) or (
            self.path.exists() and not os.access(self.path, os.W_OK)
        ):
            raise self._error("permission denied")
        try:
            output = av.open(str(self.path), "w")
        except (av.FFmpegError, OSError, ValueError) as exc:
            raise self._error(f"cannot be written ({reason_of(exc)})") from exc
        try:
            self._setup(output)
            # Open the codec and the file and write the header now: a bad path, codec or
            # preset fails here, with a clear message, and not at the first frame.
            output.start_encoding()
        except SourceError:
            close_quietly(output)
            raise
        except (av.FFmpegError, OSError, ValueError, TypeError) as exc:
            close_quietly(output)
            raise self._error(f"cannot be written with {self.encode.codec} "
                              f"({reason_of(exc)})") from exc
        self._output = output

    def _setup(self, output: av.container.OutputContainer) -> None:
        info, enc = self.info, self.encode
        rate = info.rate if info.rate > 0 else Fraction(30)
        video = output.add_stream(enc.codec, rate=rate)
        video.width, video.height, video.pix_fmt = info.width, info.height, "yuv420p"
        # The input's time base on codec and stream: pts pass through without rescaling,
        # so VFR timing survives exactly.
        video.time_base = self._time_base
        video.codec_context.time_base = self._time_base
        video.codec_context.thread_count = enc.threads
        options = {"preset": enc.preset}
        if enc.codec in _CRF_CODECS:
            options["crf"] = str(enc.crf)
        video.options = options
        self._video = video
        if self.audio_from is not None:
            self._audio = _AudioCopy(self.audio_from, output)
            if self._audio.stream is None:
                log.info("%s has no audio stream; the output has none", self.audio_from)
        self._framer = YuvFramer(info.width, info.height)

    def write(self, slot: Slot) -> None:
        """Encode `slot.image` (H, W, 3 uint8 BGR) with pts `slot.pts` in `slot.time_base`."""
        if self._output is None or self._video is None:
            raise self._error("write before open() (or after close())")
        image = slot.image
        if image.shape != (self.info.height, self.info.width, 3):
            raise self._error(f"frame is {image.shape}, the stream is "
                              f"({self.info.height}, {self.info.width}, 3)")
        pts = self._pts(slot)
        if self._last_pts is not None:
            if pts <= self._last_pts:
                raise self._error(f"frame {self.frames_written}: pts {pts} after {self._last_pts} "
                                  "(pts must increase)")
            self._next_pts[self._last_pts] = pts
        frame = self._to_frame(image)
        frame.pts = pts
        frame.time_base = self._time_base
        try:
            packets = self._video.encode(frame)
            for packet in packets:
                self._mux_video(packet)
        except (av.FFmpegError, OSError) as exc:
            raise self._error(f"encoding frame {self.frames_written} failed: {reason_of(exc)}") from exc
        if self._last_pts is not None:
            self._last_gap = pts - self._last_pts
        if self._first_pts is None:
            self._first_pts = pts
        self._last_pts = pts
        self.frames_written += 1

    def _pts(self, slot: Slot) -> int:
        if slot.pts is None:  # a source without timestamps: nominal rate
            return round(self.frames_written * self.info.frame_duration / self._time_base)
        if slot.time_base is None or slot.time_base == self._time_base:
            return slot.pts
        return round(slot.pts * slot.time_base / self._time_base)

    def _to_frame(self, image: np.ndarray) -> av.VideoFrame:
        assert self._framer is not None
        return self._framer(image)

    def _mux_video(self, packet: av.Packet) -> None:
        self._waiting.append(packet)
        self._mux_ready(end=None)

    def _mux_ready(self, end: int | None) -> None:
        """Mux waiting packets whose duration is known; with `end`, all of them."""
        assert self._output is not None
        while self._waiting:
            packet = self._waiting[0]
            if packet.pts is not None:
                following = self._next_pts.get(packet.pts, end)
                if following is None:
                    return
                self._next_pts.pop(packet.pts, None)
                packet.duration = max(following - packet.pts, 1)
            self._waiting.popleft()
            if self._audio is not None and packet.dts is not None:
                self._audio.mux_until(self._output, float(packet.dts * packet.time_base))
            self._output.mux(packet)

    def _end_pts(self) -> int | None:
        """Where the video should end, in the stream's time base."""
        if self._last_pts is None or self._first_pts is None:
            return None
        gap = self._last_gap or max(1, round(self.info.frame_duration / self._time_base))
        end = self._last_pts + gap
        if self._complete() and self.info.duration > 0:
            # A full run ends where the input did (its last frame keeps its own duration).
            from_input = self._first_pts + round(Fraction(self.info.duration) / self._time_base)
            if from_input > self._last_pts:
                end = from_input
        return end

    def _complete(self) -> bool:
        return self.info.frames <= 0 or self.frames_written >= self.info.frames

    def close(self) -> None:
        """Flush the encoder, mux the remaining audio, finalise the file. Idempotent.

        After a full run the audio is copied to its end; after a run stopped early
        (fewer frames than the input had) only up to the last video frame.
        """
        output = self._output
        if output is None:
            return
        try:
            if self._video is not None and self.frames_written:
                end = self._end_pts()
                for packet in self._video.encode(None):
                    self._waiting.append(packet)
                self._mux_ready(end=end)
                if self._audio is not None:
                    until = None if self._complete() else (
                        float(end * self._time_base) if end is not None else 0.0)
                    self._audio.mux_until(output, until)
        except (av.FFmpegError, OSError) as exc:
            raise self._error(f"finishing the file failed: {reason_of(exc)}") from exc
        finally:
            # Whatever happened above (even Ctrl-C), write the trailer so the file plays.
            self._output = None
            try:
                output.close()
            except (av.FFmpegError, OSError) as exc:
                log.error("closing %s: %s", self.path, exc)
            if self._audio is not None:
                self._audio.close()
                self._audio = None
            log.debug("wrote %d frames to %s", self.frames_written, self.path)

    def __enter__(self) -> FileSink:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
