"""Neural compositing order: the faces of a frame are composited one after another, each
blended onto the frame as it stands after the faces before it (insightface's per-frame loop,
`res = swapper.get(res, face, source, paste_back=True)`), with the batched model call kept.

Four overlapping faces on one still: no original pixel re-appears inside an earlier face's
paste, in one batched call; with `recrop_after_paste` (the reference mode) each face is also
cropped from the frame the faces before it left, and the frame equals insightface's loop on
the same synthetic models: bit for bit with the reference mode's full-frame paste, within the
region warp's bound without it (on any CPU).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engines.backends.ort import OrtRuntime
from engines.geometry import region_warp
from engines.geometry.region_warp import BOUND, SHIFTED, WarpChoice
from engines.models.arcface import ArcFaceEmbedder
from engines.models.inswapper import InSwapper
from stream.media.demo_clips import astronaut
from tests.fixtures import make_arcface, make_inswapper
from tools.neural_seams import ASTRONAUT_KPS, SHIFTS, seam_pixels

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # insightface 2.1 on skimage 0.26

CPU = ["CPUExecutionProvider"]
# The astronaut's five points (dlib's 68 reduced), and three more faces overlapping it, as
# tools/neural_seams.py measures them.


def four_faces() -> list[np.ndarray]:
    return [ASTRONAUT_KPS + np.float32(s) for s in SHIFTS]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("compositing_models")
    make_arcface(d / "arcface.onnx", seed=1)
    make_inswapper(d / "inswapper.onnx", seed=4)
    make_inswapper(d / "inswapper_dyn.onnx", seed=6, batch=None)
    return d


def _latent(models: Path, swapper: InSwapper) -> np.ndarray:
    emb = ArcFaceEmbedder(OrtRuntime(models / "arcface.onnx"))
    emb.open()
    return swapper.prepare_source(emb.forward(astronaut(), ASTRONAUT_KPS))


def _insightface_loop(models: Path, model: str, image: np.ndarray, kps: list[np.ndarray]) -> np.ndarray:
    from insightface.app.common import Face as IFace
    from insightface.model_zoo import get_model

    embedder = get_model(str(models / "arcface.onnx"), providers=CPU)
    swapper = get_model(str(models / model), providers=CPU)
    source = IFace(kps=ASTRONAUT_KPS)
    embedder.get(astronaut(), source)
    res = image.copy()
    for k in kps:
        res = swapper.get(res, IFace(kps=k), source, paste_back=True)
    return res


@pytest.mark.parametrize("model, runs", [("inswapper_dyn.onnx", 1), ("inswapper.onnx", 4)])
def test_overlapping_faces_composite_in_order(models: Path, model: str, runs: int) -> None:
    image = astronaut()
    kps = four_faces()
    swapper = InSwapper(OrtRuntime(models / model))
    swapper.open()
    latent = _latent(models, swapper)
    results = swapper.forward_many(image, kps, [latent] * len(kps))
    assert all(r is not None for r in results)
    assert swapper.calls == runs  # the batched call (or the batch-1 loop) only
    # Each blended onto the frame as the faces before it left it, from the batch's crops.
    running = image.copy()
    apart = []  # each blended against the unmodified frame instead: what made the seams
    for k, r in zip(kps, results):
        crop, M = swapper.forward_crop(image, k, latent)
        one, old = swapper.blend_crop(running, crop, M), swapper.blend_crop(image, crop, M)
        assert one is not None and old is not None
        np.testing.assert_array_equal(r.patch, one.patch)
        r.paste_into(running)
        apart.append(old)
    # The later faces' swaps still come from crops of the unmodified frame, so a pixel may
    # land on its old value by chance; the seams themselves are gone.
    seams_before = seam_pixels(image, apart)
    assert seams_before > 100
    assert seam_pixels(image, results) <= seams_before // 20


@pytest.mark.parametrize("paste", ["full frame", "region, this CPU's scheme", "region, the fallback"])
@pytest.mark.parametrize("model, runs", [("inswapper_dyn.onnx", 1), ("inswapper.onnx", 4)])
def test_recrop_after_paste_equals_insightfaces_loop(monkeypatch: pytest.MonkeyPatch, models: Path, model: str,
                                                     runs: int, paste: str) -> None:
    if paste == "region, the fallback":  # as on a CPU where no scheme reproduces the full warp
        monkeypatch.setattr(region_warp, "current", lambda: WarpChoice(SHIFTED, False, 0.0, ""))
    full_frame = paste == "full frame"
    image = astronaut()
    kps = four_faces()
    swapper = InSwapper(OrtRuntime(models / model), recrop_after_paste=True, full_frame_paste=full_frame)
    swapper.open()
    latent = _latent(models, swapper)
    results = swapper.forward_many(image, kps, [latent] * len(kps))
    assert all(r is not None for r in results)
    # Later faces' crops read pixels the earlier pastes changed: swapped again from the frame
    # as it then stands, one call each, beside the batched call (or the batch-1 loop).
    assert runs < swapper.calls <= runs + len(kps) - 1
    frame = image.copy()
    for r in results:
        r.paste_into(frame)
    assert seam_pixels(image, results) == 0
    reference = _insightface_loop(models, model, image, kps)
    if full_frame:
        np.testing.assert_array_equal(frame, reference)
    else:
        assert np.abs(frame.astype(np.int16) - reference.astype(np.int16)).max() <= BOUND


def test_faces_apart_keep_one_batched_call(models: Path) -> None:
    """Faces whose regions do not meet are composited as before: one model call, each result
    the face's own swap of the unmodified frame."""
    image = np.concatenate([astronaut(), astronaut()], axis=1)
    kps = [ASTRONAUT_KPS, ASTRONAUT_KPS + np.float32([512, 0])]
    swapper = InSwapper(OrtRuntime(models / "inswapper_dyn.onnx"))
    swapper.open()
    latent = _latent(models, swapper)
    many = swapper.forward_many(image, kps, [latent] * 2)
    assert swapper.calls == 1
    for k, got in zip(kps, many):
        one = swapper.forward(image, k, latent)
        assert got is not None and one is not None
        np.testing.assert_array_equal(got.patch, one.patch)
