"""The composite stage: each swapped face blended back into its frame, region by region."""
from __future__ import annotations

from engines.protocols import Enhancer, Swapper
from stream.runtime.metrics import Metrics
from stream.runtime.slot import Slot


class CompositeWorker:
    """Pastes the swap results of `item.payload` into the frame, in place."""

    name = "composite"

    def __init__(self, swapper: Swapper, metrics: Metrics, enhancer: Enhancer | None = None) -> None:
        self.swapper = swapper
        self.metrics = metrics
        # what the swap stage hands over was made by the enhancer when there is one
        self.paster: Swapper | Enhancer = enhancer if enhancer is not None else swapper

    def process(self, item: Slot, out: Slot) -> None:
        image = item.image
        for face, result in item.payload:
            self.paster.paste(image, face, result)
        n = len(item.payload)
        self.metrics.faces_swapped += n
        self.metrics.frames_with_faces += 1 if n else 0
        out.payload = n

    def close(self) -> None:
        pass
