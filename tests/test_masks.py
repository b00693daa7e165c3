"""Face masks of the neural swappers: each mask against its published formula, and what it
keeps of the target in a swap (the mouth with `area`, an occluder with `occlusion`, the
regions left out with `region`), on synthetic models of the published I/O."""
from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from engines.backends.ort import OrtRuntime
from engines.errors import EngineError
from engines.face import Face
from engines.models.inswapper import InSwapper
from engines.models.masks import (
    AREAS,
    Masker,
    MaskOptions,
    area_mask,
    box_mask,
    occlusion_input,
    occlusion_mask,
    region_input,
    region_mask,
)
from stream.cli.main import main
from stream.config import load_config
from stream.errors import ConfigError
from tests.fixtures import detector_and_embedder, make_inswapper, probe
from tools.cost_models import mean_face_68
from tools.synth.masks import make_bisenet, make_xseg

BOX = (220.0, 140.0, 420.0, 380.0)  # a 200x240 face in a 640x480 frame


def face() -> Face:
    x0, y0, x1, y1 = BOX
    lm = mean_face_68() * np.float32([x1 - x0, y1 - y0]) + np.float32([x0, y0])
    return Face(box=BOX, landmarks=lm)


def mouth_polygon(f: Face) -> np.ndarray:
    return cv2.convexHull(f.landmarks[48:60]).astype(np.int32)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("mask-models")
    make_inswapper(d / "inswapper_128.onnx", seed=5)
    make_xseg(d / "xseg_1.onnx")
    make_bisenet(d / "bisenet_resnet_34.onnx")
    return d


@pytest.fixture
def frame() -> np.ndarray:
    rng = np.random.default_rng(4)
    img = cv2.GaussianBlur(rng.integers(60, 200, (480, 640, 3), dtype=np.uint8), (0, 0), 2)
    img[..., 2] = img[..., 1]  # red = green everywhere: nothing reads as an occluder or a mouth
    return np.ascontiguousarray(img)


def swapped(models: Path, frame: np.ndarray, options: MaskOptions, f: Face) -> np.ndarray:
    masker = Masker(options, OrtRuntime(models / "xseg_1.onnx"), OrtRuntime(models / "bisenet_resnet_34.onnx"))
    swapper = InSwapper(OrtRuntime(models / "inswapper_128.onnx"), masker=masker)
    swapper.open()
    latent = swapper.prepare_source(np.random.default_rng(1).standard_normal(512).astype(np.float32))
    result = swapper.forward(frame, f, latent)
    assert result is not None
    out = frame.copy()
    swapper.paste(out, f, result)
    return out


def inside(poly: np.ndarray, shape: tuple[int, ...], shrink: int = 6) -> np.ndarray:
    m = np.zeros(shape[:2], np.uint8)
    cv2.fillPoly(m, [poly], 255)
    return cv2.erode(m, np.ones((2 * shrink + 1, 2 * shrink + 1), np.uint8)) > 0


# -- the formulas ------------------------------------------------------------------------------

def test_the_box_mask_fades_its_edges_as_published() -> None:
    m = box_mask(128, 0.3)
    # blur 0.3 of half of 128 = 19 px, its half (9 rows) cut from each side before a sigma 19/4 blur
    hard = np.ones((128, 128), np.float32)
    hard[:9], hard[-9:], hard[:, :9], hard[:, -9:] = 0, 0, 0, 0
    np.testing.assert_allclose(m, cv2.GaussianBlur(hard, (0, 0), 19 * 0.25), atol=1e-6)
    assert m[64, 64] == pytest.approx(1.0, abs=1e-3) and m[0, 0] < 0.05
    padded = box_mask(128, 0.0, (25, 0, 0, 0))
    # a quarter cut from the top; no fade, and the 1 px edge the formula always cuts
    assert padded[:32].max() == 0 and padded[32:-1, 1:-1].min() == 1 and padded[-1].max() == 0


def test_the_area_mask_is_the_face_less_the_areas_left_out() -> None:
    lm = mean_face_68() * 128
    mouth = tuple(np.round(lm[48:60].mean(axis=0)).astype(int))
    nose = tuple(np.round(lm[30]).astype(int))
    whole = area_mask(lm, 128, tuple(AREAS))
    no_mouth = area_mask(lm, 128, ("upper-face", "lower-face"))
    assert whole[mouth[1], mouth[0]] == 1 and whole[nose[1], nose[0]] == 1 and whole[2, 2] == 0
    assert no_mouth[mouth[1], mouth[0]] == 0 and no_mouth[nose[1], nose[0]] == 1


def test_the_model_masks_inputs_and_outputs_follow_the_published_formulas() -> None:
    crop = np.random.default_rng(2).integers(0, 256, (128, 128, 3), dtype=np.uint8)
    row = np.empty((256, 256, 3), np.float32)
    occlusion_input(crop, row)  # NHWC, BGR, 0..1
    np.testing.assert_allclose(row, cv2.resize(crop, (256, 256)).astype(np.float32) / 255, atol=1e-6)
    rgb = cv2.resize(crop, (512, 512))[:, :, ::-1].astype(np.float64) / 255
    parsed = np.empty((3, 512, 512), np.float32)
    region_input(crop, parsed)  # NCHW, RGB, ImageNet's mean and std
    want = ((rgb - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]).transpose(2, 0, 1)
    np.testing.assert_allclose(parsed, want, atol=1e-5)
    seen = np.ones((256, 256, 1), np.float32)
    seen[100:160, 100:160] = 0
    m = occlusion_mask(seen, 128)
    assert m[65, 65] == 0 and m[10, 10] == 1 and m.shape == (128, 128)
    logits = np.full((19, 512, 512), -5.0, np.float32)
    logits[1] = 1.0  # skin everywhere
    logits[11, 200:300, 200:300] = 5.0  # a mouth
    no_mouth = region_mask(logits, 128, ("skin",))
    assert no_mouth[62, 62] == 0 and no_mouth[10, 10] == 1


