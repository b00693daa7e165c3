"""A live sink from what the user typed: `vcam`, `preview`, `rtsp://...`, or a file."""
from __future__ import annotations

import os

from stream.config import Config
from stream.media.audio_delay import AudioBus
from stream.media.video_info import VideoInfo
from stream.sinks.file import FileSink
from stream.sinks.protocol import LiveSink

# Live encoding must keep up on the CPU next to the models: never slower than veryfast.
LIVE_PRESETS = ("ultrafast", "superfast", "veryfast")


def open_sink(spec: str, info: VideoInfo, cfg: Config, vcam_backend: str | None = None,
              vcam_device: str | None = None, audio_from: str | os.PathLike[str] | None = None,
              open_timeout: float = 10.0, sound: AudioBus | None = None) -> LiveSink:
    """The live sink `spec` names (not opened yet): a file for anything not named otherwise
    (with the sound of `audio_from`, when given, see `record_sink`). `open_timeout`: how long
    an rtsp:// output's server may stay silent before opening fails. `sound`: a live
    source's sound (an RTSP input's), carried by rtsp:// outputs and files, delayed as
    their pictures are."""
    delay = sound.subscribe() if sound is not None and sound.format is not None else None
    fps = float(info.rate) if info.rate > 0 else 30.0
    if spec == "vcam":
        from stream.sinks.vcam import VirtualCameraSink

        return VirtualCameraSink(info.width, info.height, fps, device=vcam_device, backend=vcam_backend)
    if spec == "preview":
        from stream.sinks.preview import PreviewSink

        return PreviewSink()
    if spec.startswith(("rtsp://", "rtsps://")):
        from stream.sinks.rtsp import RtspSink

        return RtspSink(spec, info.width, info.height, fps, cfg.encode, preset=live_preset(cfg),
                        open_timeout=open_timeout, audio=delay)
    return record_sink(spec, info, cfg, audio_from=audio_from, sound=sound)


def record_sink(path: str, info: VideoInfo, cfg: Config,
                audio_from: str | os.PathLike[str] | None = None, sound: AudioBus | None = None) -> FileSink:
    """The file a live run is recorded into (`--record`): at the input's nominal rate,
    frames placed by their capture time (see FileSink's `constant_rate`), with the sound
    of `audio_from` (the clip played as a camera) in step with them, or a live source's
    `sound` (timed by its capture clock, as the frames)."""
    delay = sound.subscribe() if sound is not None and sound.format is not None and audio_from is None else None
    return FileSink(path, info, cfg.encode, audio_from=audio_from, constant_rate=True, live_audio=delay)


def live_preset(cfg: Config) -> str:
    """The configured x264 preset, or veryfast when that one is too slow for live."""
    return cfg.encode.preset if cfg.encode.preset in LIVE_PRESETS else "veryfast"
