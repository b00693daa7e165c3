"""Face masks for the neural swappers: which pixels of the swapped crop are pasted.

Each mask is a float32 map over the swapper's crop (1: pasted, 0: the target kept); the
masks chosen are combined by their minimum and multiply insightface's soft paste mask.

- `box`: the crop with its edges faded (a blur of `blur` x half the crop, after `padding`
  percent cut from each side: top, right, bottom, left).
- `area`: from the target's 68 landmarks, no model: the face's hull, less each area not
  chosen (upper-face, lower-face, mouth). Leaving out `mouth` keeps the target's own mouth,
  live and free: its lips and teeth move as they do.
- `occlusion`: an XSeg model (input NHWC [1,256,256,3], BGR in 0..1; output [1,256,256,1],
  1 where the face is visible): hands, hair, glasses in front of the face are kept.
- `region`: a BiSeNet face parser (input NCHW [1,3,512,512], RGB normalised by ImageNet's
  mean and std; output [1,19,512,512] class logits): only the chosen regions are pasted.

The model masks are computed on the target's crop, on the swap stage with the swapper's call
(their inputs are prepared with the crop), and reach the composite stage as crop-space maps.
With `every` = k > 1 a tracked face's model masks are recomputed on every k-th of its frames
only; in between, its last maps are used again in the crop, which follows the face: they are
warped with its current alignment (live presets state their k).
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from engines.backends.base import InferenceRuntime
from engines.errors import EngineError
from engines.face import AREAS

Mask = npt.NDArray[np.float32]  # (S, S) in 0..1, crop space

MASK_TYPES = ("box", "occlusion", "area", "region")
# The face parser's classes (CelebAMask-HQ's order, as the BiSeNet exports use it).
REGIONS: dict[str, int] = {"skin": 1, "left-eyebrow": 2, "right-eyebrow": 3, "left-eye": 4, "right-eye": 5,
                           "glasses": 6, "nose": 10, "mouth": 11, "upper-lip": 12, "lower-lip": 13}
OCCLUSION_SIZE, REGION_SIZE = 256, 512
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)
OCCLUSION_INPUT, REGION_INPUT = "occlusion_input", "region_input"  # their rows in the swap batch
MAX_TRACKS = 64  # tracks whose last model masks are kept (the oldest are dropped)


@dataclass(frozen=True)
class MaskOptions:
    types: tuple[str, ...] = ()
    areas: tuple[str, ...] = tuple(AREAS)
    regions: tuple[str, ...] = tuple(REGIONS)
    blur: float = 0.3  # the box mask's fade, over half the crop
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # percent cut from top, right, bottom, left
    every: int = 1  # a tracked face's model masks recomputed every k-th frame, reused between

    def __post_init__(self) -> None:
        if not isinstance(self.every, int) or self.every < 1:
            raise ValueError(f"mask cadence 'every' must be a whole number >= 1, got {self.every!r}")
        for kind, given, known in (("mask type", self.types, MASK_TYPES), ("mask area", self.areas, AREAS),
                                   ("mask region", self.regions, REGIONS)):
            bad = [g for g in given if g not in known]
            if bad:
                raise ValueError(f"unknown {kind} {bad[0]!r}; known: {', '.join(known)}")


@functools.lru_cache(maxsize=8)
def box_mask(size: int, blur: float, padding: tuple[int, int, int, int] = (0, 0, 0, 0)) -> Mask:
    """The crop with faded edges: `blur` x half the crop's width, after the padding. The same
    for every face and frame: made once (read-only, shared)."""
    amount = int(size * 0.5 * blur)
    area = max(amount // 2, 1)
    top, right, bottom, left = padding
    mask = np.ones((size, size), np.float32)
    mask[:max(area, int(size * top / 100)), :] = 0
    mask[size - max(area, int(size * bottom / 100)):, :] = 0
    mask[:, :max(area, int(size * left / 100))] = 0
    mask[:, size - max(area, int(size * right / 100)):] = 0
    if amount > 0:
        mask = cv2.GaussianBlur(mask, (0, 0), amount * 0.25)
    mask.flags.writeable = False
    return mask


def _soften(mask: Mask) -> Mask:
    """A hard 0/1 map softened at its edge: blurred, then only the half over 0.5 kept (scaled
    back to 0..1), so a hole stays a hole. The blur is FaceFusion's 5 px at a 256 px crop,
    scaled with the crop (at 128 px, 2.5), so a mouth left out stays out at any crop size."""
    sigma = 5.0 * mask.shape[0] / 256
    return ((cv2.GaussianBlur(mask.clip(0, 1), (0, 0), sigma).clip(0.5, 1) - 0.5) * 2).astype(np.float32)


def area_mask(landmarks: npt.NDArray[np.floating], size: int, areas: Sequence[str]) -> Mask:
    """The face's hull (its 68 points in crop pixels) less each area not in `areas`."""
    pts = np.asarray(landmarks, np.float32).reshape(68, 2)
    mask = np.zeros((size, size), np.float32)
    cv2.fillConvexPoly(mask, cv2.convexHull(pts).astype(np.int32), 1.0)
    for name, index in AREAS.items():
        if name not in areas:
            cv2.fillPoly(mask, [cv2.convexHull(pts[list(index)]).astype(np.int32)], 0.0)
    return _soften(mask)


