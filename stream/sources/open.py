"""A live source from what the user typed: `webcam:N`, `webcam:/dev/videoN`, `rtsp://...`,
or a video file played in real time as a camera would."""
from __future__ import annotations

from pathlib import Path

from stream.errors import SourceError
from stream.sources.protocol import LiveSource


def open_source(spec: str, width: int | None = None, height: int | None = None,
                fps: float | None = None, open_timeout: float = 10.0) -> LiveSource:
    """The live source `spec` names (not opened yet); a SourceError for anything else."""
    if spec.startswith(("rtsp://", "rtsps://")):
        from stream.sources.rtsp import RtspSource

        return RtspSource(spec, open_timeout=open_timeout)
    from stream.sources.capture import WebcamSource, parse_webcam

    if spec.startswith("webcam:") or spec.startswith("/dev/video") or spec.isdigit():
        return WebcamSource(parse_webcam(spec), width, height, fps)
    if Path(spec).is_file():
        return WebcamSource(spec)  # a clip standing in for a camera, at its own rate
    raise SourceError(f"input {spec!r}: not webcam:N, rtsp://..., or an existing video file")
