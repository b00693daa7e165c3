"""Run configuration: nested dataclasses, loaded from YAML presets, overridden field by field."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from engines.backends.base import RuntimeOptions
from engines.classic.swapper import BLENDS, ClassicalOptions
from engines.models.masks import AREAS, REGIONS, MaskOptions
from engines.registry import ENGINE_NAMES
from stream.errors import ConfigError

# BLENDS and ENGINE_NAMES are defined by the engines; the CLI offers them from here too.
__all__ = ["BLENDS", "ENGINE_NAMES", "SELECT_MODES", "Config", "load_config", "preset_names"]


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


@dataclass
class DetectConfig:
    """Face detection (dlib HOG): how often, and at what size of frame."""

    every: int = 12  # full-frame detection every N frames (and whenever a track is lost)
    max_side: int = 1024  # the frame is scaled so its longer side is this (down, or up by at most max_upscale)
    # A smaller frame is upscaled towards max_side, at most this much: HOG finds faces from 80 px
    # at the scale it scans, so a 640x360 frame's 50 px faces are found (1: never upscaled).
    max_upscale: float = 2.0
    upsample: int = 0  # dlib upsampling passes (each one finds smaller faces, 4x the cost)
    every_empty: int = 2  # with no face followed, detection every N frames (a face coming in is found sooner)
    background: bool = True  # live runs: detect on a thread of its own, tracking goes on meanwhile
    # Files: 0, detection in line (the analysis waits for it); N, on a thread of its own
    # while the analysis goes on, its boxes merged N frames after the frame they were found
    # in (the same frames whatever the machine's speed, so the same output). HOG lets the
    # GIL go: on 2 cores the detection then runs beside the other stages.
    lag: int = 0
    verify: bool = True  # dlib engine: boxes checked by landmarks and embedding (no badges or prints swapped)
    # dlib engine: each box measured again in a crop around it (HOG's boxes come in its
    # pyramid's and cells' steps, and the 68 points move with the box; about 6 ms a face).
    refine: bool = True
    # With refine: a face the optical flow follows cleanly has its box refined, and taken,
    # at one detection in N; at the others the detection only confirms the face, its box
    # left where the flow carried it (1: every detection refines every box). Refining is
    # 14-17 ms a box, on the detection's thread; a face's first box is always refined. 3 by
    # default (`quality`: 1): with scan_every 2 and swap.color_every 2, the default's six
    # faces 1.10x as fast, and the quality suite's distances within -0.006..+0.002 of
    # refining every box (2026-12-05).
    refine_every: int = 3
    # dlib engine: the whole frame scanned at one detection in N; at the others, while every
    # face is followed cleanly, each is only looked for again in a crop around its box (a
    # few ms a face against the frame's 40-50 ms), so a face coming into a scene whose faces
    # are all followed is found up to N x `every` frames after it appears (1: every
    # detection scans the frame). A face lost, held or covered, or none followed, brings the
    # next detection back to the whole frame. 2 by default (`quality`: 1): a face coming into
    # a followed scene is found within 24 frames (0.8 s at 30 fps), not 12.
    scan_every: int = 2

    def __post_init__(self) -> None:
        _check(self.every >= 1, f"detect.every must be >= 1, got {self.every}")
        _check(isinstance(self.scan_every, int) and not isinstance(self.scan_every, bool)
               and 1 <= self.scan_every <= 8,
               f"detect.scan_every must be a whole number from 1 to 8, got {self.scan_every!r}")
        _check(self.every_empty >= 1, f"detect.every_empty must be >= 1, got {self.every_empty}")
        _check(isinstance(self.lag, int) and not isinstance(self.lag, bool) and 0 <= self.lag <= 30,
               f"detect.lag must be a whole number from 0 to 30, got {self.lag!r}")
        _check(self.max_side >= 64, f"detect.max_side must be >= 64, got {self.max_side}")
        _check(1.0 <= self.max_upscale <= 4.0, f"detect.max_upscale must be in [1, 4], got {self.max_upscale}")
        _check(self.upsample in (0, 1, 2), f"detect.upsample must be 0, 1 or 2, got {self.upsample}")
        _check(isinstance(self.verify, bool), f"detect.verify must be true or false, got {self.verify!r}")
        _check(isinstance(self.refine, bool), f"detect.refine must be true or false, got {self.refine!r}")
        _check(isinstance(self.refine_every, int) and not isinstance(self.refine_every, bool)
               and 1 <= self.refine_every <= 30,
               f"detect.refine_every must be a whole number from 1 to 30, got {self.refine_every!r}")


SMOOTHERS = ("pose", "one-euro")
ALIGN_POINTS = ("landmarks", "detector")


@dataclass
class TrackConfig:
    """Tracklets: matching, loss, landmark smoothing (One-Euro filter), identity re-checks."""

    match_iou: float = 0.3  # a detection continues a track when their boxes overlap this much
    max_missed: int = 1  # detections a track may miss before it is dropped
    # Detections in a row that may miss a face whose box the detector still confirms (the dlib
    # engine's face filter: an occluded face); 0: a missed face is hidden at once.
    max_held: int = 5
    min_cutoff: float = 1.5  # smoother one-euro: cut-off frequency (Hz) at rest; lower = smoother
    # One-Euro: how fast the cut-off rises with speed; higher = less lag. At 0.02 a face turning
    # or panning was drawn where it had been (dlib landmark shift 0.07-0.10 of the distance
    # between the eyes' centres on the quality clips); at 0.3 about 0.04, with the same flicker.
    beta: float = 0.3
    recheck_every: int = 300  # frames between identity re-checks (reference/mapping modes)
    smoothing: bool = True  # landmark smoothing; false: each frame's own landmarks
    # How landmarks are smoothed: pose (the face's position, scale and roll through a
    # constant-velocity Kalman filter, its shape through a One-Euro filter: a moving face is
    # followed without lag, jitter 18-27% lower on the quality suite's moving clips) |
    # one-euro (every point through a One-Euro filter, min_cutoff and beta above).
    smoother: str = "pose"
    points: str = "landmarks"  # alignment: landmarks (five made from the 68) | detector (its own five)
    # Look for what stands in front of each face (its appearance against the one remembered
    # while it was seen clean, engines/classic/occlusion.py): the classical swap leaves it in front.
    occlusion: bool = True
    # A face seen clean with nothing found in front of it at its last look is looked at on one
    # frame in this many (the faces take turns); one with something in front, or not seen
    # clean, on every frame. 1: every face on every frame. The look costs 0.5-0.6 ms a face;
    # at 2 an occluder coming in front of a bare face is found up to a frame later.
    occlusion_every: int = 2
    # Frames between the 68-point predictor's placements of a followed face's points (1: every
    # frame). Between them the last points move as the optical flow moved the face's picture
    # (the similarity it fits anyway), and the faces take turns, so a frame runs the predictor
    # on 1/n of them. The predictor holds the GIL (3.5 ms a face in the pipeline); a track's
    # first frame, a detection's, and a face the flow cannot follow cleanly always get it.
    landmarks_every: int = 1

    def __post_init__(self) -> None:
        _check(0.0 < self.match_iou < 1.0, f"track.match_iou must be in (0, 1), got {self.match_iou}")
        _check(self.max_missed >= 0, f"track.max_missed must be >= 0, got {self.max_missed}")
        _check(self.max_held >= 0, f"track.max_held must be >= 0, got {self.max_held}")
        _check(self.min_cutoff > 0, f"track.min_cutoff must be > 0, got {self.min_cutoff}")
        _check(self.beta >= 0, f"track.beta must be >= 0, got {self.beta}")
        _check(self.recheck_every >= 1, f"track.recheck_every must be >= 1, got {self.recheck_every}")
        _check(isinstance(self.smoothing, bool), f"track.smoothing must be true or false, got {self.smoothing!r}")
        _check(self.smoother in SMOOTHERS,
               f"track.smoother must be one of {', '.join(SMOOTHERS)}, got {self.smoother!r}")
        _check(isinstance(self.occlusion, bool), f"track.occlusion must be true or false, got {self.occlusion!r}")
        _check(isinstance(self.occlusion_every, int) and not isinstance(self.occlusion_every, bool)
               and 1 <= self.occlusion_every <= 8,
               f"track.occlusion_every must be a whole number from 1 to 8, got {self.occlusion_every!r}")
        _check(isinstance(self.landmarks_every, int) and not isinstance(self.landmarks_every, bool)
               and 1 <= self.landmarks_every <= 8,
               f"track.landmarks_every must be a whole number from 1 to 8, got {self.landmarks_every!r}")
        _check(self.points in ALIGN_POINTS,
               f"track.points must be one of {', '.join(ALIGN_POINTS)}, got {self.points!r}")


SELECT_MODES = ("all", "largest", "reference", "mapping")
SELECT_ORDERS = ("largest", "detector")


@dataclass
class SelectConfig:
    """Which target faces are swapped, and with which source face."""

    mode: str = "all"  # all | largest | reference | mapping
    reference: str | None = None  # reference mode: photo of the one person to swap
    mapping: list[list[str]] = field(default_factory=list)  # mapping mode: [[source, reference], ...]
    threshold: float | None = None  # same-person distance; None: the embedder's own (dlib 0.6)
    order: str = "largest"  # the order faces are swapped and composited in: largest first | detector's

    def __post_init__(self) -> None:
        _check(self.mode in SELECT_MODES,
               f"select.mode must be one of {', '.join(SELECT_MODES)}, got {self.mode!r}")
        _check(self.order in SELECT_ORDERS,
               f"select.order must be one of {', '.join(SELECT_ORDERS)}, got {self.order!r}")
        _check(self.threshold is None or 0 < self.threshold < 2,
               f"select.threshold must be in (0, 2), got {self.threshold}")
        if self.mode == "reference":
            _check(bool(self.reference), "select.mode 'reference' needs a reference photo (--reference)")
        if self.mode == "mapping":
            _check(bool(self.mapping), "select.mode 'mapping' needs pairs (--map SOURCE=REFERENCE)")
            for pair in self.mapping:
                _check(len(pair) == 2, f"select.mapping entries are [source, reference], got {pair!r}")


@dataclass
class EncodeConfig:
    """The encoder of file outputs."""

    # auto: H.264 (libx264) for 8-bit inputs; HEVC Main10 (libx265) for 10-bit ones, which keep
    # their bit depth, colour tags and HDR10 metadata (stream/media/dynamic_range.py). An encoder
    # that writes 8 bits gets HDR inputs tone-mapped to BT.709 SDR.
    codec: str = "auto"
    preset: str = "veryfast"
    crf: int = 20
    # x264's threads. 0: auto, one for a picture up to 720p on a machine of 4 cores or fewer
    # (the stages keep the cores busy; its frame threads only add work), its own choice
    # otherwise (stream/runtime/cores.py).
    threads: int = 0
    # Quantiser steps finer on the swapped faces than on the rest of the picture (x264's and
    # x265's QP: 6 steps halve the step size), for faces up to 64 px wide, fading to none at
    # 112 px (stream/media/face_roi.py): at crf 20 a 40 px face's eyes and mouth are
    # flattened by the encoder. 0: off. Not with the ultrafast preset (no adaptive quantiser).
    # 8 rather than 5: the small clip's distance 0.601 -> 0.595 for files 16% larger (12:
    # 0.591, 48% larger). (Those runs asked for 2.5, 4 and 6 steps on a scale off by 2.04x:
    # FFmpeg's encoders multiply a region's qoffset by 51, not 25. stream/media/face_roi.py.)
    face_qp: float = 8.0
    # HDR inputs (PQ, HLG) tone-mapped to BT.709 SDR 8-bit (Hable on linear light) rather than
    # kept 10-bit. Live outputs are SDR: there HDR inputs are always tone-mapped.
    tone_map: bool = False

    def __post_init__(self) -> None:
        _check(bool(self.codec), "encode.codec must name an encoder (or auto)")
        _check(0 <= self.crf <= 51, f"encode.crf must be in [0, 51], got {self.crf}")
        _check(0.0 <= self.face_qp <= 25.0, f"encode.face_qp must be in [0, 25], got {self.face_qp}")
        _check(self.threads >= 0, f"encode.threads must be >= 0, got {self.threads}")


@dataclass
class PipelineConfig:
    """The staged runtime: ring depths and whether stages run on threads."""

    ring_depth: int = 4  # slots between two stages
    live_ring_depth: int = 1  # live runs: only the newest frame waits between stages (no standing queue)
    staged: bool = True  # False: one thread runs every stage in turn (for comparison)
    max_faces: int = 8  # faces swapped per frame at most (largest first)
    # OpenCV's own worker threads (cv2.setNumThreads, process-wide, set when a job opens; 0:
    # OpenCV's choice, one a core). The stages already run side by side; OpenCV splitting each
    # small call (a face's optical flow, its warp) over the cores as well only added overhead:
    # six faces, serial, 2 cores, 91 -> 80 ms of CPU a frame, the same pixels (tools/cost_parts.py).
    cv_threads: int = 1
    # numpy's BLAS threads (process-wide, set when a job opens; 0: the library's own choice).
    # One: its second thread only spun beside the busy stages (stream/runtime/cores.py).
    blas_threads: int = 1

    def __post_init__(self) -> None:
        _check(self.ring_depth >= 1, f"pipeline.ring_depth must be >= 1, got {self.ring_depth}")
        _check(self.cv_threads >= 0, f"pipeline.cv_threads must be >= 0, got {self.cv_threads}")
        _check(self.blas_threads >= 0, f"pipeline.blas_threads must be >= 0, got {self.blas_threads}")
        _check(self.live_ring_depth >= 1, f"pipeline.live_ring_depth must be >= 1, got {self.live_ring_depth}")
        _check(self.max_faces >= 1, f"pipeline.max_faces must be >= 1, got {self.max_faces}")


@dataclass
class EnhanceConfig:
    """The optional face enhancer (GFPGAN 1.4 by default; engines/models/enhancers.py): loaded
    only when enabled."""

    enabled: bool = False
    model: str = "gfpgan_1.4"
    every: int = 1  # run the model every k-th frame per face; re-paste its last result between

    def __post_init__(self) -> None:
        from engines.models.enhancers import ENHANCER_NAMES

        _check(self.every >= 1, f"enhance.every must be >= 1, got {self.every}")
        _check(self.model in ENHANCER_NAMES,
               f"enhance.model: unknown enhancer {self.model!r}; known: {', '.join(ENHANCER_NAMES)}")


def _names(value: object) -> list[str]:
    """A list of names from a YAML list or one comma-separated string (a flag's value)."""
    items = value.split(",") if isinstance(value, str) else list(value)  # type: ignore[call-overload]
    return [str(v).strip() for v in items if str(v).strip()]


@dataclass
class MaskConfig:
    """Face masks for the neural swappers (engines/models/masks.py): which pixels of the swap
    are pasted. `types`: any of box, occlusion (an XSeg model), area (from the 68 landmarks:
    leave `mouth` out of `areas` to keep the target's own mouth) and region (a BiSeNet face
    parser; `regions` chooses which are pasted). None: insightface's paste mask alone."""

    types: list[str] = field(default_factory=list)
    areas: list[str] = field(default_factory=lambda: list(AREAS))  # all: the whole face
    regions: list[str] = field(default_factory=lambda: list(REGIONS))
    blur: float = 0.3  # the box mask's fade, over half the crop
    # The model masks (occlusion, region) of a tracked face recomputed every k-th of its
    # frames, the last ones used between (they follow the face in its crop). 1: every frame;
    # the `fast` preset (live on 2 cores) says 3.
    every: int = 1

    def __post_init__(self) -> None:
        self.types, self.areas, self.regions = _names(self.types), _names(self.areas), _names(self.regions)
        _check(0.0 <= self.blur <= 1.0, f"mask.blur must be from 0 to 1, got {self.blur}")
        try:
            MaskOptions(tuple(self.types), tuple(self.areas), tuple(self.regions), self.blur, every=self.every)
        except ValueError as exc:
            _check(False, f"mask: {exc}")


@dataclass
class ModelsConfig:
    """The neural family: which catalog models, where their files are, how they run."""

    dir: str | None = None  # searched first; then $FACESTREAM_MODELS, then the per-user folder
    detector: str = "scrfd_10g"
    embedder: str = "arcface_w600k_r50"
    swapper: str = "inswapper_128"
    landmarker: str | None = "2dfan4"  # None, or its file missing: dlib's 68-point predictor
    detect_size: int = 640  # SCRFD input size (square, a multiple of 32)
    # Faces meeting in a frame: crop each from the frame the faces before it left (insightface's
    # loop, exact; a face whose crop an earlier paste changed costs one more swapper call);
    # false: every crop from the unmodified frame, one batched call per frame.
    recrop_after_paste: bool = False
    # Paste-back as insightface runs it: warp, erode and blur over the whole frame (exact against
    # its loop on every CPU, a full-frame pass per face); false: on the face's region only (within
    # 2 grey levels of that, exact where this CPU's OpenCV allows: engines/geometry/region_warp.py).
    full_frame_paste: bool = False
    # Pixel boost: the swapper run on a crop this many pixels wide, as tiles of its own size
    # (a multiple of the model's size, up to 1024: inswapper 256 = 4 calls a face, 512 = 16);
    # 0: the model's own size (engines/models/pixel_boost.py).
    pixel_boost: int = 0
    occluder: str = "xseg_1"  # mask.types occlusion: the XSeg model
    parser: str = "bisenet_resnet_34"  # mask.types region: the face parser
    # Which files run: auto, fp32, fp16 or int8 (engines/quantize/choose.py): auto takes the
    # INT8 files that passed their drift budget on a CPU with INT8 instructions.
    precision: str = "auto"
    # How often each face's swap runs (stream/stages/carry.py): every N frames, its last swap
    # carried between by a warp onto the face's landmarks; auto: files every frame, live runs of
    # the neural engine as often as a worker off the frame path can, the classical engine every
    # frame. (None reads as auto: a field that takes a number or a word.)
    swap_every: int | str | None = None

    def __post_init__(self) -> None:
        every = "auto" if self.swap_every is None else self.swap_every
        if isinstance(every, str) and every.strip().isdigit():
            every = int(every)
        _check(every == "auto" or (isinstance(every, int) and not isinstance(every, bool) and every >= 1),
               f"models.swap_every must be a whole number >= 1 or auto, got {self.swap_every!r}")
        self.swap_every = every
        _check(self.detect_size >= 32 and self.detect_size % 32 == 0,
               f"models.detect_size must be a positive multiple of 32, got {self.detect_size}")
        _check(isinstance(self.recrop_after_paste, bool),
               f"models.recrop_after_paste must be true or false, got {self.recrop_after_paste!r}")
        _check(isinstance(self.full_frame_paste, bool),
               f"models.full_frame_paste must be true or false, got {self.full_frame_paste!r}")
        from engines.quantize.choose import PRECISIONS

        _check(self.precision in PRECISIONS,
               f"models.precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        from engines.models.pixel_boost import boost_factor
        from engines.models.swappers import profile

        try:
            swapper = profile(self.swapper)
            boost_factor(self.pixel_boost, swapper.size, swapper.name)
        except ValueError as exc:
            _check(False, f"models: {exc}")


@dataclass
class Config:
    """Everything a run needs; built from defaults, a preset, then field overrides."""

    engine: str = "auto"  # auto: the neural set when its files are found, else dlib
    models: ModelsConfig = field(default_factory=ModelsConfig)
    runtime: RuntimeOptions = field(default_factory=RuntimeOptions)
    enhance: EnhanceConfig = field(default_factory=EnhanceConfig)
    mask: MaskConfig = field(default_factory=MaskConfig)
    detect: DetectConfig = field(default_factory=DetectConfig)
    track: TrackConfig = field(default_factory=TrackConfig)
    select: SelectConfig = field(default_factory=SelectConfig)
    swap: ClassicalOptions = field(default_factory=ClassicalOptions)
    encode: EncodeConfig = field(default_factory=EncodeConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)

    def __post_init__(self) -> None:
        _check(self.engine in ENGINE_NAMES, f"engine must be one of {', '.join(ENGINE_NAMES)}, got {self.engine!r}")
        # The detector's points are only as current as its last detection.
        _check(self.track.points != "detector" or self.detect.every == 1,
               f"track.points 'detector' needs detection on every frame (detect.every: 1), "
               f"got detect.every {self.detect.every}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _check_kind(name: str, default: object, value: object) -> None:
    """A field's value is of its default's kind (a number where the default is a number ...),
    so a bad override gets a line naming it rather than a comparison failing in a check.
    None passes (some fields take it: a model named `none`); the field's own check has it."""
    if value is None:
        return
    if isinstance(default, bool):
        _check(isinstance(value, bool), f"{name} must be true or false, got {value!r}")
    elif isinstance(default, int):
        _check(isinstance(value, int) and not isinstance(value, bool),
               f"{name} must be a whole number, got {value!r}")
    elif isinstance(default, float):
        _check(isinstance(value, (int, float)) and not isinstance(value, bool),
               f"{name} must be a number, got {value!r}")
    elif isinstance(default, str):
        _check(isinstance(value, str), f"{name} must be text, got {value!r}")


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'} must be a mapping, got {data!r}")
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            raise ConfigError(f"unknown config field {where + key!r}; known: {', '.join(known)}")
        sub = known[key].default_factory  # type: ignore[misc]
        if dataclasses.is_dataclass(sub):
            kwargs[key] = _build(sub, value, f"{where}{key}.")  # type: ignore[arg-type]
        else:
            default = known[key].default
            if default is None and str(known[key].type).replace(" ", "") in ("float|None", "Optional[float]"):
                default = 0.0  # a number or null (e.g. swap.shape_turned): checked as a number
            _check_kind(where + key, default, value)
            kwargs[key] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"bad config section {where or 'config'}: {exc}") from exc
    except ValueError as exc:  # the engines' own option classes validate with ValueError
        raise ConfigError(str(exc)) from exc


def preset_dir() -> Path | None:
    """Where the presets are: `stream/presets` in an installed wheel (the build maps
    configs/ there), configs/ beside the package in a checkout or an editable install."""
    here = Path(__file__).resolve().parent
    for folder in (here / "presets", here.parent / "configs"):
        if folder.is_dir():
            return folder
    return None


def preset_names() -> list[str]:
    """The presets shipped with facestream (fast, quality, ...)."""
    folder = preset_dir()
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder is not None else []


def resolve_preset(name: str) -> Path:
    """A preset is a YAML path, or the name of a shipped preset (fast, quality, ...)."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    folder = preset_dir()
    candidate = folder / f"{name}.yaml" if folder is not None else None
    if candidate is not None and candidate.is_file():
        return candidate
    raise ConfigError(f"config {name!r} not found (a YAML path, or one of: {', '.join(preset_names())})")


def load_config(preset: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Defaults, then the preset's fields, then `section.field=value` overrides (YAML values)."""
    data: dict[str, Any] = {}
    if preset:
        path = resolve_preset(preset)
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"config {str(path)!r} cannot be read: {str(exc).splitlines()[0]}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"config {str(path)!r} must hold a mapping")
        data = loaded
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} must look like section.field=value")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a section")
            node = child
        node[parts[-1]] = value
    return _build(Config, data, "")
