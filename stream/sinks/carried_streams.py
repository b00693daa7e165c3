"""The input's other streams in the output: every audio track and the subtitles, copied when
the output container holds their codec, audio transcoded when it does not (PCM into MP4
becomes AAC), and whatever cannot be kept named in one line.

A demuxer of its own (not the video source's) keeps source and sink independent; packets
are muxed as video time advances, so the file stays interleaved.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av

from stream.errors import SourceError, reason_of

log = logging.getLogger(__name__)

# Audio codecs each container family is known to carry so that common players (and
# Debian's ffmpeg 5.1) read them back. Everything else is transcoded to the family's codec.
_MP4_AUDIO = {"aac", "mp3", "ac3", "eac3", "alac", "opus", "flac"}
_PCM = {"pcm_s16le", "pcm_s16be", "pcm_s24le", "pcm_s24be", "pcm_s32le", "pcm_s32be", "pcm_f32le",
        "pcm_f32be", "pcm_u8"}
AUDIO_COPY = {".mp4": _MP4_AUDIO, ".m4v": _MP4_AUDIO, ".mov": _MP4_AUDIO | _PCM,
              ".webm": {"opus", "vorbis"}, ".avi": {"mp3", "ac3", "pcm_s16le", "pcm_u8"}}
AUDIO_TRANSCODE = {".mp4": "aac", ".m4v": "aac", ".mov": "aac", ".webm": "libopus", ".avi": "libmp3lame",
                   ".mkv": "aac"}
SUBTITLE_COPY = {".mp4": {"mov_text"}, ".m4v": {"mov_text"}, ".mov": {"mov_text"}, ".webm": {"webvtt"},
                 ".avi": set(), ".mkv": {"subrip", "ass", "ssa", "webvtt", "text", "dvd_subtitle",
                                         "hdmv_pgs_subtitle", "dvb_subtitle"}}


# The standard layout of each channel count (for an encoder; more than 8 become stereo).
_LAYOUTS = {1: "mono", 2: "stereo", 3: "2.1", 4: "quad", 5: "5.0", 6: "5.1", 7: "6.1", 8: "7.1"}


@dataclass
class _Carried:
    """One input stream kept in the output: copied packet for packet, or re-encoded."""

    source: Any  # the input stream
    target: Any  # the output stream
    transcode: bool
    packets: int = 0


def codec_of(stream: Any) -> str:
    """The stream's codec by its canonical name ("mp3", "subrip"), not its decoder's
    ("mp3float", "srt"); "" when the stream has none (data, attachments)."""
    ctx = getattr(stream, "codec_context", None)
    codec = getattr(ctx, "codec", None)
    if codec is None:
        return ""
    return str(getattr(codec, "canonical_name", "") or codec.name)


def _describe(stream: Any) -> str:
    return f"{stream.type} stream {stream.index} ({codec_of(stream) or 'no codec'})"


class CarriedStreams:
    """Every audio and subtitle stream of `path` that `output` (a file ending in `suffix`)
    can hold. `notes` says what was transcoded or dropped, one line each kind.

    Their timestamps are the input's, as the video's are in a swap. `from_video_start`: the
    video of the output starts at 0 with the input's first video frame (a clip played as a
    camera, timed by the capture clock), so the other streams are moved by as much."""

    def __init__(self, path: Path, output: av.container.OutputContainer, suffix: str,
                 from_video_start: bool = False) -> None:
        self.path = path
        try:
            self._input = av.open(str(path), "r")
        except (av.FFmpegError, OSError, ValueError) as exc:
            raise SourceError(f"audio {str(path)!r}: cannot be read ({reason_of(exc)})") from exc
        # Seconds taken off every carried timestamp: where the input's video starts.
        self.shift = 0.0
        video = self._input.streams.video[0] if self._input.streams.video else None
        if from_video_start and video is not None and video.start_time is not None and video.time_base:
            self.shift = float(video.start_time * video.time_base)
        suffix = suffix.lower()
        supported = set(getattr(output, "supported_codecs", ()) or ())
        self.carried: dict[int, _Carried] = {}
        dropped: list[str] = []
        transcoded: list[str] = []
        for stream in self._input.streams:
            if stream.type == "video":
                continue  # the first is ours; further video streams are named as dropped below
            name = codec_of(stream)
            if stream.type == "audio":
                copyable = AUDIO_COPY.get(suffix, supported)
                if name in copyable:
                    self._copy(stream, output)
                    continue
                codec = AUDIO_TRANSCODE.get(suffix, "aac")
                if codec in av.codecs_available and (not supported or codec.removeprefix("lib") in supported
                                                     or codec in supported):
                    self._transcode(stream, output, codec)
                    transcoded.append(f"{_describe(stream)} to {codec.removeprefix('lib')}")
                    continue
            elif stream.type == "subtitle" and name in SUBTITLE_COPY.get(suffix, supported):
                self._copy(stream, output)
                continue
            dropped.append(_describe(stream))
        for stream in self._input.streams.video[1:]:
            dropped.append(_describe(stream))
        self.notes: list[str] = []
        if transcoded:
            self.notes.append(f"transcoded for {suffix}: {', '.join(transcoded)}")
        if dropped:
            self.notes.append(f"not carried into {suffix} (the container cannot hold them): {', '.join(dropped)}")
        chosen = [c.source for c in self.carried.values()]
        self._packets = self._input.demux(*chosen) if chosen else iter(())
        self._pending: av.Packet | None = None
        self._done = not chosen

    @property
    def audio_tracks(self) -> int:
        return sum(1 for c in self.carried.values() if c.source.type == "audio")

    def _copy(self, stream: Any, output: av.container.OutputContainer) -> None:
        target = output.add_stream_from_template(stream)
        self.carried[stream.index] = _Carried(stream, target, transcode=False)

    def _transcode(self, stream: Any, output: av.container.OutputContainer, codec: str) -> None:
        ctx = stream.codec_context
        rate = ctx.sample_rate or 48000
        if codec == "libopus" and rate not in (8000, 12000, 16000, 24000, 48000):
            rate = 48000
        target = output.add_stream(codec, rate=rate)
        # The standard layout for the channel count: an input's may be unnamed ("1 channels"),
        # which encoders refuse.
        channels = ctx.layout.nb_channels if ctx.layout is not None else 2
        if codec == "libmp3lame":
            channels = min(channels, 2)
        target.layout = _LAYOUTS.get(channels, "stereo")
        self.carried[stream.index] = _Carried(stream, target, transcode=True)

    def mux_until(self, output: av.container.OutputContainer, until: float | None) -> None:
        """Mux the packets that start before `until` seconds (all that are left for None)."""
        while not self._done:
            packet = self._pending
            if packet is None:
                try:
                    packet = next(self._packets)
                except (StopIteration, av.FFmpegError, OSError) as exc:
                    if not isinstance(exc, StopIteration):
                        log.warning("%s: stopped reading its other streams: %s", self.path, reason_of(exc))
                    self._done = True
                    return
                if packet.dts is None and packet.pts is None:  # a demuxer's end-of-stream flush
                    continue
            stamp = packet.dts if packet.dts is not None else packet.pts
            if until is not None and packet.time_base is not None and stamp * packet.time_base - self.shift >= until:
                self._pending = packet
                return
            self._pending = None
            self._mux(output, packet)

    def _mux(self, output: av.container.OutputContainer, packet: av.Packet) -> None:
        carried = self.carried.get(packet.stream.index)
        if carried is None:
            return
        if not carried.transcode:
            if self.shift and packet.time_base:
                ticks = round(self.shift / packet.time_base)
                if packet.pts is not None:
                    packet.pts -= ticks
                if packet.dts is not None:
                    packet.dts -= ticks
            packet.stream = carried.target
            output.mux(packet)
            carried.packets += 1
            return
        try:
            frames = packet.decode()
        except (av.FFmpegError, ValueError) as exc:  # one bad audio packet must not end the video
            log.debug("%s: audio packet skipped: %s", self.path, exc)
            return
        for frame in frames:
            frame.pts = None  # the encoder numbers its own samples from the start
            for out in carried.target.encode(frame):
                output.mux(out)
                carried.packets += 1

    def finish(self, output: av.container.OutputContainer) -> None:
        """Flush the transcoders (what they hold belongs before the trailer)."""
        for carried in self.carried.values():
            if carried.transcode:
                for out in carried.target.encode(None):
                    output.mux(out)
                    carried.packets += 1

    def close(self) -> None:
        self._input.close()
