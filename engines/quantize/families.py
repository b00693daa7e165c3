"""Each model family's inputs, made from faces as the pipeline makes them, and its drift
measures, taken on the outputs of the float and INT8 files for the same inputs.

A family prepares inputs with the model's own class (the aligned crop of a swapper, SCRFD's
letterboxed frame, 2dfan4's box crop) on a runtime of the float file, so calibration sees
exactly what a run feeds the model. `measure` decodes both files' outputs the way a run
does (detections after NMS, landmarks in crop pixels, the swapped crop as pasted) and gives
the figures the family's budget (engines.quantize.budgets) is judged on.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from engines.backends.base import InferenceRuntime
from engines.errors import EngineError
from engines.face import ImageBGR
from engines.quantize.samples import FaceSample

Feeds = dict[str, np.ndarray]
Outputs = dict[str, np.ndarray]
RuntimeMaker = Callable[[Path], InferenceRuntime]


@dataclass
class Item:
    """One input of a model, and what its measure needs to decode the outputs."""

    feeds: Feeds
    context: Any = None


class Family(Protocol):
    """How one model kind is fed and judged."""

    kind: str

    def items(self, faces: Sequence[FaceSample], frames: Sequence[ImageBGR]) -> list[Item]: ...

    def measure(self, items: Sequence[Item], ref: Sequence[Outputs], test: Sequence[Outputs]) -> dict[str, float]: ...


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, np.float64), q)) if len(values) else math.nan


def psnr(a: np.ndarray, b: np.ndarray, weight: np.ndarray | None = None, peak: float = 255.0) -> float:
    """PSNR of two images (uint8 or float on `peak`), weighted per pixel when `weight` is given."""
    d = (np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2
    if d.ndim == 3:
        d = d.mean(axis=2)
    mse = float((d * weight).sum() / max(weight.sum(), 1e-12)) if weight is not None else float(d.mean())
    return 99.0 if mse <= 1e-12 else 10.0 * math.log10(peak * peak / mse)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    n = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / n) if n > 0 else 0.0


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of each box in a (N, 4+) with each in b (M, 4+): (N, M)."""
    x0 = np.maximum(a[:, None, 0], b[None, :, 0])
    y0 = np.maximum(a[:, None, 1], b[None, :, 1])
    x1 = np.minimum(a[:, None, 2], b[None, :, 2])
    y1 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-12)


def mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


def _embedding_drift(ref: Sequence[np.ndarray], test: Sequence[np.ndarray]) -> dict[str, float]:
    drift = [1.0 - cosine(r, t) for r, t in zip(ref, test)]
    return {"drift_median": _percentile(drift, 50), "drift_p95": _percentile(drift, 95),
            "drift_max": max(drift) if drift else math.nan}


def _first(outputs: Outputs) -> np.ndarray:
    return next(iter(outputs.values()))


# ---- detector ----

@dataclass
class DetectorFamily:
    """SCRFD: whole frames, letterboxed to the detect size; recall and box IoU after NMS."""

    runtime: InferenceRuntime
    size: int = 640
    kind: str = "detector"

    def __post_init__(self) -> None:
        from engines.models.scrfd import ScrfdDetector

        self.model = ScrfdDetector(self.runtime, (self.size, self.size))
        self.model.open()

    def items(self, faces: Sequence[FaceSample], frames: Sequence[ImageBGR]) -> list[Item]:
        out = []
        for frame in frames:
            blob, scale = self.model.prepare_input(frame)
            out.append(Item({self.runtime.inputs[0].name: blob.copy()}, scale))
        return out

    def _boxes(self, outputs: Outputs, scale: float) -> np.ndarray:
        from engines.models.scrfd import nms

        names = [o.name for o in self.runtime.outputs]
        dets, _ = self.model.decode_outputs([outputs[n] for n in names], scale)
        return dets[nms(dets, self.model.nms_threshold)]

    def measure(self, items: Sequence[Item], ref: Sequence[Outputs], test: Sequence[Outputs]) -> dict[str, float]:
        found = matched = 0
        ious: list[float] = []
        for item, r, t in zip(items, ref, test):
            a, b = self._boxes(r, item.context), self._boxes(t, item.context)
            found += len(a)
            if len(a) and len(b):
                best = box_iou(a, b).max(axis=1)
                matched += int((best >= 0.5).sum())
                ious.extend(float(v) for v in best[best >= 0.5])
        return {"recall": matched / found if found else 1.0, "box_iou_median": _percentile(ious, 50),
                "faces": float(found)}


