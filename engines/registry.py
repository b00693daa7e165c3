"""The explicit registry of engine families, chosen by name (never guessed from files)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engines.protocols import Detector, Embedder, Landmarker, Swapper


@dataclass
class EngineSet:
    """The models one pipeline runs: detector, landmarker, embedder and swapper."""

    name: str
    detector: Detector
    landmarker: Landmarker
    embedder: Embedder
    swapper: Swapper

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


def _build_dlib(detect_max_side: int, detect_upsample: int, swap_config: object) -> EngineSet:
    from engines.classical_swapper import ClassicalSwapper
    from engines.dlib_detector import DlibHogDetector
    from engines.dlib_embedder import DlibEmbedder
    from engines.dlib_landmarker import DlibLandmarker

    return EngineSet(
        name="dlib",
        detector=DlibHogDetector(detect_max_side, detect_upsample),
        landmarker=DlibLandmarker(),
        embedder=DlibEmbedder(),
        swapper=ClassicalSwapper(swap_config),  # type: ignore[arg-type]
    )


ENGINES: dict[str, Callable[..., EngineSet]] = {"dlib": _build_dlib}


def build_engines(name: str, *, detect_max_side: int, detect_upsample: int,
                  swap_config: object) -> EngineSet:
    """The engine family `name`; an unknown name is a ValueError listing the known ones."""
    try:
        factory = ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(sorted(ENGINES))}") from None
    return factory(detect_max_side, detect_upsample, swap_config)
