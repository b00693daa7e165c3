"""`facestream models quantize NAME ...`: INT8 files beside the float ones, each checked
against its family's drift budget (engines.quantize), with one line a model.

Calibration media: `--calibrate` a video (frames taken evenly through it), a photo, or a
folder of them; by default the demo's pictures (insightface's t1.jpg and scikit-image's
astronaut, from installed packages). `dlib_embedder`, the embedded default's face embedding,
is exported to ONNX from its installed weights first (engines.dlib.onnx_export).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from stream.cli.parser import CliError

DLIB_EMBEDDER = "dlib_embedder"  # not a catalog download: made here from face_recognition_models
VIDEO_FRAMES = 24  # frames taken from a calibration video
FOLDER_FILES = 64  # pictures and videos read from a calibration folder at most


def _video_frames(path: Path, count: int) -> list[np.ndarray]:
    import av

    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            total = stream.frames or 0
            step = max(1, total // count) if total else 10
            frames = []
            for i, frame in enumerate(container.decode(stream)):
                if i % step == 0:
                    frames.append(frame.to_ndarray(format="bgr24"))
                if len(frames) >= count:
                    break
            return frames
    except (av.error.FFmpegError, IndexError) as exc:
        raise CliError(f"--calibrate {str(path)!r}: not a readable video or picture ({exc})") from exc


def _read_media(path: Path) -> list[np.ndarray]:
    from stream.media.image_io import is_image_path, read_image

    if is_image_path(path):
        return [read_image(path)]
    return _video_frames(path, VIDEO_FRAMES)


def calibration_pictures(source: str | None) -> tuple[list[np.ndarray], str]:
    """The pictures to calibrate on, and what they are in words; CliError, one line, when the
    source is missing or holds nothing readable."""
    if source is None:
        from stream.media.demo_clips import DemoUnavailable, astronaut, group_picture

        try:
            return [group_picture(), astronaut()], "the demo pictures (t1.jpg, astronaut)"
        except DemoUnavailable as exc:
            raise CliError(f"models quantize: {exc}; give --calibrate VIDEO|PHOTO|FOLDER, or install the "
                           "demo extra (pip install 'facestream[demo]')") from exc
    path = Path(source)
    if not path.exists():
        raise CliError(f"--calibrate {source!r}: no such file or folder")
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))[:FOLDER_FILES]
        pictures: list[np.ndarray] = []
        for file in files:
            try:
                pictures.extend(_read_media(file))
            except Exception:  # noqa: BLE001 - a folder may hold other files: skip what is not media
                continue
        if not pictures:
            raise CliError(f"--calibrate {source!r}: no picture or video in the folder")
        return pictures, f"{len(pictures)} pictures from {source}"
    pictures = _read_media(path)
    if not pictures:
        raise CliError(f"--calibrate {source!r}: no frames could be read")
    return pictures, f"{path.name} ({len(pictures)} picture{'s' if len(pictures) > 1 else ''})"


def embedder_onnx(folder: Path) -> Path:
    """`folder`/dlib_embedder.onnx, exported from the installed dlib weights when it is not
    there yet (this model is made, not downloaded)."""
    from engines.dlib.embedding_io import FILE_NAME
    from engines.dlib.models import model_path
    from engines.dlib.onnx_export import export_embedder

    target = folder / FILE_NAME
    if target.is_file():
        return target
    print(f"{DLIB_EMBEDDER}: exporting dlib's face embedding network to {target}")
    return export_embedder(target, model_path("embedding"))


def _model_file(name: str, models_dir: str | None) -> tuple[Path, str]:
    """The float file and catalog kind of a model to quantise (dlib's embedder exported first)."""
    from engines.catalog import entry, find, user_models_dir

    if name == DLIB_EMBEDDER:
        return embedder_onnx(Path(models_dir) if models_dir else user_models_dir()), "embedder"
    item = entry(name)  # an unknown name is one line listing the known ones
    return find(name, models_dir), item.kind


def _arcface(models_dir: str | None, threads: int):  # -> ArcFaceEmbedder | None
    """ArcFace on the float file, where it is found: the swappers' sources and identity measure."""
    from engines.backends.base import RuntimeOptions
    from engines.backends.ort import OrtRuntime
    from engines.catalog import locate
    from engines.models.arcface import ArcFaceEmbedder

    path = locate("arcface_w600k_r50", models_dir)
    if path is None:
        return None
    model = ArcFaceEmbedder(OrtRuntime(path, RuntimeOptions(intra_threads=threads)))
    model.open()
    return model


def _converter(name: str, models_dir: str | None, threads: int):  # -> InferenceRuntime | None
    from engines.backends.base import RuntimeOptions
    from engines.backends.ort import OrtRuntime
    from engines.catalog import locate
    from engines.models.swappers import PROFILES

    prof = PROFILES.get(name)
    if prof is None or not prof.converter:
        return None
    path = locate(prof.converter, models_dir)
    return OrtRuntime(path, RuntimeOptions(intra_threads=threads)) if path else None


def cmd_models_quantize(args: argparse.Namespace) -> int:
    from engines.quantize.quantizer import QuantizeOptions, quantize_model
    from engines.quantize.samples import sample_set

    names = list(dict.fromkeys(args.names))
    if args.faces < 2:
        raise CliError(f"--faces {args.faces}: at least 2 calibration inputs")
    models_dir = args.quantize_dir or args.models_dir
    files = {name: _model_file(name, models_dir) for name in names}  # every name checked before any work
    pictures, what = calibration_pictures(args.calibrate)
    try:
        samples = sample_set(pictures, args.faces, max(4, args.faces // 2))
    except ValueError:
        raise CliError(f"--calibrate {args.calibrate or 'the demo pictures'}: no face found in "
                       f"{len(pictures)} picture{'s' if len(pictures) > 1 else ''}") from None
    print(f"calibration: {what}: {samples.faces_found} faces found; held out: {samples.held_out_faces}")
    options = QuantizeOptions(budget=not args.no_budget, threads=args.threads)
    # ArcFace is the swappers' sources and identity measure, the converter's inputs: loaded for them only
    wants_arcface = any(kind in ("swapper", "converter") for _, kind in files.values())
    arcface = _arcface(models_dir, args.threads) if wants_arcface else None
    written, refused = [], []
    for name, (path, kind) in files.items():
        outcome = quantize_model(name, kind, path, samples, options, arcface=arcface,
                                 converter=_converter(name, models_dir, args.threads),
                                 calibration_source=what, say=lambda text: print(f"  {text}", flush=True))
        print(outcome.line, flush=True)
        (written if outcome.written else refused).append(name)
    print(f"models quantize: {len(written)} written, {len(refused)} refused"
          + (" (the float files stay in use for those)" if refused else ""))
    if refused:
        print(f"error: models quantize: over budget: {', '.join(refused)}", file=sys.stderr)
        return 1
    return 0
