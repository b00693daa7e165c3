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

from engines.protocols import Detector, Embedder, Landmarker, Swapper


@dataclass
class EngineSet:
    """The models one pipeline runs: detector, landmarker, embedder and swapper."""

    name: str
    detector: Detector
    landmarker: Landmarker
    embedder: Embedder
    swapper: Swapper
    note: str = ""  # which family was chosen, from where, and why (printed by the CLI)

    def open(self) -> None:
        for model in (self.detector, self.landmarker, self.embedder, self.swapper):
            model.open()

    def calls(self) -> dict[str, int]:
        swaps = getattr(self.swapper, "calls", {})
        return {
            "detect": self.detector.calls,
            "landmarks": self.landmarker.calls,
            "embed": self.embedder.calls,
            "swap": int(swaps.get("warp", 0)) if isinstance(swaps, dict) else int(swaps),
        }


def _build_dlib(detect: Any, swap: Any, models: Any) -> EngineSet:
    from engines.classical_swapper import ClassicalSwapper
    from engines.dlib_detector import DlibHogDetector
    from engines.dlib_embedder import DlibEmbedder
    from engines.dlib_landmarker import DlibLandmarker

    return EngineSet(
        name="dlib",
        detector=DlibHogDetector(detect.max_side, detect.upsample),
        landmarker=DlibLandmarker(),
        embedder=DlibEmbedder(),
        swapper=ClassicalSwapper(swap),
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


def _build_neural(detect: Any, swap: Any, models: Any) -> EngineSet:
    from engines.arcface import ArcFaceEmbedder
    from engines.catalog import find
    from engines.dlib_landmarker import DlibLandmarker
    from engines.fan_landmarker import FanLandmarker
    from engines.inswapper import InSwapper
    from engines.neural import InSwapperSwapper, ScrfdFaces
    from engines.ort_runtime import OrtOptions
    from engines.scrfd import ScrfdDetector

    paths = {role: find(getattr(models, role), models.dir) for role in ("detector", "embedder", "swapper")}
    found, _ = _neural_files(models)
    opts = OrtOptions(providers=models.providers)
    embedder = ArcFaceEmbedder(paths["embedder"], opts)
    landmarker: Landmarker
    if found["landmarker"] is not None:
        landmarker = FanLandmarker(found["landmarker"], opts)
        lm_note = found["landmarker"].name
    else:
        landmarker = DlibLandmarker()
        lm_note = "dlib 68-point landmarks (no 2dfan4 file)"
    size = models.detect_size
    return EngineSet(
        name="neural",
        detector=ScrfdFaces(ScrfdDetector(paths["detector"], (size, size), options=opts)),
        landmarker=landmarker,
        embedder=embedder,
        swapper=InSwapperSwapper(InSwapper(paths["swapper"], opts), embedder),
        note=(f"engine: neural ({paths['detector'].name}, {paths['embedder'].name}, "
              f"{paths['swapper'].name}, {lm_note}; from {paths['swapper'].parent})"),
    )


def _build_auto(detect: Any, swap: Any, models: Any) -> EngineSet:
    _, missing = _neural_files(models)
    if not missing:
        return _build_neural(detect, swap, models)
    chosen = _build_dlib(detect, swap, models)
    chosen.note = f"engine: dlib (the neural set is incomplete: {', '.join(missing)} not found)"
    return chosen


ENGINES: dict[str, Callable[[Any, Any, Any], EngineSet]] = {
    "auto": _build_auto,
    "dlib": _build_dlib,
    "neural": _build_neural,
}


def build_engines(name: str, *, detect: Any, swap: Any, models: Any) -> EngineSet:
    """The engine family `name` for the given config sections (detect, swap, models);
    an unknown name is a ValueError listing the known ones."""
    try:
        factory = ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(sorted(ENGINES))}") from None
    return factory(detect, swap, models)
