"""The neural swappers by name: what each one's ONNX file expects, stated in one place.

Every swapper here takes an aligned crop of the target face and a 512-d identity vector of
the source, and returns the swapped crop; they differ in the crop (its size and alignment
template), the crop's normalisation, the range of the output, and how the source's ArcFace
embedding becomes the model's `source` input. The facts are the published ones (the
models' exports and FaceFusion's and insightface's pre- and post-processing of them):

| swapper | crop | template | input (x: RGB / 255) | output | source |
|---|---|---|---|---|---|
| inswapper_128 (and _fp16) | 128 | arcface_128 | x | RGB 0..1 | normed embedding @ emap, normed |
| hyperswap_1a/1b/1c_256 | 256 | arcface_128 | (x - 0.5) / 0.5 | RGB -1..1 | normed embedding |
| simswap_256 | 256 | arcface_112_v1 | (x - ImageNet mean) / std | RGB 0..1 | crossface(embedding), normed |
| simswap_unofficial_512 | 512 | arcface_112_v1 | x | RGB 0..1 | crossface(embedding), normed |

hyperswap's export has a second output, its own mask, which is not used (as FaceFusion).
"""
from __future__ import annotations

from dataclasses import dataclass

from engines.catalog import named

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class SwapperProfile:
    """One swapper's contract: crop size and template, input normalisation (per RGB channel,
    on x / 255), output range, and the source embedding's preparation."""

    name: str  # the catalog name
    family: str  # inswapper | hyperswap | simswap
    size: int  # the square crop, in pixels
    template: str  # engines.geometry.face_align.TEMPLATES
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    signed_output: bool = False  # output in -1..1 (x * 0.5 + 0.5 gives 0..1); else 0..1
    source: str = "normed"  # "emap": normed @ emap, normed (inswapper); "normed"; "converted"
    converter: str | None = None  # the catalog model that maps ArcFace embeddings to the swapper's
    extra_outputs: tuple[str, ...] = ()  # outputs the export has beyond `output`, unused

    @property
    def plain_input(self) -> bool:
        """RGB / 255 and nothing else (inswapper's blob: insightface's exact arithmetic)."""
        return self.mean == (0.0, 0.0, 0.0) and self.std == (1.0, 1.0, 1.0)


def _hyperswap(name: str) -> SwapperProfile:
    return SwapperProfile(name, "hyperswap", 256, "arcface_128", (0.5, 0.5, 0.5), (0.5, 0.5, 0.5),
                          signed_output=True, extra_outputs=("mask",))


PROFILES: dict[str, SwapperProfile] = {p.name: p for p in (
    SwapperProfile("inswapper_128", "inswapper", 128, "arcface_128", source="emap"),
    SwapperProfile("inswapper_128_fp16", "inswapper", 128, "arcface_128", source="emap"),
    _hyperswap("hyperswap_1a_256"),
    _hyperswap("hyperswap_1b_256"),
    _hyperswap("hyperswap_1c_256"),
    SwapperProfile("simswap_256", "simswap", 256, "arcface_112_v1", IMAGENET_MEAN, IMAGENET_STD,
                   source="converted", converter="crossface_simswap"),
    SwapperProfile("simswap_unofficial_512", "simswap", 512, "arcface_112_v1",
                   source="converted", converter="crossface_simswap"),
)}

SWAPPER_NAMES = tuple(PROFILES)


def profile(name: str) -> SwapperProfile:
    """The swapper `name`; a ValueError listing the known ones otherwise."""
    return named(PROFILES, name, "swapper")
