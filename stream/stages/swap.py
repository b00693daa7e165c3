"""The swap stage: the swapper model, run on each target face of the frame."""
from __future__ import annotations

from collections.abc import Sequence

from engines.protocols import Swapper
from stream.slot import Slot


class SwapWorker:
    """Turns the frame's targets into `(face, SwapResult)` pairs in `out.payload`."""

    name = "swap"

    def __init__(self, swapper: Swapper, sources: Sequence[object]) -> None:
        self.swapper = swapper
        self.sources = list(sources)

    def process(self, item: Slot, out: Slot) -> None:
        image = item.image
        targets = item.payload
        batched = getattr(self.swapper, "forward_many", None)
        if batched is not None and len(targets) > 1:  # one model call for the frame's faces
            found = batched(image, [t.face for t in targets], [self.sources[t.source] for t in targets])
        else:
            found = [self.swapper.forward(image, t.face, self.sources[t.source]) for t in targets]
        out.payload = tuple((t.face, res) for t, res in zip(targets, found) if res is not None)

    def close(self) -> None:
        pass
