"""The swap stage: the swapper's model on the frame's faces, one batch per frame (and the
enhancer, when there is one). The crops were made by the analyse stage; the paste-back is
the composite stage's, so this stage's model call overlaps their CPU work."""
from __future__ import annotations

from engines.classic.occlusion import find_occluders
from engines.protocols import Enhancer, Swapper
from stream.runtime.slot import Slot
from stream.stages.carry import CarriedSwapper
from stream.stages.records import PreparedFaces, SwappedFaces


class SwapWorker:
    """Runs the swapper's `forward_batch` on ring B's prepared faces (their inputs in the
    slot's buffers), its output into ring C's slot buffers where the runtime writes there.

    With an enhancer, the swap is finished here and each swapped face written into the frame
    (the frame is this stage's alone until it is published), so the enhancer reads it; the
    enhancer's results are what the composite stage pastes: the heavy models all run in
    this stage.
    """

    name = "swap"

    def __init__(self, swapper: Swapper, enhancer: Enhancer | None = None) -> None:
        self.swapper = swapper
        self.enhancer = enhancer

    def process(self, item: Slot, out: Slot) -> None:
        prepared: PreparedFaces = item.payload
        output = self.swapper.forward_batch(prepared.batch, item.buffers, out.buffers)
        if self.enhancer is None:
            out.payload = SwappedFaces(prepared.faces, prepared.batch, output)
            return
        image = item.image
        found = self.swapper.finish_batch(image, prepared.batch, output)
        pairs = [(face, res) for face, res in zip(prepared.faces, found) if res is not None]
        if pairs and getattr(self.swapper, "cuts_occluders", False):
            faces = find_occluders(image, [face for face, _ in pairs])
            pairs = list(zip(faces, (res for _, res in pairs)))
        enhanced = []
        for face, res in pairs:
            self.swapper.paste(image, face, res)
            better = self.enhancer.forward(image, face)
            if better is not None:
                enhanced.append((face, better))
        out.payload = SwappedFaces(prepared.faces, prepared.batch, results=tuple(enhanced))

    def close(self) -> None:
        if isinstance(self.swapper, CarriedSwapper):  # its worker thread ends with the run
            self.swapper.close()
