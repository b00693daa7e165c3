"""Decoded frames into the 8-bit BGR pictures of a run whose outputs are SDR (live: RTSP,
WebRTC, the virtual camera): HDR frames (PQ, HLG) are tone-mapped, the rest converted as
they are (stream.media.convert)."""
from __future__ import annotations

import logging

import av
import numpy as np

from stream.media.convert import convert_into
from stream.media.hdr import TRANSFER_NAMES, dynamic_of
from stream.media.tone_map import ToneMapper

log = logging.getLogger(__name__)


class SdrPictures:
    """`convert(frame, image)` per frame; `note` says, once an HDR frame came, what was done."""

    def __init__(self) -> None:
        self._i420: np.ndarray | None = None
        self._mapper: ToneMapper | None = None
        self.note: str | None = None

    def prepare(self, frame: av.VideoFrame, width: int, height: int) -> ToneMapper | None:
        """The tone map for frames like `frame` into pictures of this size (None for SDR
        frames); sets `note` at the first HDR frame."""
        if frame.color_trc not in TRANSFER_NAMES:
            return None
        mapper = self._mapper
        if mapper is None or (mapper.width, mapper.height) != (width, height) \
                or mapper.dynamic.transfer != frame.color_trc:
            mapper = self._mapper = ToneMapper(dynamic_of(frame), width, height)
            if self.note is None:
                self.note = f"{mapper.describe()}: the live outputs are SDR"
                log.info("%s", self.note)
        return mapper

    def convert(self, frame: av.VideoFrame, image: np.ndarray) -> None:
        """`frame` into `image` (H, W, 3 BGR uint8; a frame of another size is scaled)."""
        h, w = image.shape[:2]
        mapper = self.prepare(frame, w, h)
        if mapper is not None:
            mapper(frame, image)
            return
        if self._i420 is None or self._i420.shape != (h * 3 // 2, w):
            self._i420 = np.empty((h * 3 // 2, w), np.uint8)
        convert_into(frame, image, self._i420)
