"""The model catalog: each standard model's name, file, kind and contract, and where to find it.

Files are looked up in the `--models-dir` folder, then `$FACESTREAM_MODELS`, then the
per-user folder (`$XDG_DATA_HOME/facestream/models`, by default
`~/.local/share/facestream/models`). Nothing is downloaded unless the user asks
(`facestream models fetch`); each file's addresses, licence and checksums are here.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from engines.errors import ModelNotFound

T = TypeVar("T")


@dataclass(frozen=True)
class Address:
    """One place a model file can be downloaded from, and how what it sends is verified.

    A file is taken only when one of its checks passes: the sha256 a public source states for
    it, or the CRC32 the host publishes beside it (FaceFusion's `.hash` files: 8 hex digits,
    `checksum_url`, or `crc32` where its value is published). `member`: the file is that member
    of the zip archive at `url` (insightface publishes its detector and embedder in packs)."""

    url: str
    sha256: str | None = None
    crc32: str | None = None
    checksum_url: str | None = None
    member: str | None = None

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc or self.url

    @property
    def verified(self) -> bool:
        return bool(self.sha256 or self.crc32 or self.checksum_url)


# insightface's own releases: the model-zoo tag its current package downloads from, and v0.7
# (older packages).
INSIGHTFACE = ("https://github.com/deepinsight/insightface/releases/download/model-zoo",
               "https://github.com/deepinsight/insightface/releases/download/v0.7")


def insightface(file: str, sha256: str, pack: str | None = None) -> tuple[Address, ...]:
    """insightface's release addresses of `file` (a member of `pack`.zip when given)."""
    if pack:
        return tuple(Address(f"{base}/{pack}.zip", sha256=sha256, member=file) for base in INSIGHTFACE)
    return tuple(Address(f"{base}/{file}", sha256=sha256) for base in INSIGHTFACE)


def facefusion(release: str, file: str, crc32: str | None = None, sha256: str | None = None) -> tuple[Address, ...]:
    """FaceFusion's copies of `file` in its model set `release` (e.g. models-3.0.0): its GitHub
    release assets, then its HuggingFace mirror, each with the `.hash` (CRC32) published beside
    the file (or its value, where a public page states it; `sha256`, where the host's page
    states one). FaceFusion's copies are its own exports: their bytes differ from the original
    publisher's."""
    stem = file.rsplit(".", 1)[0]
    out = []
    for base in (f"https://github.com/facefusion/facefusion-assets/releases/download/{release}",
                 f"https://huggingface.co/facefusion/{release}/resolve/main"):
        out.append(Address(f"{base}/{file}", sha256=sha256, crc32=crc32,
                           checksum_url=None if crc32 else f"{base}/{stem}.hash"))
    return tuple(out)


@dataclass(frozen=True)
class ModelEntry:
    """One standard model: its catalog name, file name, kind, I/O contract in words, licence,
    size (of the original publisher's file, when known) and the addresses to fetch it from
    (the original publisher first where there is one, then mirrors)."""

    name: str
    file: str
    kind: str  # detector | embedder | swapper | converter | landmarker | enhancer | occluder | parser
    contract: str
    licence: str = ""
    size: int | None = None
    addresses: tuple[Address, ...] = ()
    default: bool = False  # in the default neural set (`models fetch` with no name)

    @property
    def sha256(self) -> str | None:
        """The sha256 a public source states for the original file, when there is one."""
        return next((a.sha256 for a in self.addresses if a.sha256), None)


NON_COMMERCIAL = "non-commercial research only (insightface's models)"
HYPERSWAP = "ResearchRAIL-MS (FaceFusion's hyperswap): research use only"
HYPERSWAP_CONTRACT = ("target [1,3,256,256] RGB (x/255-0.5)/0.5, source [1,512] normed ArcFace -> "
                      "output [1,3,256,256] in [-1,1], mask [1,1,256,256] (unused)")
SIMSWAP = "non-commercial research only (SimSwap)"

