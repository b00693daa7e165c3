"""The analyse stage: tracking (detection when due, landmarks every frame), selection."""
from __future__ import annotations

import numpy as np

from engines.frame_views import FrameViews
from stream.analysis.selection import Selector
from stream.analysis.tracklets import Tracker
from stream.runtime.slot import Slot


class AnalyseWorker:
    """Fills `out.payload` with the frame's targets: a tuple of `Target`."""

    name = "analyse"

    def __init__(self, tracker: Tracker, selector: Selector, default_fps: float = 30.0) -> None:
        self.tracker = tracker
        self.selector = selector
        self.default_fps = default_fps
        self._gray: np.ndarray | None = None  # reused grey frame

    def process(self, item: Slot, out: Slot) -> None:
        image = item.image
        if self._gray is None or self._gray.shape != image.shape[:2]:
            self._gray = np.empty(image.shape[:2], np.uint8)
        frame = FrameViews(image, self._gray)  # grey is converted only if a model reads it
        if item.pts is not None and item.time_base is not None:
            t = float(item.pts * item.time_base)
        else:
            t = item.seq / self.default_fps
        tracks = self.tracker.update(frame, item.seq, t)
        out.payload = tuple(self.selector.choose(tracks, self.tracker, image, item.seq))

    def close(self) -> None:
        self.tracker.close()
