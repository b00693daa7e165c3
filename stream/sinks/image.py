"""The one frame of a picture run, written as a picture file."""
from __future__ import annotations

import os
from pathlib import Path

from stream.media.image_io import write_image
from stream.runtime.slot import Slot


class ImageSink:
    """Writes the one frame of an image run when it arrives."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.frames_written = 0

    @property
    def name(self) -> str:
        return str(self.path)

    def write(self, slot: Slot) -> None:
        write_image(self.path, slot.image)
        self.frames_written += 1

    def close(self) -> None:
        pass
