"""The analyse stage: tracking (detection when due, landmarks every frame), selection, and
the CPU work before the swap model: each chosen face's crop, into ring B's batch buffers."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from engines.frame_views import FrameViews
from engines.protocols import Swapper
from stream.analysis.selection import Selector
from stream.analysis.tracklets import Tracker
from stream.runtime.slot import Slot
from stream.stages.records import PreparedFaces


class AnalyseWorker:
    """Fills `out.payload` with the frame's faces to swap (`PreparedFaces`) and `out`'s
    buffers with their model inputs (the swapper's `prepare_batch`)."""

    name = "analyse"

    def __init__(self, tracker: Tracker, selector: Selector, swapper: Swapper, sources: Sequence[object],
                 default_fps: float = 30.0) -> None:
        self.tracker = tracker
        self.selector = selector
        self.swapper = swapper
        self.sources = list(sources)  # prepared source faces; replaced whole by `Pipeline.use_faces`
        self.default_fps = default_fps
        self._gray: np.ndarray | None = None  # reused grey frame
        # Optional steps the faces of the next frames leave out (a live run falling behind sheds
        # them: stream.job.cadence.LoadAdapter): the swapper's `optional_steps`, and "occlusion"
        # (no look for occluders). Replaced whole from another thread; read once a frame.
        self.skip: frozenset[str] = frozenset()

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
        targets = self.selector.choose(tracks, self.tracker, image, item.seq)
        sources = self.sources  # read once: another thread may hand the stage new faces
        faces = tuple(t.face for t in targets)
        skip = self.skip
        if skip:
            look = "occlusion" not in skip
            faces = tuple(replace(f, skip=skip, look=f.look if look else None) for f in faces)
        batch = self.swapper.prepare_batch(image, faces, [sources[t.source] for t in targets], out.buffers)
        out.payload = PreparedFaces(faces, batch)

    def close(self) -> None:
        self.tracker.close()
