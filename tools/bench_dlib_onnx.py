"""dlib's embedding network as ONNX (engines.dlib.onnx_export) against the numpy port: speed,
and what a static INT8 quantisation of it costs in embedding drift (issue 55's proof that the
quantisation tooling works on a real network).

    python tools/bench_dlib_onnx.py [--repeat 20] [--keep DIR]

Prints, in ms a face (median of `--repeat` rounds, the variants interleaved in each round,
BLAS on one thread as the pipeline sets it):
- the numpy port and ONNX Runtime float (1 and 2 intra-op threads), batches of 1 and 6;
- the face filter's real call, `embed_many` of six new faces, in line (the batch split over a
  helper thread) and on a background detection's thread, numpy port against ONNX Runtime;
- ONNX Runtime INT8 (1 and 2 threads), quantised as `facestream models quantize` does (QDQ,
  activations QUInt8, weights QInt8 per channel, the first convolution and the last Gemm
  left in float), but calibrated on ~50 chips of people not in the held-out set (scikit-image's
  lfw_subset faces scaled up, its cameraman, insightface's Tom Hanks crop, with mirrored and
  shifted copies);
- the INT8 embedding's drift from the float one (1 - cosine, median and p95) on held-out
  faces (the quality suite's scenes, tools/quality/clips.py: t1.jpg's six and the astronaut,
  panned, zoomed, rolled), and how often the same-person verdict (Euclidean < 0.6) of each
  pair of held-out faces is the same with both files.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

import cv2  # noqa: E402
import numpy as np  # noqa: E402

from engines.backends.base import RuntimeOptions  # noqa: E402
from engines.backends.ort import OrtRuntime  # noqa: E402
from engines.dlib.embedder import DlibEmbedder  # noqa: E402
from engines.dlib.embedding_io import INPUT, chips_to_blob  # noqa: E402
from engines.dlib.landmarker import DlibLandmarker  # noqa: E402
from engines.dlib.models import model_path, shared_model  # noqa: E402
from engines.dlib.onnx_embedding import OnnxDlibEmbedding  # noqa: E402
from engines.dlib.onnx_export import export_embedder  # noqa: E402
from engines.dlib.resnet import DlibResNet  # noqa: E402
from engines.face import Box  # noqa: E402
from engines.frame_views import FrameViews  # noqa: E402
from engines.protocols import detect_in_background  # noqa: E402
from stream.runtime.cores import set_blas_threads  # noqa: E402

HELD_OUT_SCENES = ("rotate", "low-chroma", "small", "overlap", "face-like", "grey-source")
SAME_PERSON = 0.6


def chips_in(image: np.ndarray, boxes: list[Box]) -> list[np.ndarray]:
    """The embedder's chip of the face in each box (68 points in the box first)."""
    views = FrameViews(image)
    lm, emb = DlibLandmarker(), DlibEmbedder()
    return [emb.chip(image, points) for points in lm.forward_many(views, boxes)]


def hog_boxes(image: np.ndarray, upsample: int = 1) -> list[Box]:
    hog, lock = shared_model("hog")
    with lock:
        found = hog(cv2.cvtColor(image, cv2.COLOR_BGR2RGB), upsample)
    return [(r.left(), r.top(), r.right() + 1, r.bottom() + 1) for r in found]


def calibration_chips(count: int = 50) -> np.ndarray:
    """People absent from the held-out scenes: lfw_subset faces (as tools/fit_face_filter.py
    scales them), the cameraman, Tom Hanks; each also mirrored, some shifted a few pixels."""
    from skimage import data
    from skimage.data import lfw_subset

    from stream.media.demo_clips import package_file
    from tools.fit_face_filter import lfw_sample

    base: list[np.ndarray] = []
    for img, box in (lfw_sample(p, 160, 0) for p in lfw_subset()[:20]):
        base += chips_in(img, [box])
    camera = cv2.cvtColor(data.camera(), cv2.COLOR_GRAY2BGR)
    base += chips_in(camera, hog_boxes(camera))
    hanks = cv2.imread(str(package_file("insightface", "data", "images", "Tom_Hanks_54745.png")))
    hanks = cv2.copyMakeBorder(cv2.resize(hanks, (336, 336), interpolation=cv2.INTER_CUBIC),
                               80, 80, 80, 80, cv2.BORDER_REPLICATE)
    base += chips_in(hanks, hog_boxes(hanks))
    out: list[np.ndarray] = []
    rng = np.random.default_rng(5)
    for chip in base:
        out += [chip, chip[:, ::-1]]
        dx, dy = rng.integers(-4, 5, 2)
        out.append(np.roll(chip, (int(dy), int(dx)), axis=(0, 1)))
    return np.stack(out[:count])


def held_out_chips(step: int = 10) -> np.ndarray:
    """The faces of the quality suite's scenes, every `step`-th frame (their true boxes)."""
    from tools.quality.clips import SCENES

    out: list[np.ndarray] = []
    for name in HELD_OUT_SCENES:
        scene = SCENES[name]()
        for i in range(0, scene.n_frames, step):
            image, truth = scene.frame(i)
            h, w = image.shape[:2]
            boxes = [b for b in truth.faces if b[0] >= 0 and b[1] >= 0 and b[2] <= w and b[3] <= h]
            out += chips_in(image, boxes)
    return np.stack(out)


