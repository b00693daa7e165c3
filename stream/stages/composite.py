"""The composite stage: the CPU work after the swap model (decode and blend of each face),
then each result pasted back into its frame, region by region."""
from __future__ import annotations

from engines.classic.occlusion import find_occluders
from engines.protocols import Enhancer, Swapper
from stream.runtime.metrics import Metrics
from stream.runtime.slot import Pasted, Slot
from stream.stages.records import SwappedFaces


class CompositeWorker:
    """Finishes the swap stage's output (`SwappedFaces`) with the swapper's `finish_batch`
    and pastes the results into the frame, in place."""

    name = "composite"

    def __init__(self, swapper: Swapper, metrics: Metrics, enhancer: Enhancer | None = None) -> None:
        self.swapper = swapper
        self.metrics = metrics
        # what the swap stage hands over was made by the enhancer when there is one
        self.paster: Swapper | Enhancer = enhancer if enhancer is not None else swapper

    def process(self, item: Slot, out: Slot) -> None:
        image = item.image
        swapped: SwappedFaces = item.payload
        pairs = swapped.results
        if pairs is None:
            # Face k is blended onto the frame as it stands after faces 0..k-1 (insightface's
            # loop): pasting the results in order gives that composite, seams-free.
            found = self.swapper.finish_batch(image, swapped.batch, swapped.output)
            pairs = tuple((face, res) for face, res in zip(swapped.faces, found) if res is not None)
        if pairs and getattr(self.paster, "cuts_occluders", False):
            # Every face looked at on the frame as decoded, before any paste changes it.
            faces = find_occluders(image, [face for face, _ in pairs])
            pairs = tuple(zip(faces, (res for _, res in pairs)))
        for face, result in pairs:
            self.paster.paste(image, face, result)
        out.payload = Pasted(tuple(face.box for face, _ in pairs))
        self.metrics.faces_swapped += out.payload.count
        self.metrics.frames_with_faces += 1 if pairs else 0

    def close(self) -> None:
        pass