# ---- embedders and the embedding converter ----

@dataclass
class ArcFaceFamily:
    """ArcFace: the 112 px aligned crop; 1 - cosine of the embeddings."""

    runtime: InferenceRuntime
    kind: str = "embedder"

    def __post_init__(self) -> None:
        from engines.models.arcface import ArcFaceEmbedder

        self.model = ArcFaceEmbedder(self.runtime)
        self.model.open()

    def items(self, faces: Sequence[FaceSample], frames: Sequence[ImageBGR]) -> list[Item]:
        return [Item({self.model.input_name: self.model.prepare_input(f.image, [f.points])}) for f in faces]

    def measure(self, items: Sequence[Item], ref: Sequence[Outputs], test: Sequence[Outputs]) -> dict[str, float]:
        return _embedding_drift([_first(r) for r in ref], [_first(t) for t in test])


@dataclass
class DlibEmbedderFamily:
    """dlib's face-recognition ResNet in ONNX: the 150 px chip; 1 - cosine, and whether the
    same-person verdict (distance 0.6) between faces stays the same."""

    runtime: InferenceRuntime
    kind: str = "embedder"

    def __post_init__(self) -> None:
        self.runtime.open()

    def items(self, faces: Sequence[FaceSample], frames: Sequence[ImageBGR]) -> list[Item]:
        from engines.dlib.embedder import DlibEmbedder
        from engines.dlib.embedding_io import chips_to_blob

        name = self.runtime.inputs[0].name
        cutter = DlibEmbedder()  # the chip exactly as the pipeline's embedder cuts it
        return [Item({name: chips_to_blob(cutter.chip(f.image, f.points)[None])}) for f in faces]

    def measure(self, items: Sequence[Item], ref: Sequence[Outputs], test: Sequence[Outputs]) -> dict[str, float]:
        out = _embedding_drift([_first(r) for r in ref], [_first(t) for t in test])
        a = np.concatenate([_first(r).reshape(-1, 128) for r in ref])
        b = np.concatenate([_first(t).reshape(-1, 128) for t in test])
        da = np.linalg.norm(a[:, None] - a[None], axis=2) < 0.6
        db = np.linalg.norm(b[:, None] - b[None], axis=2) < 0.6
        out["verdicts_same"] = float((da == db).mean())
        return out


@dataclass
class ConverterFamily:
    """An embedding converter (simswap's crossface): raw ArcFace embeddings; 1 - cosine."""

    runtime: InferenceRuntime
    embed: Callable[[FaceSample], np.ndarray] | None = None  # ArcFace, where its file is found
    kind: str = "converter"

    def __post_init__(self) -> None:
        self.runtime.open()

    def items(self, faces: Sequence[FaceSample], frames: Sequence[ImageBGR]) -> list[Item]:
        rng = np.random.default_rng(len(faces))
        name = self.runtime.inputs[0].name
        vecs = [self.embed(f) if self.embed else rng.standard_normal(512).astype(np.float32) * 1.5 for f in faces]
        return [Item({name: np.asarray(v, np.float32).reshape(1, -1)}) for v in vecs]

    def measure(self, items: Sequence[Item], ref: Sequence[Outputs], test: Sequence[Outputs]) -> dict[str, float]:
        return _embedding_drift([_first(r) for r in ref], [_first(t) for t in test])


# ---- swappers ----

