"""The explicit registry of engine families, chosen by name (never guessed from files).

- `dlib`: the embedded default (dlib's HOG, 68 landmarks and embedding, classical swapper);
- `neural`: the standard ONNX set the user supplies (SCRFD, ArcFace, inswapper_128, and
  2dfan4 when present, dlib's landmarks otherwise);
- `auto`: `neural` when its files are found, `dlib` otherwise; the set says which and why.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from engines.backends.registry import RuntimeFactory, runtime_factory
from engines.classic.swapper import ClassicalOptions
from engines.protocols import Detector, Embedder, Landmarker, Swapper

if TYPE_CHECKING:
    from engines.models.masks import Masker


class DetectSettings(Protocol):
    """The detection settings the engines read (the `detect` section of a preset)."""

    max_side: int  # the frame scaled so its longer side is this
    upsample: int  # dlib's upsampling passes
    max_upscale: float  # a smaller frame upscaled towards max_side, at most this much
    refine: bool  # dlib: each box measured again in a crop around it
    verify: bool  # dlib: boxes checked by the face filter


class ModelSettings(Protocol):
    """The neural family's settings (the `models` section of a preset)."""

    dir: str | None  # searched first for the model files
    detector: str  # catalog names
    embedder: str
    swapper: str
    landmarker: str | None  # None: dlib's 68-point landmarks
    detect_size: int  # SCRFD's square input size
    recrop_after_paste: bool  # faces that meet: each crop from the frame the ones before it left
    full_frame_paste: bool  # insightface's paste over the whole frame, not the face's region
    pixel_boost: int  # the swapper's crop, in pixels (0: the model's own size)
    occluder: str  # the occlusion mask's model (XSeg)
    parser: str  # the region mask's model (BiSeNet)


class MaskSettings(Protocol):
    """The face masks of the neural swappers (the `mask` section of a preset)."""

    types: list[str]  # any of box, occlusion, area, region
    areas: list[str]
    regions: list[str]
    blur: float
    every: int  # the model masks' cadence per tracked face


@dataclass
class EngineSet:
    """The models one pipeline runs: detector, landmarker, embedder and swapper."""

    name: str
    detector: Detector
    landmarker: Landmarker
    embedder: Embedder
    swapper: Swapper
    # Finds the face of a still photo (a source or reference) when `detector` does not:
    # photos are often small, so this one looks harder (upsampled) and is run only on them.
    photo_detector: Detector
    note: str = ""  # which family was chosen, from where, and why (printed by the CLI)

    def open(self) -> None:
        for model in (self.detector, self.landmarker, self.embedder, self.swapper, self.photo_detector):
            model.open()

    def calls(self) -> dict[str, int]:
        return {
            "detect": self.detector.calls,
            "landmarks": self.landmarker.calls,
            "embed": self.embedder.calls,
            "swap": self.swapper.calls,
        }


def _photo_detector() -> Detector:
    from engines.dlib.detector import DlibHogDetector

    return DlibHogDetector(max_side=2048, upsample=1, shared=True)


def _verified(detector: Detector, verify: bool) -> Detector:
    """The detector with the face filter's second opinion on its boxes (no badges or prints)."""
    if not verify:
        return detector
    from engines.dlib.face_filter import FaceFilter

    return FaceFilter(detector)


def _build_dlib(detect: DetectSettings, swap: ClassicalOptions, models: ModelSettings,
                runtime: RuntimeFactory, mask: MaskSettings | None = None, *,
                why: str = "the embedded default") -> EngineSet:
    from engines.classic.swapper import ClassicalSwapper
    from engines.dlib.detector import DlibHogDetector
    from engines.dlib.embedder import DlibEmbedder
    from engines.dlib.landmarker import DlibLandmarker
    from engines.face import AREAS

    types = list(mask.types) if mask is not None else []
    # The 68-point areas need no model: the classical swapper keeps those left out of mask.areas.
    # Its occlusion mask is its own finder (SwapJob turns track.occlusion on for a swapper that
    # `cuts_occluders`); box and region are the neural swappers' only.
    kept = [a for a in AREAS if a not in mask.areas] if mask is not None and "area" in types else []
    others = [t for t in types if t not in ("area", "occlusion")]
    return EngineSet(
        name="dlib",
        detector=_verified(DlibHogDetector(detect.max_side, detect.upsample, max_upscale=detect.max_upscale,
                                           refine=detect.refine), detect.verify),
        landmarker=DlibLandmarker(),
        embedder=DlibEmbedder(),
        swapper=ClassicalSwapper(swap, keep_areas=kept),
        photo_detector=_photo_detector(),
        note=f"engine: dlib ({why})" + (
            f"; mask area: the target's own {', '.join(kept)} kept" if kept else "") + (
            "; mask occlusion: the classical swapper's own occlusion finder (track.occlusion)"
            if "occlusion" in types else "") + (
            f"; mask {', '.join(others)}: the neural swappers' only" if others else ""),
    )


