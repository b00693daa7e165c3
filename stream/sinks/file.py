"""A video file as a sink: H.264 with PyAV (HEVC Main10 for a 10-bit input), the input's
timing and other streams kept, the file written under a hidden name and renamed onto the
output once it is finalised."""
from __future__ import annotations

import logging
import os
import time
from collections import deque
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from stream.config import EncodeConfig
from stream.errors import SinkError, reason_of
from stream.media.atomic import commit, discard, partial_path
from stream.media.audio_delay import AudioDelay
from stream.media.close import close_quietly
from stream.media.convert import RANGE_JPEG, ColourTags, YuvFramer, apply_tags
from stream.media.deep import DeepFramer
from stream.media.dynamic_range import resolve_codec
from stream.media.face_roi import FaceRegions
from stream.media.hdr import encoder_hdr_options
from stream.media.video_info import VideoInfo
from stream.runtime.cores import codec_threads
from stream.runtime.slot import Slot
from stream.sinks.carried_streams import CarriedStreams
from stream.sinks.live_sound import LiveSound

log = logging.getLogger(__name__)

# Encoders that understand x264-style rate control; others only get the preset.
_CRF_CODECS = {"libx264", "libx265"}
# SVT-AV1 takes its speed as a number (0 slowest to 13): the x264 preset names mapped onto it.
_SVT_PRESETS = {"ultrafast": "12", "superfast": "11", "veryfast": "10", "faster": "9", "fast": "8",
                "medium": "7", "slow": "5", "slower": "4", "veryslow": "2", "placebo": "1"}
# HEVC in mp4/mov as "hvc1" (parameter sets in the sample description), which Apple's players
# need; FFmpeg's default "hev1" plays elsewhere only.
_HVC1_SUFFIXES = {".mp4", ".mov", ".m4v"}
# Containers that index frames rather than time them: their time base must be one frame,
# or the header's frame rate is the time base's (AVI claimed 600 fps with a 1/600 base).
_FRAME_INDEXED = {".avi"}


