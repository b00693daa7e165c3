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
        results = []
        for target in item.payload:
            res = self.swapper.forward(image, target.face, self.sources[target.source])
            if res is not None:
                results.append((target.face, res))
        out.payload = tuple(results)

    def close(self) -> None:
        pass
