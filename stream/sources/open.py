"""A live source from what the user typed: `webcam:N`, `webcam:/dev/videoN`, `rtsp://...`,
or a video file played in real time as a camera would."""
from __future__ import annotations

from pathlib import Path

from stream.errors import SourceError
from stream.sources.protocol import LiveSource

# An RTSP input: seconds for the server to answer, then for the first picture (a camera
# joined between keyframes shows the next one, and some send them 10 s apart).
OPEN_TIMEOUT_S = 15.0


def open_source(spec: str, width: int | None = None, height: int | None = None,
                fps: float | None = None, open_timeout: float = OPEN_TIMEOUT_S) -> LiveSource:
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
