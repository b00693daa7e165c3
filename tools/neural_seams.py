"""Seams where the faces of one frame overlap, on the neural path: the old compositing (each
face blended against the unmodified frame, pasted one after another) against ours (each face
blended onto the frame as it stands after the faces before it; `recrop`: also cropped from
it, the reference mode's `models.recrop_after_paste`), all against insightface's per-frame
loop `res = INSwapper.get(res, face, source, paste_back=True)` on the same synthetic models
(tools/synth).

Stills: `four` (scikit-image's astronaut with three more faces overlapping hers) and `t1`
(insightface's six-face picture; five points from dlib's 68 landmarks). Figures:
- seam pixels: pixels an earlier face's paste moved by at least 8 grey levels that a later
  face's paste set back to exactly the original;
- off reference: pixels that differ from insightface's loop.

    python tools/neural_seams.py
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

from engines.backends.ort import OrtRuntime  # noqa: E402
from engines.face import SwapResult  # noqa: E402
from engines.geometry.face_align import kps5_from_landmarks68  # noqa: E402
from engines.models.arcface import ArcFaceEmbedder  # noqa: E402
from engines.models.inswapper import InSwapper  # noqa: E402
from stream.media.demo_clips import astronaut, group_picture  # noqa: E402
from tools.synth.face_models import make_arcface, make_inswapper  # noqa: E402

ASTRONAUT_KPS = np.array([[219.3, 109.4], [265.4, 99.4], [247.7, 128.8], [227.4, 161.1], [270.9, 153.5]],
                         np.float32)
SHIFTS = [(0, 0), (46, 28), (-38, 40), (20, -44)]
CPU = ["CPUExecutionProvider"]


def seam_pixels(image: np.ndarray, results: list[SwapResult], jump: int = 8) -> int:
    """Pixels an earlier paste moved by >= `jump` grey levels that later pastes set back to the original."""
    before = image.copy()
    count = 0
    for i, res in enumerate(results):
        res.paste_into(before)
        moved = np.abs(before.astype(np.int16) - image).max(axis=2) >= jump
        after = before.copy()
        for later in results[i + 1:]:
            later.paste_into(after)
        count += int(np.sum(moved & np.all(after == image, axis=2)))
    return count


def _pasted(image: np.ndarray, results: list[SwapResult]) -> np.ndarray:
    frame = image.copy()
    for r in results:
        r.paste_into(frame)
    return frame


def _dlib_kps(image: np.ndarray) -> list[np.ndarray]:
    from engines.dlib.detector import DlibHogDetector
    from engines.dlib.landmarker import DlibLandmarker
    from engines.frame_views import FrameViews

    det, lm = DlibHogDetector(), DlibLandmarker()
    det.open()
    lm.open()
    frame = FrameViews(image)
    return [kps5_from_landmarks68(lm.forward(frame, b)) for b, _ in det.forward(frame)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    from insightface.app.common import Face as IFace  # type: ignore[import-untyped]
    from insightface.model_zoo import get_model  # type: ignore[import-untyped]

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        make_arcface(d / "arcface.onnx", seed=1)
        make_inswapper(d / "inswapper.onnx", seed=6, batch=None)
        embedder = ArcFaceEmbedder(OrtRuntime(d / "arcface.onnx"))
        swapper = InSwapper(OrtRuntime(d / "inswapper.onnx"))
        recrop = InSwapper(OrtRuntime(d / "inswapper.onnx"), recrop_after_paste=True)
        theirs = get_model(str(d / "inswapper.onnx"), providers=CPU)
        latent = swapper.prepare_source(embedder.forward(astronaut(), ASTRONAUT_KPS))
        source = IFace(embedding=embedder.forward(astronaut(), ASTRONAUT_KPS))
        stills: dict[str, tuple[np.ndarray, list[np.ndarray] | None]] = {
            "four": (astronaut(), [ASTRONAUT_KPS + np.array(s, np.float32) for s in SHIFTS]),
            "t1": (group_picture(), None)}
        print(f"{'still':6} {'faces':>5} {'compositing':12} {'seam px':>8} {'off insightface px':>18} "
              f"{'swapper calls':>13}")
        for name, (image, given) in stills.items():
            kps = given if given is not None else _dlib_kps(image)
            reference = image.copy()
            for k in kps:
                reference = theirs.get(reference, IFace(kps=k), source, paste_back=True)
            # The old compositing: every face blended against the unmodified frame.
            crops = [swapper.forward_crop(image, k, latent) for k in kps]
            rows = {"before": ([r for r in (swapper.blend_crop(image, c, M) for c, M in crops) if r is not None],
                               1)}  # its crops were the batch's: one call
            for label, model in (("in order", swapper), ("recrop", recrop)):
                calls = model.calls
                found = [r for r in model.forward_many(image, kps, [latent] * len(kps)) if r is not None]
                rows[label] = (found, model.calls - calls)
            for label, (results, calls) in rows.items():
                off = int(np.any(_pasted(image, results) != reference, axis=2).sum())
                print(f"{name:6} {len(kps):>5} {label:12} {seam_pixels(image, results):>8} {off:>18} {calls:>13}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
