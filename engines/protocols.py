"""The small protocols through which the pipeline uses engines: one per model kind."""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from engines.face import Box, Face, ImageBGR, Keypoints5, Landmarks68, SwapResult
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


_DETECTION_THREAD = threading.local()
_T = TypeVar("_T")
_U = TypeVar("_U")


def detect_in_background() -> None:
    """Mark the calling thread as one that runs detections beside the pipeline's busy stages
    (stream.analysis.background_detector's): a detector then does all its work in that
    thread. In line, where the analyse stage waits for it (a live run's first frame, an
    empty scene, a face lost), it may spread its work over a helper thread as well."""
    _DETECTION_THREAD.background = True


def detecting_in_background() -> bool:
    """Whether the calling thread was marked by `detect_in_background`."""
    return bool(getattr(_DETECTION_THREAD, "background", False))


def beside_helper(own: Callable[[], _T], helper: Callable[[], _U], name: str) -> tuple[_T, _U]:
    """`own()` on the calling thread while `helper()` runs on a helper thread called `name`
    (an in-line detection's work split in two; the work must let the GIL go to gain): both
    results, once both are done. The helper's exception is raised again here."""
    got: list[_U] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            got.append(helper())
        except BaseException as exc:  # raised again on the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        mine = own()
    finally:
        thread.join()
    if failed:
        raise failed[0]
    return mine, got[0]


@runtime_checkable
class PointDetector(Protocol):
    """A detector that also finds five alignment points per face (SCRFD)."""

    def forward_points(self, frame: FrameViews) -> list[tuple[Box, float, Keypoints5]]:
        """Face boxes, scores and five points (frame pixels), in the detector's own order."""
        ...


@runtime_checkable
class WarmDetector(Protocol):
    """A detector whose first detection of new faces in a process is slow (its judge's
    buffers are made then): a live run warms it when it starts, so that first detection
    does not hold the frames that come in meanwhile."""

    def warm(self) -> None: ...


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


BufferSpec = Mapping[str, tuple[tuple[int, ...], np.dtype]]  # name -> (shape, dtype)


@dataclass(frozen=True)
class BatchSpec:
    """The host buffers one frame's batch of faces needs, allocated once per ring slot by the
    pipeline (pinned memory on CUDA): `inputs` are written by `prepare_batch` and read by
    `forward_batch`; `outputs` are where `forward_batch` lands the model's output when its
    runtime can write there. Empty for a swapper with nothing to stage."""

    inputs: BufferSpec = field(default_factory=dict)
    outputs: BufferSpec = field(default_factory=dict)


class Swapper(Protocol):
    """A frame's faces go through three phases, each on its own pipeline thread, so frame N's
    model call overlaps frame N+1's crops and frame N-1's paste-back:
    `prepare_batch` (CPU: the crops, into the slot's input buffers), `forward_batch` (the
    model, one call for the frame's faces where it batches), `finish_batch` (CPU: decode and
    blend). `forward`/`forward_many` do all three at once for one frame."""

    name: str
    @property
    def calls(self) -> int:
        """Model calls so far (a batched call counts once)."""
        ...

    def open(self) -> None: ...

    def prepare_source(self, image: ImageBGR, landmarks: Landmarks68) -> object:
        """Everything about a source face that does not depend on the target (once per source)."""
        ...

    def prepare_views(self, views: Sequence[tuple[ImageBGR, Landmarks68]]) -> object:
        """One source person from several photos (image, points each): what `prepare_source`
        gives for one, made from them all (the neural swappers: the mean identity; the
        classical one: every view, each target face warped from the nearest)."""
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

    def batch_spec(self, max_faces: int) -> BatchSpec:
        """The buffers a batch of up to `max_faces` faces needs (call after `open()`)."""
        ...

    def prepare_batch(self, frame: ImageBGR, faces: Sequence[Face], sources: Sequence[Any],
                      inputs: Mapping[str, np.ndarray]) -> Any:
        """CPU work before the model: write the faces' model inputs into `inputs` (buffers
        made from `batch_spec(...).inputs`) and return what the later phases need (the
        swapper's own type, holding no reference to `inputs`)."""
        ...

    def forward_batch(self, batch: Any, inputs: Mapping[str, np.ndarray],
                      outputs: Mapping[str, np.ndarray]) -> Any:
        """The model on a prepared batch: one call for all its faces where the model batches.
        The result may live in `outputs`, never in `inputs` (their slot is reused as soon as
        this returns)."""
        ...

    def finish_batch(self, frame: ImageBGR, batch: Any, swapped: Any) -> list[SwapResult | None]:
        """CPU work after the model: each face's result (as `forward_many` gives); `frame`
        (as it was when the batch was prepared) is only read. Face k is blended onto the frame
        as it stands after faces 0..k-1 are pasted, so pasting the results in order composites
        them one after another (insightface's per-frame loop)."""
        ...


@runtime_checkable
class CarrySwapper(Protocol):
    """A swapper whose swap of a face can be made on one frame and carried onto the later ones
    (stream/stages/carry.py: live runs swap each face at a cadence, off the frame path). The
    cut and the carry are cheap and run on the frame path; the swap itself may run on any
    thread, while the frame it was cut from is gone."""

    def cut(self, frame: ImageBGR, face: Face, source: Any) -> Any:
        """What the swap of `face` needs from `frame`, copied out of it (the swapper's own
        type); None when the face cannot be swapped."""
        ...

    def swap_cut(self, cut: Any) -> Any:
        """The swap of a cut face (the slow part): the swapper's own type, made for the face's
        landmarks on the frame it was cut from."""
        ...

    def carry_many(self, frame: ImageBGR, faces: Sequence[Face], swaps: Sequence[Any]) -> list[SwapResult | None]:
        """Each face's swap (None: it has none) moved from the landmarks it was made for onto
        the face's landmarks in `frame` (only read): results to `paste` in order, as
        `finish_batch`'s. None for a face with no swap or one too far from it to carry."""
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
