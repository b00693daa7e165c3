"""Parity of our ArcFace embedder and inswapper with insightface's own classes.

Both run the same synthetic ONNX files (tests/synth_face_models.py) on the same pictures
(scikit-image's astronaut, insightface's t1.jpg) and the same five-point keypoints, taken
from dlib's 68 landmarks. Alignment, pre-processing, latent, swapped crop and paste-back
must match; our paste-back must touch only the region it returns.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest

from engines.backends.ort import OrtRuntime
from engines.errors import EngineError
from engines.geometry.face_align import TEMPLATES, estimate_norm, kps5_from_landmarks68, warp_crop
from engines.geometry.region_warp import BOUND
from engines.models.arcface import ArcFaceEmbedder
from engines.models.inswapper import InSwapper
from stream.media.demo_clips import astronaut, group_picture
from tests.fixtures import make_arcface, make_inswapper

# skimage 0.26 deprecates SimilarityTransform.estimate, which insightface 2.1 still calls.
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

log = logging.getLogger(__name__)
CPU = ["CPUExecutionProvider"]


@dataclass(frozen=True)
class Scene:
    name: str
    image: np.ndarray
    kps: list[np.ndarray]  # (5, 2) float32 each


def _face(**kw: object):  # insightface's own Face record
    from insightface.app.common import Face as IFace

    return IFace(**kw)


def _dlib_kps(image: np.ndarray) -> list[np.ndarray]:
    from engines.dlib.detector import DlibHogDetector
    from engines.dlib.landmarker import DlibLandmarker
    from engines.frame_views import FrameViews

    det, lm = DlibHogDetector(), DlibLandmarker()
    det.open()
    lm.open()
    frame = FrameViews(image)
    boxes = sorted((b for b, _ in det.forward(frame)), key=lambda b: (b[0], b[1]))
    return [kps5_from_landmarks68(lm.forward(frame, box)) for box in boxes]


@pytest.fixture(scope="module")
def scenes() -> list[Scene]:
    astro = astronaut()
    group = group_picture()
    astro_kps = _dlib_kps(astro)
    group_kps = _dlib_kps(group)
    assert len(astro_kps) == 1 and len(group_kps) == 6
    # The face cut by the frame's left edge: the region must clip, erosion/blur see the edge.
    edge = np.ascontiguousarray(astro[:, 200:])
    edge_kps = [k - np.float32([200, 0]) for k in astro_kps]
    # A tilted head (30 degrees), so the fit's rotation is exercised.
    rot = cv2.getRotationMatrix2D((256.0, 256.0), 30.0, 1.0)
    tilted = cv2.warpAffine(astro, rot, (512, 512))
    tilted_kps = [(np.c_[k, np.ones(5)] @ rot.T).astype(np.float32) for k in astro_kps]
    return [Scene("astronaut", astro, astro_kps), Scene("t1", group, group_kps),
            Scene("edge", edge, edge_kps), Scene("tilted", tilted, tilted_kps)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("face_models")
    make_arcface(d / "arcface.onnx", seed=1)
    make_arcface(d / "arcface_mxnet.onnx", seed=2, mxnet_norm=True)
    make_arcface(d / "arcface_224.onnx", seed=3, size=224)
    make_inswapper(d / "inswapper.onnx", seed=4)
    make_inswapper(d / "inswapper_fp16.onnx", seed=5, fp16=True)
    make_inswapper(d / "inswapper_dyn.onnx", seed=6, batch=None)
    make_inswapper(d / "inswapper_badnames.onnx", seed=7, names=("img", "latent", "output"))
    (d / "not_onnx.onnx").write_bytes(b"this is not a protobuf\n" * 10)
    return d


def _insightface_model(path: Path):
    from insightface.model_zoo import get_model

    model = get_model(str(path), providers=CPU)
    assert model is not None, f"insightface did not route {path}"
    return model


# ---- alignment ----

def test_templates_match_models_md_and_insightface() -> None:
    from insightface.utils.face_align import arcface_dst

    np.testing.assert_array_equal(TEMPLATES["arcface_112_v2"].points, arcface_dst)
    np.testing.assert_allclose(TEMPLATES["arcface_112_v2"].normalized()[0], (0.34191607, 0.46157411), atol=1e-8)
    np.testing.assert_allclose(TEMPLATES["arcface_128"].normalized()[4], (0.61507734, 0.72034453), atol=1e-8)
    np.testing.assert_allclose(TEMPLATES["ffhq_512"].normalized()[2], (0.50123859, 0.61331904), atol=1e-7)
    with pytest.raises(ValueError, match="arcface_128"):
        estimate_norm(np.zeros((5, 2)), 112, "arcface_96")


@pytest.mark.parametrize("size, template", [(112, "arcface_112_v2"), (128, "arcface_128")])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_estimate_norm_equals_insightface(scenes: list[Scene], size: int, template: str, dtype: type) -> None:
    from insightface.utils import face_align

    for scene in scenes:
        for kps in scene.kps:
            k = kps.astype(dtype)
            ours = estimate_norm(k, size, template)
            theirs = face_align.estimate_norm(k, size)
            np.testing.assert_array_equal(ours, theirs)
            np.testing.assert_array_equal(warp_crop(scene.image, ours, size),
                                          face_align.norm_crop(scene.image, k, size))


# ---- ArcFace ----

@pytest.mark.parametrize("model", ["arcface.onnx", "arcface_mxnet.onnx"])
def test_arcface_embedding_parity(scenes: list[Scene], model_dir: Path, model: str) -> None:
    theirs = _insightface_model(model_dir / model)
    ours = ArcFaceEmbedder(OrtRuntime(model_dir / model))
    ours.open()
    assert (ours.input_mean, ours.input_std) == (theirs.input_mean, theirs.input_std)
    worst = 0.0
    for scene in scenes:
        for kps in scene.kps:
            face = _face(kps=kps)
            ref = theirs.get(scene.image, face)
            emb = ours.forward(scene.image, kps)
            assert emb.shape == (512,) and emb.dtype == np.float32
            worst = max(worst, float(np.abs(emb - ref).max()))
            np.testing.assert_allclose(ours.normalize_embedding(emb), face.normed_embedding, atol=1e-6)
        # get_feat on insightface's own crops, batched, against our batched path.
        crops = ours.prepare_crops(scene.image, scene.kps)
        ref_many = theirs.get_feat(crops)
        many = ours.forward_many(scene.image, scene.kps)
        worst = max(worst, float(np.abs(many - ref_many).max()))
    log.info("%s: max |ours - insightface| embedding %.3g", model, worst)
    assert worst <= 1e-5


def test_arcface_prepare_input_layout(scenes: list[Scene], model_dir: Path) -> None:
    ours = ArcFaceEmbedder(OrtRuntime(model_dir / "arcface.onnx"))
    ours.open()
    scene = scenes[1]
    blob = ours.prepare_input(scene.image, scene.kps)
    assert blob.shape == (6, 3, 112, 112) and blob.dtype == np.float32
    crop = ours.prepare_crops(scene.image, scene.kps[:1])[0]
    # Channel 0 is red: (R - 127.5) / 127.5.
    np.testing.assert_allclose(blob[0, 0], (crop[:, :, 2].astype(np.float32) - 127.5) / 127.5, atol=1e-6)


def test_arcface_distance_and_calls(scenes: list[Scene], model_dir: Path) -> None:
    ours = ArcFaceEmbedder(OrtRuntime(model_dir / "arcface.onnx"))
    ours.open()
    a = ours.forward(scenes[0].image, scenes[0].kps[0])
    b = ours.forward(scenes[1].image, scenes[1].kps[0])
    assert ours.calls == 2
    assert ours.distance(a, a) == pytest.approx(0.0, abs=1e-6)
    assert ours.distance(a, 3 * a) == pytest.approx(0.0, abs=1e-6)  # scale-free: normalised first
    cos = ours.similarity(a, b)
    assert ours.distance(a, b) == pytest.approx(np.sqrt(2 - 2 * cos), abs=1e-5)
    ours.forward_many(scenes[1].image, scenes[1].kps)
    assert ours.calls == 3  # dynamic batch: one run for six faces
    # 68 landmarks are accepted in place of five points.
    lm68 = np.zeros((68, 2), np.float32)
    lm68[36:42], lm68[42:48] = scenes[0].kps[0][0], scenes[0].kps[0][1]
    lm68[30], lm68[48], lm68[54] = scenes[0].kps[0][2], scenes[0].kps[0][3], scenes[0].kps[0][4]
    np.testing.assert_allclose(ours.forward(scenes[0].image, lm68), a, atol=1e-6)


# ---- inswapper ----

@pytest.fixture(scope="module")
def source_embedding(scenes: list[Scene], model_dir: Path) -> np.ndarray:
    emb = ArcFaceEmbedder(OrtRuntime(model_dir / "arcface.onnx"))
    emb.open()
    return emb.forward(scenes[0].image, scenes[0].kps[0])


@pytest.mark.slow
@pytest.mark.parametrize("full_frame", [False, True])
@pytest.mark.parametrize("model", ["inswapper.onnx", "inswapper_fp16.onnx", "inswapper_dyn.onnx"])
def test_inswapper_parity(scenes: list[Scene], model_dir: Path, source_embedding: np.ndarray, model: str,
                          full_frame: bool) -> None:
    theirs = _insightface_model(model_dir / model)
    ours = InSwapper(OrtRuntime(model_dir / model), full_frame_paste=full_frame)
    ours.open()
    np.testing.assert_array_equal(ours.emap, theirs.emap.astype(np.float32))
    source = _face(embedding=source_embedding)
    latent = ours.prepare_source(source_embedding)
    ref_latent = np.dot(source.normed_embedding.reshape((1, -1)), theirs.emap)
    ref_latent /= np.linalg.norm(ref_latent)
    assert latent.shape == (1, 512) and latent.dtype == np.float32
    np.testing.assert_array_equal(latent, ref_latent)

    worst_paste = region_values = 0
    for scene in scenes:
        for kps in scene.kps:
            target = _face(kps=kps)
            ref_crop, ref_M = theirs.get(scene.image, target, source, paste_back=False)
            crop, M = ours.forward_crop(scene.image, kps, latent)
            np.testing.assert_array_equal(M, ref_M)
            np.testing.assert_array_equal(crop, ref_crop)  # bit-exact uint8 crops

            ref_frame = theirs.get(scene.image, target, source, paste_back=True)
            result = ours.forward(scene.image, kps, latent)
            assert result is not None
            frame = scene.image.copy()
            ours.paste(frame, None, result)
            x0, y0, x1, y1 = result.region
            inside = np.zeros(frame.shape[:2], bool)
            inside[y0:y1, x0:x1] = True
            # Outside our region: our frame is the input, and insightface changed nothing there.
            np.testing.assert_array_equal(frame[~inside], scene.image[~inside])
            np.testing.assert_array_equal(ref_frame[~inside], scene.image[~inside])
            diff = np.abs(frame.astype(np.int16) - ref_frame.astype(np.int16))
            worst_paste = max(worst_paste, int(diff.max()))
            region_values += diff[inside].size
            if full_frame:  # the reference mode's paste: insightface's own calls, exact on any CPU
                np.testing.assert_array_equal(frame, ref_frame)
            # Either way within the region warp's bound: the region paste's promise on any CPU.
            assert diff.max() <= BOUND, f"{scene.name}: paste off by {diff.max()} at {np.argwhere(diff > BOUND)[:3]}"
            # The region is the face's, not the frame's, unless the face fills it.
            h, w = frame.shape[:2]
            assert (x1 - x0) * (y1 - y0) < 0.5 * h * w or scene.name == "edge"
            assert result.patch.shape == (y1 - y0, x1 - x0, 3) and result.valid.shape == (y1 - y0, x1 - x0)
            # Pixels with zero blend weight are exactly the frame's.
            roi = scene.image[y0:y1, x0:x1]
            np.testing.assert_array_equal(result.patch[result.valid == 0], roi[result.valid == 0])
    log.info("%s: max paste-back difference %d grey levels over %d region values",
             model, worst_paste, region_values)


def test_inswapper_edge_region_is_clipped(scenes: list[Scene], model_dir: Path, source_embedding: np.ndarray) -> None:
    ours = InSwapper(OrtRuntime(model_dir / "inswapper.onnx"))
    ours.open()
    edge = next(s for s in scenes if s.name == "edge")
    result = ours.forward(edge.image, edge.kps[0], ours.prepare_source(source_embedding))
    assert result is not None and result.region[0] == 0
    # A face entirely outside the frame gives no result instead of failing.
    far = edge.kps[0] + np.float32([5000, 0])
    assert ours.forward(edge.image, far, ours.prepare_source(source_embedding)) is None


@pytest.mark.parametrize("model, runs", [("inswapper.onnx", 6), ("inswapper_dyn.onnx", 1)])
def test_inswapper_forward_many(scenes: list[Scene], model_dir: Path, source_embedding: np.ndarray,
                                model: str, runs: int) -> None:
    ours = InSwapper(OrtRuntime(model_dir / model))
    ours.open()
    scene = scenes[1]
    latent = ours.prepare_source(source_embedding)
    many = ours.forward_many(scene.image, scene.kps, [latent] * len(scene.kps))
    assert ours.calls == runs  # t1's regions meet, but no paste reaches another face's crop
    # One face at a time on the frame as it stands (insightface's loop): the same results.
    running = scene.image.copy()
    for kps, got in zip(scene.kps, many):
        one = ours.forward(running, kps, latent)
        assert got is not None and one is not None and got.region == one.region
        np.testing.assert_array_equal(got.patch, one.patch)
        one.paste_into(running)


def test_source_latent_depends_on_source_only(model_dir: Path, source_embedding: np.ndarray) -> None:
    ours = InSwapper(OrtRuntime(model_dir / "inswapper.onnx"))
    ours.open()
    latent = ours.prepare_source(source_embedding)
    np.testing.assert_allclose(np.linalg.norm(latent), 1.0, atol=1e-6)
    np.testing.assert_allclose(ours.prepare_source(5 * source_embedding), latent, atol=1e-6)
    assert ours.calls == 0  # no model run for the latent


# ---- bad files ----

@pytest.mark.parametrize("cls, model, expected", [
    (ArcFaceEmbedder, "not_onnx.onnx", "expected an ArcFace"),
    (InSwapper, "not_onnx.onnx", "expected an inswapper_128"),
    (ArcFaceEmbedder, "arcface_224.onnx", "[N,3,112,112]"),
    (ArcFaceEmbedder, "inswapper.onnx", "[N,3,112,112]"),
    (InSwapper, "arcface.onnx", "target [1,3,128,128]"),
    (InSwapper, "inswapper_badnames.onnx", "target [1,3,128,128]"),
])
def test_bad_model_files(model_dir: Path, cls: type, model: str, expected: str) -> None:
    engine = cls(OrtRuntime(model_dir / model))
    with pytest.raises(EngineError) as info:
        engine.open()
    text = str(info.value)
    assert "\n" not in text
    assert model in text and expected in text