CATALOG: dict[str, ModelEntry] = {e.name: e for e in (
    ModelEntry("scrfd_10g", "det_10g.onnx", "detector",
               "input.1 [1,3,H,W] -> 9 outputs: scores, boxes, keypoints at strides 8/16/32",
               NON_COMMERCIAL, 16_923_827,
               insightface("det_10g.onnx", "5838f7fe053675b1c7a08b633df49e7af5495cee0493c7dcf6697200b85b5b91",
                           pack="buffalo_l"), default=True),
    ModelEntry("scrfd_2.5g", "det_2.5g.onnx", "detector",
               "input.1 [1,3,H,W] -> 9 outputs: scores, boxes, keypoints at strides 8/16/32",
               NON_COMMERCIAL, None, facefusion("models-3.0.0", "scrfd_2.5g.onnx")),
    ModelEntry("arcface_w600k_r50", "w600k_r50.onnx", "embedder",
               "[N,3,112,112] RGB (x-127.5)/127.5 -> [N,512]",
               NON_COMMERCIAL, 174_383_860,
               insightface("w600k_r50.onnx", "4c06341c33c2ca1f86781dab0e829f88ad5b64be9fba56e56bc9ebdefc619e43",
                           pack="buffalo_l") + facefusion("models-3.0.0", "arcface_w600k_r50.onnx"), default=True),
    ModelEntry("inswapper_128", "inswapper_128.onnx", "swapper",
               "target [1,3,128,128] RGB 0..1, source [1,512] -> output [1,3,128,128]; emap 512x512",
               NON_COMMERCIAL, 554_253_681,
               insightface("inswapper_128.onnx", "e4a3f08c753cb72d04e10aa0f7dbe3deebbf39567d4ead6dce08e98aa49e16af")
               + facefusion("models-3.0.0", "inswapper_128.onnx"), default=True),
    ModelEntry("inswapper_128_fp16", "inswapper_128_fp16.onnx", "swapper",
               "as inswapper_128, half-precision weights, float32 I/O",
               NON_COMMERCIAL, None, facefusion("models-3.0.0", "inswapper_128_fp16.onnx")),
    ModelEntry("hyperswap_1a_256", "hyperswap_1a_256.onnx", "swapper", HYPERSWAP_CONTRACT, HYPERSWAP, 402_742_682,
               facefusion("models-3.3.0", "hyperswap_1a_256.onnx",
                          sha256="c0e98a8a03a238f461ed3d2570e426b49f46745ee400854a60dceeb70c246add")),
    ModelEntry("hyperswap_1b_256", "hyperswap_1b_256.onnx", "swapper", HYPERSWAP_CONTRACT, HYPERSWAP, None,
               facefusion("models-3.3.0", "hyperswap_1b_256.onnx")),
    ModelEntry("hyperswap_1c_256", "hyperswap_1c_256.onnx", "swapper", HYPERSWAP_CONTRACT, HYPERSWAP, None,
               facefusion("models-3.3.0", "hyperswap_1c_256.onnx")),
    ModelEntry("simswap_256", "simswap_256.onnx", "swapper",
               "target [1,3,256,256] RGB (x/255-ImageNet mean)/std, source [1,512] (crossface_simswap's, "
               "normed) -> output [1,3,256,256] RGB 0..1", SIMSWAP, None,
               facefusion("models-3.0.0", "simswap_256.onnx")),
    ModelEntry("simswap_unofficial_512", "simswap_unofficial_512.onnx", "swapper",
               "target [1,3,512,512] RGB x/255, source [1,512] (crossface_simswap's, normed) -> output "
               "[1,3,512,512] RGB 0..1", SIMSWAP, None, facefusion("models-3.0.0", "simswap_unofficial_512.onnx")),
    ModelEntry("crossface_simswap", "crossface_simswap.onnx", "converter",
               "input [1,512] ArcFace w600k_r50 embedding -> output [1,512] in SimSwap's embedding space",
               "OpenRAIL-MS (FaceFusion's crossface)", None, facefusion("models-3.4.0", "crossface_simswap.onnx")),
    ModelEntry("xseg_1", "xseg_1.onnx", "occluder",
               "input [1,256,256,3] BGR 0..1 -> [1,256,256,1], 1 where the face is seen",
               "GPL-3.0 (DeepFaceLab's XSeg)", None, facefusion("models-3.1.0", "xseg_1.onnx", crc32="f207afe3")),
    ModelEntry("xseg_2", "xseg_2.onnx", "occluder", "as xseg_1", "GPL-3.0 (DeepFaceLab's XSeg)", None,
               facefusion("models-3.1.0", "xseg_2.onnx")),
    ModelEntry("xseg_3", "xseg_3.onnx", "occluder", "as xseg_1", "GPL-3.0 (DeepFaceLab's XSeg)", None,
               facefusion("models-3.2.0", "xseg_3.onnx")),
    ModelEntry("bisenet_resnet_34", "bisenet_resnet_34.onnx", "parser",
               "input [1,3,512,512] RGB (x/255-ImageNet mean)/std -> [1,19,512,512] CelebAMask-HQ class logits",
               "MIT (face-parsing BiSeNet)", None, facefusion("models-3.0.0", "bisenet_resnet_34.onnx")),
    ModelEntry("bisenet_resnet_18", "bisenet_resnet_18.onnx", "parser", "as bisenet_resnet_34",
               "MIT (face-parsing BiSeNet)", None,
               facefusion("models-3.1.0", "bisenet_resnet_18.onnx", crc32="6cafc877")),
    ModelEntry("2dfan4", "2dfan4.onnx", "landmarker",
               "input [1,3,256,256] x/255 -> [1,68,3] landmarks, [1,68,64,64] heatmaps",
               "MIT (2dfan4's ONNX export)", None, facefusion("models-3.0.0", "2dfan4.onnx", crc32="a948738e"),
               default=True),
    ModelEntry("gfpgan_1.4", "gfpgan_1.4.onnx", "enhancer",
               "input [1,3,512,512] RGB (x/255-0.5)/0.5 -> output [1,3,512,512] in [-1,1]",
               "Apache-2.0 (TencentARC's GFPGAN)", None, facefusion("models-3.0.0", "gfpgan_1.4.onnx")),
    ModelEntry("codeformer", "codeformer.onnx", "enhancer",
               "input [1,3,512,512] RGB (x/255-0.5)/0.5, weight [1] float64 -> output [1,3,512,512] in [-1,1]",
               "S-Lab License 1.0: non-commercial (CodeFormer)", None,
               facefusion("models-3.0.0", "codeformer.onnx", crc32="1456f3ab")),
    ModelEntry("gpen_bfr_256", "gpen_bfr_256.onnx", "enhancer",
               "input [1,3,256,256] RGB (x/255-0.5)/0.5 (arcface_128 crop) -> output in [-1,1]",
               "non-commercial (GPEN)", None, facefusion("models-3.0.0", "gpen_bfr_256.onnx")),
    ModelEntry("gpen_bfr_512", "gpen_bfr_512.onnx", "enhancer",
               "input [1,3,512,512] RGB (x/255-0.5)/0.5 -> output [1,3,512,512] in [-1,1]",
               "non-commercial (GPEN)", None, facefusion("models-3.0.0", "gpen_bfr_512.onnx")),
    ModelEntry("restoreformer_plus_plus", "restoreformer_plus_plus.onnx", "enhancer",
               "input [1,3,512,512] RGB (x/255-0.5)/0.5 -> output [1,3,512,512] in [-1,1]",
               "Apache-2.0 (RestoreFormer++)", None, facefusion("models-3.0.0", "restoreformer_plus_plus.onnx")),
)}