class FileSink:
    """Encodes BGR slots into a video file with the input's exact pts.

    Lifecycle: `open()`, `write(slot)` per frame, `close()`. The file is written under a
    hidden partial name beside the output. `close()` always finalises it and, when it holds
    frames, renames it onto the output: a run stopped by an error, Ctrl-C, SIGTERM or
    SIGHUP leaves a playable file with the frames written so far (`kept`); a run that
    wrote nothing, or a crash, leaves an existing output as it was.

    `overwrite=False` refuses an existing output at `open()`. Odd picture sizes are padded
    by one pixel (4:2:0 H.264 needs even ones); `notes` says so, and what happened to the
    input's other streams (`audio_from`: audio tracks and subtitles).

    `constant_rate` (live recordings): the file runs at `info.rate` exactly, each frame at
    the frame time its timestamp falls in (timestamps count from the first frame the source
    read, as a capture clock does). Frame times the run skipped (frames dropped under load)
    repeat the picture before; a second frame in one frame time is left out. The other
    streams of `audio_from` start with the source's first frame and end with the last
    frame written, so the sound stays with the pictures. `live_audio` (with constant_rate):
    a live source's sound (an RTSP camera's) through its delay line, encoded at the
    capture times it was stamped with.

    `deep` (a 10-bit 4:2:0 input kept 10-bit, see stream.media.deep): each slot's frame
    also holds the input's planes ("deep") and the picture the stages were given
    ("before"); the output is yuv420p10le in `encode.codec`, with the input's colour tags and
    HDR10 metadata (`info.dynamic`), and holds the input's samples wherever the swap changed
    nothing.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        info: VideoInfo,
        encode: EncodeConfig,
        audio_from: str | os.PathLike[str] | None = None,
        overwrite: bool = True,
        constant_rate: bool = False,
        live_audio: AudioDelay | None = None,
        deep: bool = False,
    ) -> None:
        self.path = Path(path)
        self.codec = resolve_codec(encode.codec)
        self.deep = deep
        self._deep_framer: DeepFramer | None = None
        self.info = info
        self.encode = encode
        self.audio_from = Path(audio_from) if audio_from is not None else None
        self.overwrite = overwrite
        self.constant_rate = constant_rate
        self.frames_written = 0  # in the file (with constant_rate: repeats included)
        self.frames_repeated = 0  # constant_rate: frame times filled with the picture before
        self.frames_left_out = 0  # constant_rate: a second frame in one frame time
        self.partial = partial_path(self.path)
        self.kept: Path | None = None  # the output, once close() put the frames there
        self.replaced = False  # an earlier file of the output's name was replaced
        self.notes: list[str] = []
        self._output: av.container.OutputContainer | None = None
        self._video: av.VideoStream | None = None
        self._audio: CarriedStreams | None = None
        self.live_audio = live_audio if constant_rate else None
        self._sound: LiveSound | None = None
        self._framer: YuvFramer | None = None
        # Even size for the encoder; the picture padded into `_padded` when it is odd.
        self.width, self.height = info.width + info.width % 2, info.height + info.height % 2
        self._padded: np.ndarray | None = None
        self._frame_indexed = self.path.suffix.lower() in _FRAME_INDEXED
        self._time_base = info.frame_duration if (self._frame_indexed or constant_rate) else info.time_base
        self._held: av.VideoFrame | None = None  # constant_rate: the last picture encoded
        # The swapped faces get finer quantisation (encode.face_qp), where the encoder can.
        self._faces = FaceRegions(str(self.path), self.codec, encode.preset, encode.face_qp,
                                  self.width, self.height, self._time_base)
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
        if self.path.is_dir():
            raise self._error("is a directory")
        if not self.path.parent.is_dir():
            raise self._error(f"folder {str(self.path.parent)!r} does not exist")
        if self.path.exists() and not self.overwrite:
            raise self._error("exists already (--overwrite replaces it)")
        if not os.access(self.path.parent, os.W_OK) or (
            self.path.exists() and not os.access(self.path, os.W_OK)
        ):
            raise self._error("permission denied")
        try:
            output = av.open(str(self.partial), "w")
        except (av.FFmpegError, OSError, ValueError) as exc:
            discard(self.partial)
            raise self._error(f"cannot be written ({reason_of(exc)})") from exc
        try:
            self._setup(output)
            # Open the codec and the file and write the header now: a bad path, codec or
            # preset fails here, with a clear message, and not at the first frame.
            output.start_encoding()
            if self.codec == "libsvtav1" and hasattr(os, "sched_setscheduler"):
                # SVT-AV1, run as root, makes the thread that opens it real-time (SCHED_FIFO 99),
                # and everything it starts after inherits that: a spinning child then starves
                # the machine. This thread goes back to the normal policy.
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        except (av.FFmpegError, OSError, ValueError, TypeError) as exc:
            self._abandon(output)
            raise self._error(f"cannot be written with {self.codec} "
                              f"({reason_of(exc)})") from exc
        except BaseException:  # SourceError, Ctrl-C, SIGTERM: no partial file stays behind
            self._abandon(output)
            raise
        self._output = output

    def _abandon(self, output: av.container.OutputContainer) -> None:
        close_quietly(output)
        if self._audio is not None:
            close_quietly(self._audio)
            self._audio = None
        discard(self.partial)

    def _setup(self, output: av.container.OutputContainer) -> None:
        info, enc = self.info, self.encode
        rate = info.rate if info.rate > 0 else Fraction(30)
        video = output.add_stream(self.codec, rate=rate)
        video.width, video.height = self.width, self.height
        video.pix_fmt = "yuv420p10le" if self.deep else "yuv420p"
        if self.deep and (self.width, self.height) != (info.width, info.height):
            raise ValueError(f"a 10-bit output keeps the input's {info.width}x{info.height} as it is: "
                             "its size must be even")
        if (self.width, self.height) != (info.width, info.height):
            # 4:2:0 chroma is subsampled by two both ways: x264 refuses odd sizes.
            self._padded = np.empty((self.height, self.width, 3), np.uint8)
            self.notes.append(f"the {info.width}x{info.height} picture is padded to {self.width}x{self.height} "
                              "(H.264 in 4:2:0 needs an even width and height; the last row/column is repeated)")
        # The input's time base on codec and stream: pts pass through without rescaling,
        # so VFR timing survives exactly (frame-indexed containers: one frame per tick).
        video.time_base = self._time_base
        video.codec_context.time_base = self._time_base
        video.codec_context.thread_count = codec_threads(enc.threads, self.width * self.height)
        # The input's colour tags on the output, and the matching conversion: BT.709 and
        # full-range inputs come back as they were outside the faces (untagged stays untagged).
        dynamic = info.dynamic
        if self.deep:  # the input's own tags, matrix included: the samples are its own
            apply_tags(video.codec_context, ColourTags(dynamic.colorspace, dynamic.color_range,
                                                       dynamic.primaries, dynamic.transfer))
        else:
            apply_tags(video.codec_context, info.colour)
        if self.codec == "libx265" and self.path.suffix.lower() in _HVC1_SUFFIXES:
            video.codec_context.codec_tag = "hvc1"
        options = {"preset": enc.preset}
        if self.codec == "libsvtav1":
            options["preset"] = _SVT_PRESETS.get(enc.preset, enc.preset)
            # SVT-AV1 prints its settings on stderr (some 60 lines) unless its log level says not to.
            os.environ.setdefault("SVT_LOG", "1")
        if self.codec in _CRF_CODECS:
            options["crf"] = str(enc.crf)
        if self.deep:
            options.update(encoder_hdr_options(self.codec, dynamic))
        if self.codec == "libx265":  # x265 prints its settings on stderr unless told not to
            options["x265-params"] = ":".join(p for p in ("log-level=error", options.get("x265-params")) if p)
        video.options = options
        self._video = video
        if self.audio_from is not None:
            self._audio = CarriedStreams(self.audio_from, output, self.path.suffix,
                                         from_video_start=self.constant_rate)
            self.notes.extend(self._audio.notes)
            if not self._audio.audio_tracks:
                log.info("%s has no audio stream; the output has none", self.audio_from)
        elif self.live_audio is not None:
            self._sound = LiveSound(self.live_audio, output, self.path.suffix)
        self._framer = YuvFramer(self.width, self.height, info.colour.matrix, info.colour.full_range)
        if self.deep:
            self._deep_framer = DeepFramer(self.width, self.height, dynamic.colorspace,
                                           dynamic.color_range == RANGE_JPEG)

    def write(self, slot: Slot) -> None:
        """Encode `slot.image` (H, W, 3 uint8 BGR) with pts `slot.pts` in `slot.time_base`."""
        if self._output is None or self._video is None:
            raise self._error("write before open() (or after close())")
        image = slot.image
        if image.shape != (self.info.height, self.info.width, 3):
            raise self._error(f"frame is {image.shape}, the stream is "
                              f"({self.info.height}, {self.info.width}, 3)")
        if self.constant_rate:
            self._write_on_grid(slot, image)
            if self._sound is not None:
                self._write_sound(slot)
            return
        pts = self._pts(slot)
        if self._last_pts is not None and pts <= self._last_pts:
            raise self._error(f"frame {self.frames_written}: pts {pts} after {self._last_pts} "
                              "(pts must increase)")
        self._encode(self._to_frame(self._pad(image), slot), pts)

    def _write_on_grid(self, slot: Slot, image: np.ndarray) -> None:
        """constant_rate: the frame at the frame time its timestamp falls in."""
        if slot.pts is None or slot.time_base is None:
            index = (self._last_pts + 1) if self._last_pts is not None else 0
        else:
            index = round(slot.pts * slot.time_base / self._time_base)
        if self._last_pts is not None:
            if index <= self._last_pts:
                self.frames_left_out += 1
                return
            assert self._held is not None
            for pts in range(self._last_pts + 1, index):  # the picture before stays up meanwhile
                self._encode(self._held, pts)
                self.frames_repeated += 1
        frame = self._to_frame(self._pad(image), slot)
        if self._last_pts is None:  # the first picture also stands for the frames before it
            for pts in range(index):
                self._encode(frame, pts)
                self.frames_repeated += 1
        self._encode(frame, index)
        self._held = frame

    def _write_sound(self, slot: Slot) -> None:
        assert self._sound is not None and self._output is not None
        if self._sound.origin is None and slot.pts is not None and slot.time_base is not None:
            self._sound.origin = slot.capture_time - float(slot.pts * slot.time_base)
        try:
            self._sound.write_until(self._output, slot.capture_time, time.monotonic())
        except (av.FFmpegError, OSError, ValueError) as exc:
            raise self._error(f"writing the sound failed ({reason_of(exc)})") from exc

    def _pad(self, image: np.ndarray) -> np.ndarray:
        if self._padded is None:
            return image
        h, w = image.shape[:2]
        pad = self._padded
        pad[:h, :w] = image
        pad[:h, w:] = image[:, w - 1:]  # (nothing when the width is even)
        pad[h:, :] = pad[h - 1:h, :]
        return pad

    def _encode(self, frame: av.VideoFrame, pts: int) -> None:
        """Encode `frame` at `pts` (greater than the last one) and mux what comes out."""
        assert self._video is not None
        if self._last_pts is not None:
            self._next_pts[self._last_pts] = pts
        frame.pts = pts
        frame.time_base = self._time_base
        try:
            packets = self._video.encode(frame)
            for packet in packets:
                self._mux_video(packet)
        except (av.FFmpegError, OSError) as exc:
            raise self._error(f"writing frame {self.frames_written} failed ({reason_of(exc)})") from exc
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
        if self._frame_indexed:  # one tick per frame: the nearest frame slot, never a repeat
            return max(round(slot.pts * slot.time_base / self._time_base),
                       (self._last_pts + 1) if self._last_pts is not None else 0)
        return round(slot.pts * slot.time_base / self._time_base)

    def _to_frame(self, image: np.ndarray, slot: Slot) -> av.VideoFrame:
        assert self._framer is not None
        if self._deep_framer is not None:
            buffers = (slot.frame or slot).buffers
            frame = self._deep_framer.fill(image, buffers["before"], buffers["deep"])
        else:
            frame = self._framer(image)
        return self._faces.attach(frame, slot.payload)

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
        if self.constant_rate:  # a live run: its input's other streams end with its last frame
            return False
        return self.info.frames <= 0 or self.frames_written >= self.info.frames

    def close(self) -> None:
        """Flush the encoder, mux the remaining streams, finalise the file and rename it onto
        the output (when it holds frames). Idempotent.

        After a full run the other streams are copied to their end; after a run stopped early
        (fewer frames than the input had) only up to the last video frame. A file that cannot
        be finalised (the disk is full) is removed and the error names the cause; an
        existing output is then left as it was.
        """
        output = self._output
        if output is None:
            return
        error: SinkError | None = None
        finalised = True
        try:
            if self._video is not None and self.frames_written:
                end = self._end_pts()
                for packet in self._video.encode(None):
                    self._waiting.append(packet)
                self._mux_ready(end=end)
                if self._sound is not None:
                    self._sound.finish(output)
                if self._audio is not None:
                    until = None if self._complete() else (
                        float(end * self._time_base) if end is not None else 0.0)
                    self._audio.mux_until(output, until)
                    self._audio.finish(output)
        except (av.FFmpegError, OSError) as exc:
            error = self._error(f"finishing the file failed ({reason_of(exc)})")
        finally:
            # Whatever happened above (even Ctrl-C), write the trailer so the file plays.
            self._output = None
            try:
                output.close()
            except (av.FFmpegError, OSError) as exc:
                error = error or self._error(f"finishing the file failed ({reason_of(exc)})")
                finalised = False
            if self._audio is not None:
                self._audio.close()
                self._audio = None
            self._settle(finalised)
            self._note_grid()
        if error is not None:
            raise error

    def _note_grid(self) -> None:
        if self.frames_repeated or self.frames_left_out:
            rate = float(1 / self._time_base)
            self.notes.append(f"recorded at a constant {rate:g} fps: {self.frames_repeated} frame time(s) "
                              f"held the picture before (frames dropped on the way), {self.frames_left_out} "
                              "frame(s) left out (two in one frame time)")

    def _settle(self, finalised: bool) -> None:
        """The partial file becomes the output when it was finalised and holds frames."""
        if not self.frames_written or not finalised:
            discard(self.partial)
            return
        existed = self.path.exists()
        try:
            commit(self.partial, self.path)
        except OSError as exc:
            discard(self.partial)
            raise self._error(f"cannot be put in place ({reason_of(exc)})") from exc
        self.kept, self.replaced = self.path, existed
        log.debug("wrote %d frames to %s", self.frames_written, self.path)

    def __enter__(self) -> FileSink:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
