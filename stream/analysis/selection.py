"""Face selection: which tracked faces are swapped, and with which source face.

- all: every face (largest first, up to the frame's budget) gets source 0;
- largest: only the largest face;
- reference: only faces of the person in a reference photo (embedding distance);
- mapping: several sources, each to the faces of its own reference person.

Faces are swapped (and composited) largest first, or in the detector's own order
(`select.order: detector`, the reference mode's: insightface's loop takes them so).

Identity modes read each track's embedding from the tracklet cache, so the embedder
runs when a track is born (and at rare re-checks), not per frame.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engines.face import Face, ImageBGR
from engines.protocols import Embedder
from stream.analysis.tracklets import Track, Tracker, landmark_box
from stream.config import SelectConfig


@dataclass(frozen=True, eq=False)
class Target:
    """A face to swap in one frame, and the index of the source face to put there."""

    face: Face
    source: int


def _area(tr: Track) -> float:
    x0, y0, x1, y1 = landmark_box(tr.landmarks)
    return (x1 - x0) * (y1 - y0)


class Selector:
    """Chooses targets among the tracks of a frame (see module doc)."""

    def __init__(self, config: SelectConfig, references: list[np.ndarray],
                 embedder: Embedder | None, max_faces: int) -> None:
        self.config = config
        self.references = references
        self.embedder = embedder
        self.max_faces = max_faces
        if self.needs_identity and (embedder is None or not references):
            raise ValueError(f"select mode {config.mode!r} needs reference embeddings")

    @property
    def needs_identity(self) -> bool:
        return self.config.mode in ("reference", "mapping")

    def _identify(self, tr: Track, tracker: Tracker, image: ImageBGR, seq: int) -> int | None:
        before = tr.embedded_at
        emb = tracker.embed(tr, image, seq)
        if tr.embedded_at == before and before >= 0:
            return tr.source  # cached: nothing recomputed this frame
        assert emb is not None and self.embedder is not None
        dists = [self.embedder.distance(emb, ref) for ref in self.references]
        best = int(np.argmin(dists))
        threshold = self.config.threshold if self.config.threshold is not None else self.embedder.threshold
        tr.source = best if dists[best] < threshold else None
        return tr.source

    def choose(self, tracks: list[Track], tracker: Tracker, image: ImageBGR, seq: int) -> list[Target]:
        if self.config.order == "detector":
            ordered = sorted(tracks, key=lambda tr: tr.order)
        else:
            ordered = sorted(tracks, key=_area, reverse=True)
        if self.config.mode == "largest":
            ordered = ordered[:1]
        out: list[Target] = []
        for tr in ordered:
            if len(out) >= self.max_faces:
                break
            source = self._identify(tr, tracker, image, seq) if self.needs_identity else 0
            if source is not None:
                out.append(Target(tr.face(), source))
        return out