@dataclass
class SwapperFamily:
    """A crop swapper: the aligned target crop and a source latent (another face's, through
    ArcFace when its file is found, else a seeded random embedding); PSNR of the swapped crop
    inside the paste mask, and the cosine of the two swapped crops' ArcFace embeddings."""

    runtime: InferenceRuntime
    name: str
    converter: InferenceRuntime | None = None
    arcface: Any = None  # an opened ArcFaceEmbedder, or None: identity not measured
    kind: str = "swapper"

    def __post_init__(self) -> None:
        from engines.models.inswapper import InSwapper
        from engines.models.swappers import profile

        prof = profile(self.name)
        self.random_latents = prof.converter is not None and self.converter is None
        # Without the converter the latents are random unit vectors: the swapper's input space.
        self.model = InSwapper(self.runtime, profile=prof,
                               converter=self.converter if prof.converter else None) \
            if not self.random_latents else _without_converter(self.runtime, prof)
        self.model.open()

    def _latent(self, face: FaceSample, rng: np.random.Generator) -> np.ndarray:
        if self.random_latents:
            v = rng.standard_normal((1, 512)).astype(np.float32)
            return v / np.linalg.norm(v)
        emb = (self.arcface.forward(face.image, face.points) if self.arcface is not None
               else rng.standard_normal(512).astype(np.float32))
        return self.model.prepare_source(emb)

    def items(self, faces: Sequence[FaceSample], frames: Sequence[ImageBGR]) -> list[Item]:
        from engines.models.inswapper import SOURCE, TARGET

        rng = np.random.default_rng(len(faces) + 7)
        latents = [self._latent(f, rng) for f in faces]
        out = []
        for i, face in enumerate(faces):
            blob, _ = self.model.prepare_crop(face.image, face.points)
            source = latents[(i + 1) % len(latents)] if len(latents) > 1 else latents[0]
            out.append(Item({TARGET: blob, SOURCE: np.asarray(source, np.float32).reshape(1, -1)}))
        return out

    def measure(self, items: Sequence[Item], ref: Sequence[Outputs], test: Sequence[Outputs]) -> dict[str, float]:
        from engines.geometry.face_align import get_template
        from engines.models.inswapper import OUTPUT
        from engines.models.masks import box_mask

        size = self.model.size
        weight = np.asarray(box_mask(size, 0.3), np.float64)
        points = get_template(self.model.profile.template).at_size(size)
        psnrs, ids = [], []
        for r, t in zip(ref, test):
            a, b = self.model.decode_output(r[OUTPUT])[0], self.model.decode_output(t[OUTPUT])[0]
            psnrs.append(psnr(a, b, weight))
            if self.arcface is not None:
                ids.append(cosine(self.arcface.forward(a, points), self.arcface.forward(b, points)))
        out = {"psnr": _percentile(psnrs, 50), "psnr_min": min(psnrs) if psnrs else math.nan}
        if ids:
            out["identity_cosine"] = _percentile(ids, 50)
            out["identity_cosine_min"] = min(ids)
        return out


def _without_converter(runtime: InferenceRuntime, prof: Any) -> Any:
    """The swapper class for a profile whose converter file is missing: fed random latents,
    so it is built as a plain normed-source swapper of the same crop and normalisation."""
    from dataclasses import replace

    from engines.models.inswapper import InSwapper

    return InSwapper(runtime, profile=replace(prof, source="normed", converter=None))


# ---- landmarker, enhancer, masks ----

@dataclass
class LandmarkerFamily:
    """2dfan4: the box crop; mean point error as a share of the 256 px crop."""

    runtime: InferenceRuntime
    kind: str = "landmarker"

    def __post_init__(self) -> None:
        from engines.models.fan import FanLandmarker

        self.model = FanLandmarker(self.runtime)
        self.model.open()

    def items(self, faces: Sequence[FaceSample], frames: Sequence[ImageBGR]) -> list[Item]:
        name = self.runtime.inputs[0].name
        out = []
        for f in faces:
            self.model.prepare_crop(f.image, f.box)
            out.append(Item({name: self.model.input_blob().copy()}))
        return out

    def measure(self, items: Sequence[Item], ref: Sequence[Outputs], test: Sequence[Outputs]) -> dict[str, float]:
        from engines.models.fan import CROP, GRID_TO_CROP

        name = self.runtime.outputs[0].name
        err = [float(np.linalg.norm((r[name][0, :, :2] - t[name][0, :, :2]) * GRID_TO_CROP, axis=1).mean()) / CROP
               for r, t in zip(ref, test)]
        return {"point_error_median": _percentile(err, 50), "point_error_p95": _percentile(err, 95)}