def occlusion_input(crop_bgr: npt.NDArray[np.uint8], row: npt.NDArray[np.float32]) -> None:
    """XSeg's input for a crop, written into `row` (256, 256, 3): BGR in 0..1."""
    np.multiply(cv2.resize(crop_bgr, (OCCLUSION_SIZE, OCCLUSION_SIZE)), np.float32(1 / 255), out=row,
                casting="unsafe")


def occlusion_mask(output: npt.NDArray[np.floating], size: int) -> Mask:
    """XSeg's output (256, 256, 1): 1 where the face is seen, as a crop-space map."""
    seen = cv2.resize(np.asarray(output, np.float32).reshape(OCCLUSION_SIZE, OCCLUSION_SIZE).clip(0, 1),
                      (size, size))
    return _soften(seen)


def region_input(crop_bgr: npt.NDArray[np.uint8], row: npt.NDArray[np.float32]) -> None:
    """The face parser's input for a crop, written into `row` (3, 512, 512)."""
    rgb = cv2.resize(crop_bgr, (REGION_SIZE, REGION_SIZE))[:, :, ::-1].astype(np.float32) / 255
    row[...] = ((rgb - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1)


def region_mask(logits: npt.NDArray[np.floating], size: int, regions: Sequence[str]) -> Mask:
    """The parser's class logits (19, 512, 512): 1 where the pixel's class is a chosen region."""
    classes = np.argmax(logits, axis=0)
    chosen = np.isin(classes, [REGIONS[r] for r in regions]).astype(np.float32)
    return _soften(cv2.resize(chosen, (size, size)))


class Masker:
    """The masks a run asked for: their options, and the occlusion and region models' runtimes
    (given when those types are asked for). Prepares the models' rows beside the swapper's,
    runs them in the swap stage, and builds the crop-space mask of each face."""

    def __init__(self, options: MaskOptions, occluder: InferenceRuntime | None = None,
                 parser: InferenceRuntime | None = None) -> None:
        if "occlusion" in options.types and occluder is None:
            raise ValueError("the occlusion mask needs its model (an XSeg file)")
        if "region" in options.types and parser is None:
            raise ValueError("the region mask needs its model (a BiSeNet face parser file)")
        self.options = options
        self.occluder = occluder if "occlusion" in options.types else None
        self.parser = parser if "region" in options.types else None
        self.model_runs = 0  # faces the mask models ran on
        self._seen: OrderedDict[int, int] = OrderedDict()  # track -> its frames so far (prepare's thread)
        self._kept: OrderedDict[int, dict[str, Mask]] = OrderedDict()  # track -> its last maps (finish's)

    @property
    def models(self) -> bool:
        return self.occluder is not None or self.parser is not None

    def open(self) -> None:
        for runtime, what, shape in ((self.occluder, "an XSeg occlusion model", (OCCLUSION_SIZE, OCCLUSION_SIZE, 3)),
                                     (self.parser, "a BiSeNet face parser", (3, REGION_SIZE, REGION_SIZE))):
            if runtime is None or runtime.is_open:
                continue
            runtime.open_expecting(f"{what} ONNX file")
            spec = runtime.inputs[0]
            if len(runtime.inputs) != 1 or tuple(spec.shape[1:]) != shape:
                found = [(i.name, list(i.shape)) for i in runtime.inputs]
                runtime.close()
                raise EngineError(f"model file {str(runtime.path)!r} is not {what}: expected one input "
                                  f"[1,{','.join(map(str, shape))}], found {found}")

    def batch_inputs(self, rows: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        out: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        if self.occluder is not None:
            out[OCCLUSION_INPUT] = ((rows, OCCLUSION_SIZE, OCCLUSION_SIZE, 3), np.dtype(np.float32))
        if self.parser is not None:
            out[REGION_INPUT] = ((rows, 3, REGION_SIZE, REGION_SIZE), np.dtype(np.float32))
        return out

    def prepare_into(self, crop_bgr: npt.NDArray[np.uint8], i: int, inputs: Mapping[str, np.ndarray],
                     track: int = -1) -> bool:
        """The models' inputs for face i's target crop, when its masks are due this frame (a
        face of no track always; a track on its 1st, (k+1)th ... frame). Returns whether."""
        if not self.models:
            return False
        if self.options.every > 1 and track >= 0:
            seen = self._seen.pop(track, 0)
            self._seen[track] = seen + 1
            while len(self._seen) > MAX_TRACKS:
                self._seen.popitem(last=False)
            if seen % self.options.every:
                return False
        if self.occluder is not None:
            occlusion_input(crop_bgr, inputs[OCCLUSION_INPUT][i])
        if self.parser is not None:
            region_input(crop_bgr, inputs[REGION_INPUT][i])
        return True

    def run(self, due: Sequence[bool], inputs: Mapping[str, np.ndarray]) -> dict[str, list[np.ndarray | None]]:
        """The models on the batch's faces whose masks are due (one call each per face: the
        published exports are batch-1): their outputs by mask type, None for a face not due."""
        out: dict[str, list[np.ndarray | None]] = {}
        for kind, runtime, name in (("occlusion", self.occluder, OCCLUSION_INPUT),
                                    ("region", self.parser, REGION_INPUT)):
            if runtime is None:
                continue
            feed = runtime.inputs[0].name
            out[kind] = [next(iter(runtime.run({feed: inputs[name][i:i + 1]}).values()))[0] if run else None
                         for i, run in enumerate(due)]
        self.model_runs += sum(due)
        return out

    def crop_mask(self, size: int, landmarks: npt.NDArray[np.floating] | None,
                  outputs: Mapping[str, Sequence[np.ndarray | None]], i: int, track: int = -1) -> Mask | None:
        """Face i's mask (the minimum of the chosen ones), or None when none applies. A model
        mask not computed this frame is the track's last one (in crop space: it follows the
        face's alignment)."""
        masks = self._drawn(size, landmarks)
        kept = self._kept.pop(track, {}) if track >= 0 else {}
        for kind in ("occlusion", "region"):
            if kind not in outputs:
                continue
            fresh = outputs[kind][i] if i < len(outputs[kind]) else None
            mask = self._made(kind, fresh, size) if fresh is not None else kept.get(kind)
            if mask is not None and mask.shape == (size, size):
                kept[kind] = mask
                masks.append(mask)
        if track >= 0 and kept:
            self._kept[track] = kept
            while len(self._kept) > MAX_TRACKS:
                self._kept.popitem(last=False)
        return np.minimum.reduce(masks) if masks else None

    def _drawn(self, size: int, landmarks: npt.NDArray[np.floating] | None) -> list[Mask]:
        """The masks drawn with no model: the box, and the areas of the face's landmarks (crop pixels)."""
        masks = []
        if "box" in self.options.types:
            masks.append(box_mask(size, self.options.blur, self.options.padding))
        if "area" in self.options.types and landmarks is not None:
            masks.append(area_mask(landmarks, size, self.options.areas))
        return masks

    def _made(self, kind: str, output: np.ndarray, size: int) -> Mask:
        """A model's output for one face as its crop-space mask."""
        return occlusion_mask(output, size) if kind == "occlusion" else region_mask(output, size, self.options.regions)

    def model_masks(self, crop_bgr: npt.NDArray[np.uint8]) -> tuple[Mask, ...]:
        """The model masks (occlusion, region) of one face's crop, in crop space (a carried
        swap's: made with the swap, off the frame path, and carried with it)."""
        if not self.models:
            return ()
        inputs = {name: np.empty(shape, dtype) for name, (shape, dtype) in self.batch_inputs(1).items()}
        self.prepare_into(crop_bgr, 0, inputs)  # a face of no track: always due
        out = self.run([True], inputs)
        return tuple(self._made(kind, outputs[0], crop_bgr.shape[0]) for kind, outputs in out.items()
                     if outputs[0] is not None)

    def carried_mask(self, size: int, landmarks: npt.NDArray[np.floating] | None,
                     carried: Sequence[Mask]) -> Mask | None:
        """A carried face's mask: the drawn masks for its landmarks now, and the masks carried
        with its swap (`carried`: its model masks and what the carry leaves out, already in
        this crop's space)."""
        masks = [*carried, *self._drawn(size, landmarks)]
        return np.minimum.reduce(masks) if masks else None