# `facestream models fetch` with no name: what `--engine neural` runs.
DEFAULT_SET = tuple(name for name, e in CATALOG.items() if e.default)


def mirror_addresses(entry: ModelEntry, bases: list[str]) -> tuple[Address, ...]:
    """`entry`'s file on mirrors of one's own (base URLs holding the catalog's file names),
    checked against the catalog's checksums: the sha256 or CRC32 it states for the file, and
    where it states no CRC32, the `.hash` beside the file on the mirror (FaceFusion's copies,
    whose CRC32 the catalog fetches from their host)."""
    stem = entry.file.rsplit(".", 1)[0]
    crc32 = next((a.crc32 for a in entry.addresses if a.crc32), None)
    return tuple(Address(f"{base.rstrip('/')}/{entry.file}", sha256=entry.sha256, crc32=crc32,
                         checksum_url=None if crc32 else f"{base.rstrip('/')}/{stem}.hash") for base in bases)


def user_models_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "facestream" / "models"


def search_dirs(models_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """The folders searched for model files, in order."""
    dirs: list[Path] = []
    if models_dir:
        dirs.append(Path(models_dir))
    env = os.environ.get("FACESTREAM_MODELS")
    if env:
        dirs.append(Path(env))
    dirs.append(user_models_dir())
    return dirs


def named(table: Mapping[str, T], name: str, kind: str) -> T:
    """`table[name]`; a ValueError naming the `kind` and listing the known names otherwise."""
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown {kind} {name!r}; known: {', '.join(table)}") from None


def entry(name: str) -> ModelEntry:
    """The catalog entry `name`; ValueError listing the known names otherwise."""
    return named(CATALOG, name, "model")


def locate(name: str, models_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The first file of model `name` in the search folders, or None."""
    file = entry(name).file
    for folder in search_dirs(models_dir):
        candidate = folder / file
        if candidate.is_file():
            return candidate
    return None


def find(name: str, models_dir: str | os.PathLike[str] | None = None) -> Path:
    """Like `locate`, but a missing file is ModelNotFound naming it and the folders searched."""
    path = locate(name, models_dir)
    if path is None:
        folders = ", ".join(str(d) for d in search_dirs(models_dir))
        into = f" --models-dir {models_dir}" if models_dir else ""
        raise ModelNotFound(f"model {name!r} ({entry(name).file}) not found in: {folders} "
                            f"(`facestream models fetch {name}{into}` downloads it)")
    return path