@pytest.mark.parametrize("bad, says", [
    ("mask.types=[nose]", "unknown mask type 'nose'; known: box, occlusion, area, region"),
    ("mask.areas=[chin]", "unknown mask area 'chin'"),
    ("mask.regions=[ears]", "unknown mask region 'ears'"),
])
def test_bad_mask_settings_are_one_line(bad: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        load_config(None, [bad])


# -- what the masks keep in a swap -------------------------------------------------------------------

def test_the_area_mask_without_the_mouth_keeps_the_targets_own_mouth(models: Path, frame: np.ndarray) -> None:
    f = face()
    mouth = inside(mouth_polygon(f), frame.shape)
    plain = swapped(models, frame, MaskOptions(types=("area",)), f)
    kept = swapped(models, frame, MaskOptions(types=("area",), areas=("upper-face", "lower-face")), f)
    assert np.any(plain[mouth] != frame[mouth])  # with the mouth chosen, the swap reaches it
    np.testing.assert_array_equal(kept[mouth], frame[mouth])  # left out, it is the target's own
    cheeks = inside(cv2.convexHull(f.landmarks[[1, 2, 3, 31]]).astype(np.int32), frame.shape, 2)
    assert np.any(kept[cheeks] != frame[cheeks])


def test_the_occlusion_mask_keeps_what_is_in_front_of_the_face(models: Path, frame: np.ndarray) -> None:
    f = face()
    frame[250:300, 280:340] = (0, 0, 255)  # a red hand over the face's lower half
    hand = np.zeros(frame.shape[:2], bool)
    hand[258:292, 288:332] = True
    plain = swapped(models, frame, MaskOptions(types=("box",)), f)
    kept = swapped(models, frame, MaskOptions(types=("occlusion",)), f)
    assert np.any(plain[hand] != frame[hand])
    np.testing.assert_array_equal(kept[hand], frame[hand])


def test_the_region_mask_swaps_only_the_regions_chosen(models: Path, frame: np.ndarray) -> None:
    f = face()
    frame[300:330, 280:360] = (40, 40, 230)  # lips the parser reads as the mouth
    lips = np.zeros(frame.shape[:2], bool)
    lips[307:323, 287:353] = True
    kept = swapped(models, frame, MaskOptions(types=("region",), regions=("skin", "nose")), f)
    np.testing.assert_array_equal(kept[lips], frame[lips])
    assert np.any(kept[200:240, 260:380] != frame[200:240, 260:380])  # the skin is swapped


def test_a_mask_model_of_the_wrong_shape_is_one_line(models: Path) -> None:
    masker = Masker(MaskOptions(types=("occlusion",)), OrtRuntime(models / "bisenet_resnet_34.onnx"))
    with pytest.raises(EngineError, match=r"is not an XSeg occlusion model: expected one input \[1,256,256,3\]"):
        masker.open()


@pytest.mark.slow
def test_swap_with_masks_by_flag_and_a_missing_mask_model_named(face_clip: Path, source_photo: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture) -> None:
    d = detector_and_embedder(tmp_path / "models")
    make_inswapper(d / "inswapper_128.onnx", seed=5)
    args = ["swap", "--engine", "neural", "--models-dir", str(d), "--source", str(source_photo), "--input",
            str(face_clip), "--x264-preset", "ultrafast", "-q", "--mask", "area,occlusion", "--mask-areas",
            "upper-face,lower-face"]
    assert main([*args, "--output", str(tmp_path / "a.mp4")]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "xseg_1.onnx" in err
    make_xseg(d / "xseg_1.onnx")
    stats = tmp_path / "stats.json"
    assert main([*args, "--output", str(tmp_path / "b.mp4"), "--stats-json", str(stats)]) == 0
    rep = json.loads(stats.read_text())
    assert rep["faces_swapped"] > 0 and probe(tmp_path / "b.mp4")["frames"] > 0


def test_a_tracks_model_masks_run_every_kth_frame_and_are_kept_between(models: Path, frame: np.ndarray) -> None:
    """Live presets recompute a tracked face's model masks on every k-th frame only (fast: 3):
    between, its last masks are used again in its crop (they follow the face)."""
    options = MaskOptions(types=("occlusion",), every=3)
    masker = Masker(options, OrtRuntime(models / "xseg_1.onnx"))
    swapper = InSwapper(OrtRuntime(models / "inswapper_128.onnx"), masker=masker)
    swapper.open()
    latent = swapper.prepare_source(np.ones(512, np.float32))
    frame[250:300, 280:340] = (0, 0, 255)  # an occluder: the masks keep it
    hand = np.zeros(frame.shape[:2], bool)
    hand[258:292, 288:332] = True
    tracked = Face(box=face().box, landmarks=face().landmarks, track_id=7)
    for n in range(6):
        result = swapper.forward(frame, tracked, latent)
        assert result is not None
        out = frame.copy()
        swapper.paste(out, tracked, result)
        np.testing.assert_array_equal(out[hand], frame[hand])  # kept on the frames between too
        assert masker.model_runs == n // 3 + 1
    for _ in range(2):  # a face of no track: every frame
        swapper.forward(frame, face(), latent)
    assert masker.model_runs == 2 + 2
    assert load_config("fast").mask.every == 3 and load_config(None).mask.every == 1
