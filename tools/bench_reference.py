"""Our neural pipeline against the per-frame loop roop-style tools run, on the same models.

Both sides run the cost-equivalent models of tools/cost_models.py (built into a temp dir),
the same 720p clips (one face, six faces) and the same PyAV decode / libx264 encode:

- ours: `SwapJob`, staged, engine=neural (SCRFD every N frames, landmarks every frame,
  inswapper per face; the source latent once);
- reference: insightface's `FaceAnalysis` (detection + recognition, det_size 640, CPU)
  `.get(frame)` on every frame, then `INSwapper.get(frame, face, source, paste_back=True)`
  for every face: detection and an ArcFace embedding per face on every frame.

The two alternate `--repeat` times and the figures are medians (the machines are noisy).
With the real models' cost the swapper (~175 GMACs a face) dominates on a CPU, so expect
seconds per frame: keep `--seconds` small (fractions are fine: 0.2 s = 6 frames).
Same faces on both sides: the SCRFD stand-in's own detections come from a cheap contrast
head, not a face model, so every detection call (ours at its cadence, the reference's on
every frame) runs the cost-equivalent SCRFD for its cost and then answers with dlib's HOG
boxes and the five points of dlib's 68 landmarks (`--faces-from model` keeps the
stand-in's boxes). That adds dlib's cost (~0.1 s) to each detection call on both sides,
which the reference makes on every frame: a small handicap for the reference next to
seconds of swapping per face.

    python tools/bench_reference.py --seconds 3 --repeat 1
    python tools/bench_reference.py --faces 1 --seconds 1 --landmarker 2dfan4
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

import av  # noqa: E402
import cv2  # noqa: E402
import numpy as np  # noqa: E402

from stream.config import load_config  # noqa: E402
from stream.job.runs import run_video  # noqa: E402
from stream.job.swap_job import SwapJob  # noqa: E402
from stream.media.demo_clips import astronaut, bench_clips  # noqa: E402
from tools.cost_models import build_all  # noqa: E402

CPU = ["CPUExecutionProvider"]


class DlibFaces:
    """Real faces for the stand-in detectors: dlib HOG boxes and five points from dlib's
    68 landmarks, as SCRFD-shaped arrays (dets (N, 5), kps (N, 5, 2))."""

    def __init__(self) -> None:
        from engines.dlib.detector import DlibHogDetector
        from engines.dlib.landmarker import DlibLandmarker

        self.det, self.lm = DlibHogDetector(1280), DlibLandmarker()

    def __call__(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        from engines.frame_views import FrameViews
        from engines.geometry.face_align import kps5_from_landmarks68

        frame = FrameViews(image)
        found = self.det.forward(frame)
        dets = np.array([[*box, score] for box, score in found], np.float32).reshape(-1, 5)
        kps = np.array([kps5_from_landmarks68(self.lm.forward(frame, box)) for box, _ in found],
                       np.float32).reshape(-1, 5, 2)
        return dets, kps


def use_dlib_faces() -> None:
    """Make both sides' SCRFD calls pay the model's cost and answer with dlib's faces."""
    from insightface.model_zoo.scrfd import SCRFD

    from engines.models.scrfd import ScrfdDetector

    faces = DlibFaces()
    ours, theirs = ScrfdDetector.forward, SCRFD.detect

    def ours_forward(self: Any, image: np.ndarray, *args: Any, **kwargs: Any) -> Any:
        ours(self, image, *args, **kwargs)  # the stand-in's cost
        return faces(image)

    def theirs_detect(self: Any, image: np.ndarray, *args: Any, **kwargs: Any) -> Any:
        theirs(self, image, *args, **kwargs)
        return faces(image)

    ScrfdDetector.forward = ours_forward  # type: ignore[method-assign]
    SCRFD.detect = theirs_detect  # type: ignore[method-assign]


def run_ours(config: str, models_dir: Path, source: str, clip: str, out: str) -> dict[str, Any]:
    cfg = load_config(config, ["engine=neural", f"models.dir={models_dir}", "pipeline.staged=true"])
    job = SwapJob(cfg, [source])
    job.open()
    return run_video(job, clip, out).report


