"""What a neural swapper and its pixel boost cost: ms per face at each size, on the swapper's
cost-equivalent stand-in (tools/cost_models.py: its multiply-accumulates in real conv
layers; the real weights cannot be fetched here) and the CPU's ONNX Runtime.

A boost of k x the model's size runs the model k*k times a face (the tiles), and crops,
normalises, re-assembles and pastes the larger crop. Each size's figure is the median of
`--repeat` swaps of one face in a 720p frame (crop, model calls, decode, paste-back mask
and blend). The swappers with a stand-in: inswapper_128 (and _fp16), simswap_256 and
simswap_unofficial_512 (hyperswap's layers are not published):

    python tools/bench_pixel_boost.py                       # inswapper_128 at 128, 256, 512
    python tools/bench_pixel_boost.py --sizes 128 256 512 1024 --repeat 2
    python tools/bench_pixel_boost.py --swapper simswap_256  # at its own size
    python tools/bench_pixel_boost.py --sizes 128 --mask area,occlusion   # and what the masks add

With `--mask`, each size is timed with and without the masks (the face then placed by its
68 landmarks, which the area mask needs); the occlusion mask runs xseg_1's stand-in, the
region mask bisenet_resnet_34's. A live run recomputes the model masks every `mask.every`
frames (3 in `fast`), so it pays a third of their figure.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from engines.backends.base import RuntimeOptions  # noqa: E402
from engines.backends.ort import OrtRuntime  # noqa: E402
from engines.dlib.detector import DlibHogDetector  # noqa: E402
from engines.dlib.landmarker import DlibLandmarker  # noqa: E402
from engines.frame_views import FrameViews  # noqa: E402
from engines.models.inswapper import InSwapper  # noqa: E402
from engines.models.masks import MASK_TYPES, Masker, MaskOptions  # noqa: E402
from engines.models.swappers import PROFILES, profile  # noqa: E402
from stream.media.demo_clips import astronaut  # noqa: E402
from tools.cost_models import BUILDERS  # noqa: E402
from tools.synth.swappers import make_converter  # noqa: E402


def _time_swaps(swapper: InSwapper, frame: np.ndarray, points: np.ndarray, repeat: int) -> float:
    """Median ms of `repeat` swaps of the face at `points` (after one warm-up swap)."""
    swapper.open()
    latent = swapper.prepare_source(np.random.default_rng(0).standard_normal(512).astype(np.float32))
    swapper.forward(frame, points, latent)  # warm-up: the session's first run
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        swapper.forward(frame, points, latent)
        times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--swapper", default="inswapper_128", choices=sorted(PROFILES),
                    help="the swapper whose stand-in is timed (default inswapper_128)")
    ap.add_argument("--sizes", type=int, nargs="+",
                    help="pixel boosts to time (default: inswapper_128 at 128 256 512, others at their own size)")
    ap.add_argument("--repeat", type=int, default=3, help="swaps timed per size (median)")
    ap.add_argument("--mask", default="",
                    help="mask types to time as well, comma-separated (box, area, occlusion, region)")
    args = ap.parse_args(argv)
    types = tuple(t for t in args.mask.split(",") if t)
    bad = [t for t in types if t not in MASK_TYPES]
    if bad:
        ap.error(f"--mask {bad[0]!r}: the mask types are {', '.join(MASK_TYPES)}")
    prof = profile(args.swapper)
    file = f"{prof.name}.onnx"
    if file not in BUILDERS:
        stand_ins = [name for name in PROFILES if f"{name}.onnx" in BUILDERS]
        ap.error(f"{prof.name} has no cost-equivalent stand-in (its layers are not published); "
                 f"these have: {', '.join(stand_ins)}")
    sizes = args.sizes or ([128, 256, 512] if prof.name == "inswapper_128" else [prof.size])
    frame = np.zeros((720, 1280, 3), np.uint8)
    face = astronaut()
    frame[100:100 + face.shape[0], 400:400 + face.shape[1]] = face
    # the astronaut's eyes, nose and mouth corners in the frame (a 512 px picture at 400, 100)
    face_points = np.array([[197, 210], [293, 210], [245, 262], [205, 310], [285, 310]], np.float32) + [400, 100]
    if types:  # the area mask is drawn from the 68 landmarks
        views = FrameViews(frame)
        face_points = DlibLandmarker().forward(views, DlibHogDetector().forward(views)[0][0])
    with tempfile.TemporaryDirectory() as tmp:
        path = BUILDERS[file](Path(tmp) / file)
        converter = None
        if prof.converter:  # its cost is the source's, once a track: a plain linear map will do
            converter = OrtRuntime(make_converter(Path(tmp) / f"{prof.converter}.onnx"), RuntimeOptions())
        masker = None
        if types:
            def stand_in(mask_file: str) -> OrtRuntime:
                return OrtRuntime(BUILDERS[mask_file](Path(tmp) / mask_file), RuntimeOptions())

            masker = Masker(MaskOptions(types=types),
                            occluder=stand_in("xseg_1.onnx") if "occlusion" in types else None,
                            parser=stand_in("bisenet_resnet_34.onnx") if "region" in types else None)
        print(f"{prof.name} cost-equivalent stand-in, one face in a 1280x720 frame, median of {args.repeat}:")
        base = None
        for size in sizes:
            swapper = InSwapper(OrtRuntime(path, RuntimeOptions()), profile=prof, converter=converter,
                                pixel_boost=size)
            ms = _time_swaps(swapper, frame, face_points, args.repeat)
            base = base or ms
            print(f"  pixel boost {size:>4}: {swapper.tiles:>2} model call(s) a face, {ms:8.0f} ms a face "
                  f"({ms / base:.1f}x the model's own size)")
            if masker is not None:
                masked = InSwapper(OrtRuntime(path, RuntimeOptions()), profile=prof, converter=converter,
                                   pixel_boost=size, masker=masker)
                with_masks = _time_swaps(masked, frame, face_points, args.repeat)
                print(f"    with masks {','.join(types)}: {with_masks:8.0f} ms a face, the masks "
                      f"{with_masks - ms:+.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
