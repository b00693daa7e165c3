"""Reading an output back before it is called written: does it open, what does it hold."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import av

from stream.errors import SinkError, reason_of


@dataclass(frozen=True)
class Probe:
    """What a media file holds, read back from the file itself."""

    video_frames: int  # video packets demuxed (one per frame)
    duration: float  # seconds, from the container (0.0 when it does not say)
    width: int
    height: int
    streams: list[str] = field(default_factory=list)  # "video h264", "audio aac", ...

    def as_dict(self) -> dict[str, object]:
        return {"video_frames": self.video_frames, "duration": round(self.duration, 3),
                "size": [self.width, self.height], "streams": list(self.streams)}


def probe_video(path: str | os.PathLike[str]) -> Probe:
    """Open `path` and count its video frames by demuxing (no decoding); a SinkError naming
    the file when it cannot be opened or holds no video."""
    path = Path(path)
    try:
        with av.open(str(path), "r") as container:
            if not container.streams.video:
                raise SinkError(f"output {str(path)!r} holds no video stream")
            video = container.streams.video[0]
            streams = [f"{s.type} {s.codec_context.name}" for s in container.streams]
            frames = sum(1 for packet in container.demux(video) if packet.size)
            duration = container.duration / av.time_base if container.duration else 0.0
            return Probe(frames, duration, video.codec_context.width, video.codec_context.height, streams)
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise SinkError(f"output {str(path)!r} was written but cannot be read back ({reason_of(exc)})") from exc
