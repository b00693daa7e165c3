"""What a live source is to a live run: a source that opens to a known picture size and
rate, has a name for messages, and describes itself for the run's report."""
from __future__ import annotations

from typing import Protocol

from stream.media.video_info import VideoInfo
from stream.runtime.protocols import Source


class LiveSource(Source, Protocol):
    info: VideoInfo | None  # set by open()

    @property
    def name(self) -> str: ...

    def open(self) -> VideoInfo:
        """Connect (or start capturing) and read the first frame; a SourceError when it cannot."""
        ...

    def describe(self) -> dict[str, object]:
        """The source's figures for the report: its name, measured rate, and what else it counts."""
        ...