class Reference:
    """roop's loop: FaceAnalysis.get + INSwapper.get(paste_back=True) on every frame."""

    def __init__(self, models_dir: Path, source_bgr: np.ndarray) -> None:
        from insightface.app import FaceAnalysis
        from insightface.model_zoo import get_model

        # FaceAnalysis loads every *.onnx of its folder (and routes the swapper by shape),
        # so it gets a folder of its own holding just the detector and the embedder. A
        # `name` that is an existing folder is used as is: nothing is downloaded.
        pack = models_dir / "insightface_pack"
        pack.mkdir(exist_ok=True)
        for f in ("det_10g.onnx", "w600k_r50.onnx"):
            link = pack / f
            if not link.exists():
                os.symlink(models_dir / f, link)
        self.app = FaceAnalysis(name=str(pack), allowed_modules=["detection", "recognition"], providers=CPU)
        self.app.prepare(ctx_id=-1, det_size=(640, 640))
        self.swapper = get_model(str(models_dir / "inswapper_128.onnx"), providers=CPU)
        faces = self.app.get(source_bgr)
        if not faces:
            raise RuntimeError("the reference detector found no face in the source picture")
        self.source = max(faces, key=lambda f: (f.bbox[2] - f.bbox[0]) * (f.bbox[3] - f.bbox[1]))

    def run(self, clip: str, out: str, crf: int, preset: str) -> dict[str, Any]:
        """Decode, swap every face of every frame, encode; fps and per-part seconds."""
        t = {"analyse": 0.0, "swap": 0.0}
        frames = faces_total = 0
        start = time.perf_counter()
        with av.open(clip) as inp, av.open(out, "w") as outp:
            vin = inp.streams.video[0]
            rate = vin.average_rate or Fraction(30)
            vout = outp.add_stream("libx264", rate=rate)
            vout.width, vout.height, vout.pix_fmt = vin.width, vin.height, "yuv420p"
            vout.options = {"crf": str(crf), "preset": preset}
            for frame in inp.decode(vin):
                img = frame.to_ndarray(format="bgr24")
                t0 = time.perf_counter()
                faces = self.app.get(img)
                t1 = time.perf_counter()
                for face in faces:
                    img = self.swapper.get(img, face, self.source, paste_back=True)
                t["swap"] += time.perf_counter() - t1
                t["analyse"] += t1 - t0
                vf = av.VideoFrame.from_ndarray(img, format="bgr24")
                vf.pts, vf.time_base = frame.pts, frame.time_base
                outp.mux(vout.encode(vf))
                frames += 1
                faces_total += len(faces)
            outp.mux(vout.encode(None))
        elapsed = time.perf_counter() - start
        return {"fps": frames / elapsed, "frames": frames, "faces_swapped": faces_total,
                "seconds": {k: round(v, 2) for k, v in t.items()}, "elapsed_s": round(elapsed, 2)}


def stage_line(rep: dict[str, Any]) -> str:
    return "  ".join(f"{k} {v['p50_ms']:.0f}/{v['p95_ms']:.0f}/{v['mean_ms']:.0f}" for k, v in rep["stages"].items())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faces", choices=["1", "6", "both"], default="both")
    ap.add_argument("--seconds", type=float, default=5.0, help="clip length (default 5; fractions allowed)")
    ap.add_argument("--seconds-six", type=float, help="clip length of the six-face clip (default: --seconds)")
    ap.add_argument("--config", default="fast", help="our preset (default: fast)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each, alternating (default 2)")
    ap.add_argument("--landmarker", choices=["dlib", "2dfan4"], default="dlib",
                    help="our per-frame landmarks: dlib's predictor (default) or the 2dfan4 stand-in")
    ap.add_argument("--faces-from", choices=["dlib", "model"], default="dlib",
                    help="whose boxes the detection calls return (see the module doc; default dlib)")
    ap.add_argument("--json", metavar="PATH", help="also write every report as JSON")
    args = ap.parse_args()
    if args.faces_from == "dlib":
        use_dlib_faces()
    warnings.filterwarnings("ignore", category=FutureWarning)  # insightface 2.1 on skimage 0.26

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fs-bench-ref-") as tmp:
        models = Path(tmp) / "models"
        files = ["det_10g.onnx", "w600k_r50.onnx", "inswapper_128.onnx"]
        if args.landmarker == "2dfan4":  # without the file our engine set falls back to dlib
            files.append("2dfan4.onnx")
        t0 = time.perf_counter()
        build_all(models, files)
        print(f"built {', '.join(files)} in {time.perf_counter() - t0:.0f} s")
        source = str(Path(tmp) / "source.png")
        src_bgr = astronaut()
        cv2.imwrite(source, src_bgr)
        clips = bench_clips(tmp, args.faces, args.seconds, args.seconds_six)
        cfg = load_config(args.config, [])
        ref = Reference(models, src_bgr)
        print(f"ours: preset {args.config}, staged, engine=neural, landmarks {args.landmarker}; "
              f"reference: insightface FaceAnalysis + INSwapper per frame; 1280x720 30 fps")
        for label, clip in clips:
            runs: dict[str, list[dict[str, Any]]] = {"ours": [], "reference": []}
            out = str(Path(tmp) / "out.mp4")
            for _ in range(args.repeat):
                runs["ours"].append(run_ours(args.config, models, source, clip, out))
                runs["reference"].append(ref.run(clip, out, cfg.encode.crf, cfg.encode.preset))
            results[label] = runs
            fps = {k: [r["fps"] for r in v] for k, v in runs.items()}
            ratios = [a / b for a, b in zip(fps["ours"], fps["reference"]) if b]
            mine = sorted(runs["ours"], key=lambda r: r["fps"])[len(runs["ours"]) // 2]
            theirs = sorted(runs["reference"], key=lambda r: r["fps"])[len(runs["reference"]) // 2]
            print(f"\n{label}: ours {statistics.median(fps['ours']):.3f} fps, reference "
                  f"{statistics.median(fps['reference']):.3f} fps, ratio {statistics.median(ratios):.2f}x "
                  f"(runs {' '.join(f'{r:.2f}' for r in ratios)})")
            print(f"  ours      {mine['frames']} frames, {mine['faces_swapped']} faces swapped; "
                  f"model calls {mine['model_calls']}")
            print(f"  ours      stage ms p50/p95/mean: {stage_line(mine)}")
            per_swap = {k: (r["frames"] / r["fps"]) / max(r["faces_swapped"], 1) for k, r in
                        (("ours", mine), ("reference", theirs))}
            print(f"  seconds per swapped face: ours {per_swap['ours']:.2f}, reference {per_swap['reference']:.2f}")
            print(f"  reference {theirs['frames']} frames, {theirs['faces_swapped']} faces swapped; "
                  f"seconds {theirs['seconds']} of {theirs['elapsed_s']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
