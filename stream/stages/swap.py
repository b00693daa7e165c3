"""The swap stage: the swapper model, run on each target face of the frame."""
from __future__ import annotations

from collections.abc import Sequence

from engines.protocols import Enhancer, Swapper
from stream.runtime.slot import Slot


class SwapWorker:
    """Turns the frame's targets into `(face, SwapResult)` pairs in `out.payload`.

    With an enhancer, each swapped face is written into the frame here (the frame is this
    stage's alone until it is published) and the enhancer's result is what the composite
    stage pastes: the heavy models all run in this stage.
    """

    name = "swap"

    def __init__(self, swapper: Swapper, sources: Sequence[object], enhancer: Enhancer | None = None) -> None:
        self.swapper = swapper
        self.sources = list(sources)
        self.enhancer = enhancer

    def process(self, item: Slot, out: Slot) -> None:
        image = item.image
        targets = item.payload
        sources = self.sources  # read once: another thread may hand the stage new faces
        if len(targets) > 1:  # one model call for the frame's faces where the swapper batches
            found = self.swapper.forward_many(image, [t.face for t in targets], [sources[t.source] for t in targets])
        else:
            found = [self.swapper.forward(image, t.face, sources[t.source]) for t in targets]
        pairs = [(t.face, res) for t, res in zip(targets, found) if res is not None]
        if self.enhancer is not None:
            enhanced = []
            for face, res in pairs:
                self.swapper.paste(image, face, res)
                better = self.enhancer.forward(image, face)
                if better is not None:
                    enhanced.append((face, better))
            pairs = enhanced
        out.payload = tuple(pairs)

    def close(self) -> None:
        pass
