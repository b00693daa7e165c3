"""The small protocols through which the pipeline uses engines: one per model kind."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from engines.face import Box, Face, ImageBGR, Landmarks68, SwapResult
from engines.frame_views import FrameViews


class Detector(Protocol):
    name: str
    @property
    def calls(self) -> int:
        """Model calls so far (a batched call counts once)."""
        ...

    def open(self) -> None: ...

    def forward(self, frame: FrameViews) -> list[tuple[Box, float]]:
        """Face boxes (frame pixels) and scores."""
        ...


class Landmarker(Protocol):
    name: str
    @property
    def calls(self) -> int:
        """Model calls so far (a batched call counts once)."""
        ...

    def open(self) -> None: ...

    def forward(self, frame: FrameViews, box: Box) -> Landmarks68:
        """68 landmarks of the face in `box`."""
        ...

    def forward_many(self, frame: FrameViews, boxes: list[Box]) -> list[Landmarks68]:
        """68 landmarks of each face box of one frame (one call: a runtime may batch)."""
        ...


class Embedder(Protocol):
    name: str
    @property
    def calls(self) -> int:
        """Model calls so far (a batched call counts once)."""
        ...
    threshold: float  # identity distance below which two faces are the same person

    def open(self) -> None: ...

    def forward(self, image: ImageBGR, landmarks: Landmarks68) -> npt.NDArray[np.float32]:
        """The identity embedding of the face with these landmarks."""
        ...

    def distance(self, a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> float:
        """Identity distance; below the engine's threshold means the same person."""
        ...


class Swapper(Protocol):
    name: str
    @property
    def calls(self) -> int:
        """Model calls so far (a batched call counts once)."""
        ...

    def open(self) -> None: ...

    def prepare_source(self, image: ImageBGR, landmarks: Landmarks68) -> object:
        """Everything about a source face that does not depend on the target (once per source)."""
        ...

    # A prepared source is the swapper's own (opaque) type: `Any` lets each swapper name its own.
    def forward(self, frame: ImageBGR, face: Face, source: Any) -> SwapResult | None:
        """The source warped onto the target face, over the face's region only."""
        ...

    def paste(self, frame: ImageBGR, face: Face, result: SwapResult) -> None:
        """Blend `result` into `frame`, in place, inside `result.region` only."""
        ...

    def forward_many(self, frame: ImageBGR, faces: Sequence[Face],
                     sources: Sequence[Any]) -> list[SwapResult | None]:
        """`forward` for each face of one frame, in one model call where the model batches."""
        ...


class Enhancer(Protocol):
    """Restores swapped faces (GFPGAN): run in the swap stage, pasted by the composite stage."""

    @property
    def calls(self) -> int:
        """Model calls so far (a batched call counts once)."""
        ...

    def open(self) -> None: ...

    def close(self) -> None: ...

    def forward(self, frame: ImageBGR, face: Face) -> SwapResult | None:
        """The restored face of `frame` (already swapped there), over the face's region."""
        ...

    def paste(self, frame: ImageBGR, face: Face, result: SwapResult) -> None:
        """Blend `result` into `frame`, in place, inside `result.region` only."""
        ...
