"""The one frame of a picture run, written as a picture file."""
from __future__ import annotations

import os
from pathlib import Path

from stream.media.image_io import write_image
from stream.media.picture import Picture
from stream.runtime.slot import Slot


class ImageSink:
    """Writes the one frame of an image run when it arrives.

    Given the `picture` the frame was read from, it puts back what the swap did not use
    (alpha, 16-bit depth) as far as the output's format holds it; `notes` says what it
    could not hold.
    """

    def __init__(self, path: str | os.PathLike[str], picture: Picture | None = None) -> None:
        self.path = Path(path)
        self.picture = picture
        self.frames_written = 0

    @property
    def name(self) -> str:
        return str(self.path)

    @property
    def notes(self) -> list[str]:
        """One line for the user per thing of the input picture this output format loses."""
        return self.picture.losses(self.path.suffix) if self.picture is not None else []

    def write(self, slot: Slot) -> None:
        image = slot.image if self.picture is None else self.picture.restored(slot.image, self.path.suffix)
        write_image(self.path, image)
        self.frames_written += 1

    def close(self) -> None:
        pass