def _roles(models: ModelSettings, mask: MaskSettings | None = None) -> dict[str, str]:
    """The catalog name of each model the neural family needs (the swapper's embedding
    converter, and the masks' models, where asked for); an unknown swapper is a ValueError
    listing the known."""
    from engines.models.swappers import profile

    roles = {"detector": models.detector, "embedder": models.embedder, "swapper": models.swapper}
    converter = profile(models.swapper).converter
    if converter:
        roles["converter"] = converter
    types = mask.types if mask is not None else []
    if "occlusion" in types:
        roles["occluder"] = models.occluder
    if "region" in types:
        roles["parser"] = models.parser
    return roles


def _neural_files(models: ModelSettings, mask: MaskSettings | None = None
                  ) -> tuple[dict[str, Path | None], list[str]]:
    from engines.catalog import entry, locate

    found: dict[str, Path | None] = {}
    missing: list[str] = []
    for role, name in _roles(models, mask).items():
        path = locate(name, models.dir)
        if path is None:
            missing.append(entry(name).file)
        found[role] = path
    lm = models.landmarker
    found["landmarker"] = locate(lm, models.dir) if lm else None
    return found, missing


def _masker(mask: MaskSettings | None, paths: dict[str, Path], runtime: RuntimeFactory) -> Masker | None:
    from engines.models.masks import Masker, MaskOptions

    if mask is None or not mask.types:
        return None
    options = MaskOptions(tuple(mask.types), tuple(mask.areas), tuple(mask.regions), mask.blur, every=mask.every)
    return Masker(options, runtime(paths["occluder"]) if "occluder" in paths else None,
                  runtime(paths["parser"]) if "parser" in paths else None)


def _build_neural(detect: DetectSettings, swap: ClassicalOptions, models: ModelSettings,
                  runtime: RuntimeFactory, mask: MaskSettings | None = None) -> EngineSet:
    from engines.catalog import find
    from engines.dlib.landmarker import DlibLandmarker
    from engines.models.adapters import InSwapperSwapper, ScrfdFaces
    from engines.models.arcface import ArcFaceEmbedder
    from engines.models.fan import FanLandmarker
    from engines.models.inswapper import InSwapper
    from engines.models.scrfd import ScrfdDetector
    from engines.models.swappers import profile

    paths = {role: find(name, models.dir) for role, name in _roles(models, mask).items()}
    swapper_profile = profile(models.swapper)
    found, _ = _neural_files(models)
    embedder = ArcFaceEmbedder(runtime(paths["embedder"]))
    landmarker: Landmarker
    if found["landmarker"] is not None:
        landmarker = FanLandmarker(runtime(found["landmarker"]))
        lm_note = found["landmarker"].name
    else:
        landmarker = DlibLandmarker()
        lm_note = "dlib 68-point landmarks (no 2dfan4 file)"
    size = models.detect_size
    return EngineSet(
        name="neural",
        detector=ScrfdFaces(ScrfdDetector(runtime(paths["detector"]), (size, size))),
        landmarker=landmarker,
        embedder=embedder,
        swapper=InSwapperSwapper(InSwapper(runtime(paths["swapper"]),
                                           recrop_after_paste=models.recrop_after_paste,
                                           full_frame_paste=models.full_frame_paste, profile=swapper_profile,
                                           pixel_boost=models.pixel_boost, masker=_masker(mask, paths, runtime),
                                           converter=runtime(paths["converter"]) if "converter" in paths else None),
                                 embedder),
        photo_detector=_photo_detector(),
        note=(f"engine: neural ({paths['detector'].name}, {paths['embedder'].name}, "
              f"{paths['swapper'].name}, {lm_note}; from {paths['swapper'].parent})"),
    )


def _build_auto(detect: DetectSettings, swap: ClassicalOptions, models: ModelSettings,
                runtime: RuntimeFactory, mask: MaskSettings | None = None) -> EngineSet:
    _, missing = _neural_files(models, mask)
    if not missing:
        return _build_neural(detect, swap, models, runtime, mask)
    return _build_dlib(detect, swap, models, runtime, mask,
                       why=f"the neural set is incomplete: {', '.join(missing)} not found")


Builder = Callable[[DetectSettings, ClassicalOptions, ModelSettings, RuntimeFactory, "MaskSettings | None"],
                   EngineSet]
ENGINES: dict[str, Builder] = {
    "auto": _build_auto,
    "dlib": _build_dlib,
    "neural": _build_neural,
}


# The names a user may choose, in the order `--help` lists them.
ENGINE_NAMES = tuple(ENGINES)


def build_engines(name: str, *, detect: DetectSettings, swap: ClassicalOptions, models: ModelSettings,
                  runtime: RuntimeFactory | None = None, mask: MaskSettings | None = None) -> EngineSet:
    """The engine family `name` for the given config sections (detect, swap, models, mask), its
    ONNX models run by runtimes from `runtime` (ONNX Runtime with default options when
    None); an unknown name is a ValueError listing the known ones."""
    try:
        factory = ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(sorted(ENGINES))}") from None
    return factory(detect, swap, models, runtime or runtime_factory(), mask)