def median_ms(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Each call's median ms over `repeat` rounds, the calls interleaved within a round (the
    cores are shared: a busy minute slows them all alike, not the one timed then)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(repeat):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) * 1000 for name, ts in times.items()}


def ort_model(path: Path, threads: int) -> OnnxDlibEmbedding:
    model = OnnxDlibEmbedding(OrtRuntime(path, RuntimeOptions(providers="cpu", intra_threads=threads)))
    model.open()
    return model


def in_background(fn: Callable[[], object]) -> Callable[[], object]:
    """`fn` run on a thread marked as a background detection's (no helper thread)."""
    def run() -> None:
        def body() -> None:
            detect_in_background()
            fn()
        t = threading.Thread(target=body)
        t.start()
        t.join()
    return run


def quantize(float_path: Path, out: Path, chips: np.ndarray) -> None:
    """The INT8 file as `facestream models quantize` writes it (engines.quantize.quantizer:
    U8S8 QDQ, the first layer and the last kept in float), calibrated on `chips`."""
    from engines.quantize import quantizer

    with tempfile.TemporaryDirectory(prefix="dlib-int8-") as tmp:
        prepared, _, unused = quantizer.prepare(float_path, Path(tmp))
        feeds = [{INPUT: chips_to_blob(chips[k:k + 1])} for k in range(len(chips))]
        quantizer.quantize_file(prepared, out, feeds, quantizer.edge_layers(prepared), unused)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20, help="timed runs per figure (default 20)")
    parser.add_argument("--keep", type=Path, help="write the float and INT8 files here (default: a temp folder)")
    args = parser.parse_args(argv)
    set_blas_threads(1)  # as the pipeline does (pipeline.blas_threads)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        float_path = export_embedder(folder / "dlib_embedder.onnx", model_path("embedding"))
        int8_path = folder / "dlib_embedder_int8.onnx"
        print("calibration and held-out chips ...", flush=True)
        calib = calibration_chips()
        held = held_out_chips()
        print(f"  {len(calib)} calibration chips, {len(held)} held-out chips")
        t = time.perf_counter()
        quantize(float_path, int8_path, calib)
        print(f"  quantised: {time.perf_counter() - t:.1f} s, "
              f"{float_path.stat().st_size / 1e6:.1f} MB -> {int8_path.stat().st_size / 1e6:.1f} MB")

        port = DlibResNet(model_path("embedding"))
        port.warm()
        models: dict[str, DlibResNet] = {"numpy port": port}
        for threads in (1, 2):
            models[f"ORT float {threads} thr"] = ort_model(float_path, threads)
        for threads in (1, 2):
            models[f"ORT INT8 {threads} thr"] = ort_model(int8_path, threads)
        six = held[:6]
        print(f"\nms a face, median of {args.repeat} (BLAS 1 thread)")
        print(f"{'':20} {'batch 1':>8} {'batch 6':>8}")
        one = median_ms({name: lambda m=model: m._run(six[:1]) for name, model in models.items()}, args.repeat)
        many = median_ms({name: lambda m=model: m._run(six) for name, model in models.items()}, args.repeat)
        for name in models:
            print(f"{name:20} {one[name]:8.2f} {many[name] / 6:8.2f}")
        print("\nthe face filter's call: embed_many of six new faces, ms for the six")
        filtered = ("numpy port", "ORT float 1 thr", "ORT INT8 1 thr")
        line = median_ms({name: lambda m=models[name]: m.embed_many(six) for name in filtered}, args.repeat)
        back = median_ms({name: in_background(lambda m=models[name]: m.embed_many(six)) for name in filtered},
                         args.repeat)
        for name in filtered:
            print(f"{name:20} in line {line[name]:6.1f}   background {back[name]:6.1f}")

        ref = models["numpy port"]._batched(held)
        flo = models["ORT float 1 thr"]._batched(held)
        q = models["ORT INT8 1 thr"]._batched(held)
        print(f"\nfloat ONNX against the numpy port: max abs difference {np.abs(flo - ref).max():.2e}")

        def cos_drift(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return 1 - (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))

        drift = cos_drift(q, flo)
        print(f"INT8 drift on {len(held)} held-out faces (1 - cosine): median {np.median(drift):.2e}, "
              f"p95 {np.percentile(drift, 95):.2e}, max {drift.max():.2e}; "
              f"Euclidean shift median {np.median(np.linalg.norm(q - flo, axis=1)):.3f}")
        iu = np.triu_indices(len(held), 1)
        same_f = (np.linalg.norm(flo[:, None] - flo[None], axis=2) < SAME_PERSON)[iu]
        same_q = (np.linalg.norm(q[:, None] - q[None], axis=2) < SAME_PERSON)[iu]
        print(f"same-person verdicts (< {SAME_PERSON}) of {len(same_f)} pairs: {np.mean(same_f == same_q):.4f} agree "
              f"({int(same_f.sum())} same by float, {int(same_q.sum())} by INT8, "
              f"{int((same_f != same_q).sum())} differ)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
