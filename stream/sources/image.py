"""One still picture as a one-frame stream."""
from __future__ import annotations

import time

import numpy as np

from stream.runtime.slot import Slot


class ImageSource:
    """A picture already read (BGR), delivered once."""

    def __init__(self, image: np.ndarray) -> None:
        self._image = image
        self._done = False
        self.wait_s = 0.0

    def read_into(self, slot: Slot) -> bool:
        if self._done:
            return False
        np.copyto(slot.buffers["image"], self._image)
        slot.seq, slot.pts, slot.time_base = 0, 0, None
        slot.capture_time = time.monotonic()
        self._done = True
        return True

    def close(self) -> None:
        pass
