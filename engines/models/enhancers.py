"""The face enhancers by name: each one's crop and inputs, stated in one place (the published
facts of each export; `engines/models/gfpgan.py` runs any of them).

| enhancer | crop | template | inputs |
|---|---|---|---|
| gfpgan_1.4 | 512 | ffhq_512 | input: RGB (x/255 - 0.5)/0.5 |
| codeformer | 512 | ffhq_512 | input, and weight: float64 [1], the fidelity (0.5) |
| gpen_bfr_256 | 256 | arcface_128 | input |
| gpen_bfr_512 | 512 | ffhq_512 | input |
| restoreformer_plus_plus | 512 | ffhq_512 | input |

Every output is RGB in -1..1, (x + 1)/2 * 255.
"""
from __future__ import annotations

from dataclasses import dataclass

from engines.catalog import named


@dataclass(frozen=True)
class EnhancerProfile:
    """One enhancer's contract: its crop (size, template) and, for CodeFormer, the fidelity
    weight fed as its second input (0: the most restoration, 1: the most fidelity)."""

    name: str
    title: str  # as its authors write it, for messages
    size: int
    template: str
    weight: float | None = None
    output: str | None = None  # the output's name where the export's is known; else its first output


ENHANCERS: dict[str, EnhancerProfile] = {p.name: p for p in (
    EnhancerProfile("gfpgan_1.4", "GFPGAN 1.4", 512, "ffhq_512", output="output"),
    EnhancerProfile("codeformer", "CodeFormer", 512, "ffhq_512", weight=0.5),
    EnhancerProfile("gpen_bfr_256", "GPEN-BFR 256", 256, "arcface_128"),
    EnhancerProfile("gpen_bfr_512", "GPEN-BFR 512", 512, "ffhq_512"),
    EnhancerProfile("restoreformer_plus_plus", "RestoreFormer++", 512, "ffhq_512"),
)}
ENHANCER_NAMES = tuple(ENHANCERS)


def enhancer_profile(name: str) -> EnhancerProfile:
    """The enhancer `name`; a ValueError listing the known ones otherwise."""
    return named(ENHANCERS, name, "enhancer")


