"""The explicit registry of engine families, chosen by name (never guessed from files).

- `dlib`: the embedded default (dlib's HOG, 68 landmarks and embedding, classical swapper);
- `neural`: the standard ONNX set the user supplies (SCRFD, ArcFace, inswapper_128, and
  2dfan4 when present, dlib's landmarks otherwise);
- `auto`: `neural` when its files are found, `dlib` otherwise; the set says which and why.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engines.classical_swapper import ClassicalOptions
from engines.protocols import Detector, Embedder, Landmarker, Swapper
from engines.runtime_registry import RuntimeFactory, runtime_factory


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
    from engines.dlib_detector import DlibHogDetector

    return DlibHogDetector(max_side=2048, upsample=1, shared=True)


def _verified(detector: Detector, verify: bool) -> Detector:
    """The detector with the face filter's second opinion on its boxes (no badges or prints)."""
    if not verify:
        return detector
    from engines.face_filter import FaceFilter

    return FaceFilter(detector)


def _build_dlib(detect: Any, swap: ClassicalOptions, models: Any, runtime: RuntimeFactory) -> EngineSet:
    from engines.classical_swapper import ClassicalSwapper
    from engines.dlib_detector import DlibHogDetector
    from engines.dlib_embedder import DlibEmbedder
    from engines.dlib_landmarker import DlibLandmarker

    return EngineSet(
        name="dlib",
        detector=_verified(DlibHogDetector(detect.max_side, detect.upsample,
                                           max_upscale=getattr(detect, "max_upscale", 1.0),
                                           refine=getattr(detect, "refine", False)),
                           getattr(detect, "verify", True)),
        landmarker=DlibLandmarker(),
        embedder=DlibEmbedder(),
        swapper=ClassicalSwapper(swap),
        photo_detector=_photo_detector(),
        note="engine: dlib (the embedded default)",
    )


def _neural_files(models: Any) -> tuple[dict[str, Any], list[str]]:
    from engines.catalog import entry, locate

    found: dict[str, Any] = {}
    missing: list[str] = []
    for role in ("detector", "embedder", "swapper"):
        name = getattr(models, role)
        path = locate(name, models.dir)
        if path is None:
            missing.append(entry(name).file)
        found[role] = path
    lm = models.landmarker
    found["landmarker"] = locate(lm, models.dir) if lm else None
    return found, missing


def _build_neural(detect: Any, swap: ClassicalOptions, models: Any, runtime: RuntimeFactory) -> EngineSet:
    from engines.arcface import ArcFaceEmbedder
    from engines.catalog import find
    from engines.dlib_landmarker import DlibLandmarker
    from engines.fan_landmarker import FanLandmarker
    from engines.inswapper import InSwapper
    from engines.neural import InSwapperSwapper, ScrfdFaces
    from engines.scrfd import ScrfdDetector

    paths = {role: find(getattr(models, role), models.dir) for role in ("detector", "embedder", "swapper")}
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
                                           recrop_after_paste=getattr(models, "recrop_after_paste", False),
                                           full_frame_paste=getattr(models, "full_frame_paste", False)),
                                 embedder),
        photo_detector=_photo_detector(),
        note=(f"engine: neural ({paths['detector'].name}, {paths['embedder'].name}, "
              f"{paths['swapper'].name}, {lm_note}; from {paths['swapper'].parent})"),
    )


def _build_auto(detect: Any, swap: ClassicalOptions, models: Any, runtime: RuntimeFactory) -> EngineSet:
    _, missing = _neural_files(models)
    if not missing:
        return _build_neural(detect, swap, models, runtime)
    chosen = _build_dlib(detect, swap, models, runtime)
    chosen.note = f"engine: dlib (the neural set is incomplete: {', '.join(missing)} not found)"
    return chosen


ENGINES: dict[str, Callable[[Any, ClassicalOptions, Any, RuntimeFactory], EngineSet]] = {
    "auto": _build_auto,
    "dlib": _build_dlib,
    "neural": _build_neural,
}


# The names a user may choose, in the order `--help` lists them.
ENGINE_NAMES = tuple(ENGINES)


def build_engines(name: str, *, detect: Any, swap: ClassicalOptions, models: Any,
                  runtime: RuntimeFactory | None = None) -> EngineSet:
    """The engine family `name` for the given config sections (detect, swap, models), its
    ONNX models run by runtimes from `runtime` (ONNX Runtime with default options when
    None); an unknown name is a ValueError listing the known ones."""
    try:
        factory = ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(sorted(ENGINES))}") from None
    return factory(detect, swap, models, runtime or runtime_factory())