@dataclass
class EnhancerFamily:
    """A face restorer (GFPGAN and kin): the aligned crop; PSNR of the restored crops."""

    runtime: InferenceRuntime
    name: str
    kind: str = "enhancer"

    def __post_init__(self) -> None:
        from engines.models.enhancers import enhancer_profile
        from engines.models.gfpgan import GfpganEnhancer

        self.model = GfpganEnhancer(self.runtime, profile=enhancer_profile(self.name))
        self.model.open()

    def items(self, faces: Sequence[FaceSample], frames: Sequence[ImageBGR]) -> list[Item]:
        from engines.models.gfpgan import INPUT, WEIGHT

        out = []
        for f in faces:
            blob, _ = self.model.prepare_crop(f.image, f.points)
            feeds = {INPUT: blob.copy()}
            if self.model.profile.weight is not None:
                feeds[WEIGHT] = np.array([self.model.profile.weight], np.float64)
            out.append(Item(feeds))
        return out

    def measure(self, items: Sequence[Item], ref: Sequence[Outputs], test: Sequence[Outputs]) -> dict[str, float]:
        values = [psnr(self.model.decode_output(_first(r)), self.model.decode_output(_first(t)))
                  for r, t in zip(ref, test)]
        return {"psnr": _percentile(values, 50), "psnr_min": min(values) if values else math.nan}


@dataclass
class MaskFamily:
    """XSeg (occluder) or BiSeNet (parser) on the swapper's 256 px aligned crop; the IoU of
    the masks a run would paste with."""

    runtime: InferenceRuntime
    kind: str  # occluder | parser

    def __post_init__(self) -> None:
        self.runtime.open()

    def items(self, faces: Sequence[FaceSample], frames: Sequence[ImageBGR]) -> list[Item]:
        from engines.geometry.face_align import as_kps5, estimate_norm, warp_crop
        from engines.models.masks import OCCLUSION_SIZE, REGION_SIZE, occlusion_input, region_input

        name = self.runtime.inputs[0].name
        out = []
        for f in faces:
            crop = warp_crop(f.image, estimate_norm(as_kps5(f.points), 256, "arcface_128"), 256)
            if self.kind == "occluder":
                row = np.empty((1, OCCLUSION_SIZE, OCCLUSION_SIZE, 3), np.float32)
                occlusion_input(crop, row[0])
            else:
                row = np.empty((1, 3, REGION_SIZE, REGION_SIZE), np.float32)
                region_input(crop, row[0])
            out.append(Item({name: row}))
        return out

    def _mask(self, outputs: Outputs) -> np.ndarray:
        from engines.models.masks import OCCLUSION_SIZE, REGIONS

        out = _first(outputs)[0]
        if self.kind == "occluder":
            return np.asarray(out).reshape(OCCLUSION_SIZE, OCCLUSION_SIZE) > 0.5
        return np.isin(np.argmax(out, axis=0), list(REGIONS.values()))

    def measure(self, items: Sequence[Item], ref: Sequence[Outputs], test: Sequence[Outputs]) -> dict[str, float]:
        values = [mask_iou(self._mask(r), self._mask(t)) for r, t in zip(ref, test)]
        return {"mask_iou": _percentile(values, 50), "mask_iou_min": min(values) if values else math.nan}


def make_family(name: str, kind: str, runtime: InferenceRuntime, *, detect_size: int = 640,
                arcface: Any = None, converter: InferenceRuntime | None = None) -> Family:
    """The family of catalog model `name` (of catalog kind `kind`) on a runtime of its float
    file; EngineError for a kind that cannot be quantised here."""
    if kind == "detector":
        return DetectorFamily(runtime, detect_size)
    if kind == "embedder":
        return DlibEmbedderFamily(runtime) if name == "dlib_embedder" else ArcFaceFamily(runtime)
    if kind == "converter":
        return ConverterFamily(runtime, (lambda f: arcface.forward(f.image, f.points)) if arcface else None)
    if kind == "swapper":
        return SwapperFamily(runtime, name, converter=converter, arcface=arcface)
    if kind == "landmarker":
        return LandmarkerFamily(runtime)
    if kind == "enhancer":
        return EnhancerFamily(runtime, name)
    if kind in ("occluder", "parser"):
        return MaskFamily(runtime, kind)
    raise EngineError(f"{name}: models of kind {kind!r} cannot be quantised")
