"""The classical swapper carries the source's identity onto the target's geometry and colour.

Pictures from installed packages: skimage's astronaut (the source, also in grey and with
exaggerated colour) and insightface's t1.jpg (the target's largest face). Measured with
dlib's own embedding and landmarks, the models the default engine uses.
"""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from engines.classic.swapper import ClassicalOptions, ClassicalSwapper, blend_shape
from engines.dlib.embedder import DlibEmbedder
from engines.dlib.landmarker import DlibLandmarker
from engines.face import BROWS, Face, Occlusion
from engines.frame_views import FrameViews
from stream.media.demo_clips import T1_LARGEST_FACE, astronaut, single_face_picture

ASTRONAUT_FACE = (179, 83, 267, 171)  # as dlib's HOG detector finds it
CHEEKS = [2, 3, 13, 14, 29, 31, 35]


@pytest.fixture(scope="module")
def dlib_models() -> tuple[DlibLandmarker, DlibEmbedder]:
    return DlibLandmarker(), DlibEmbedder()


def landmarks(models, image: np.ndarray, box) -> np.ndarray:
    return models[0].forward(FrameViews(image), tuple(float(v) for v in box)).astype(np.float32)


@pytest.fixture(scope="module")
def target(dlib_models) -> tuple[np.ndarray, np.ndarray, tuple[float, ...]]:
    """t1's largest face, as a still, its 68 landmarks and its box."""
    picture, _ = single_face_picture()
    x0, y0, x1, y1 = T1_LARGEST_FACE
    frame = picture[y0 - 120:y1 + 120, x0 - 120:x1 + 120].copy()
    box = (120, 120, 120 + x1 - x0, 120 + y1 - y0)
    return frame, landmarks(dlib_models, frame, box), box


def swap(source_image: np.ndarray, source_lm: np.ndarray, frame: np.ndarray, lm: np.ndarray,
         **options) -> np.ndarray:
    swapper = ClassicalSwapper(ClassicalOptions(**options))
    source = swapper.prepare_source(source_image, source_lm)
    out = frame.copy()
    face = Face(box=(*lm.min(axis=0), *lm.max(axis=0)), landmarks=lm)
    result = swapper.forward(out, face, source)
    assert result is not None
    swapper.paste(out, face, result)
    return out


def cheek_chroma(image: np.ndarray, lm: np.ndarray) -> tuple[np.ndarray, float]:
    """Mean (Cr, Cb) offset from grey over the cheeks and their spread (std, both channels)."""
    mask = np.zeros(image.shape[:2], np.uint8)
    cv2.fillConvexPoly(mask, cv2.convexHull(np.round(lm[CHEEKS]).astype(np.int32)), 255)
    ycc = cv2.cvtColor(image, cv2.COLOR_BGR2YCrCb).astype(np.float32)[mask > 0][:, 1:] - 128
    return ycc.mean(axis=0), float(np.linalg.norm(ycc.std(axis=0)))


def recolour(image: np.ndarray, chroma: float) -> np.ndarray:
    """The picture with its chroma (Lab a, b about neutral) scaled by `chroma` (0: grey)."""
    lab = cv2.cvtColor(image, cv2.COLOR_BGR2LAB).astype(np.float32)
    lab[:, :, 1:] = 128 + (lab[:, :, 1:] - 128) * chroma
    return cv2.cvtColor(np.clip(lab + 0.5, 0, 255).astype(np.uint8), cv2.COLOR_LAB2BGR)


@pytest.mark.parametrize("chroma", [0.0, 0.25, 2.5], ids=["grey", "low-chroma", "vivid"])
def test_the_swapped_skin_keeps_the_target_skin_colour(dlib_models, target, chroma):
    # A grey or washed-out source must not grey the target's skin, and a vivid one (strong or
    # tinted light) must not leave its own colour patches on it: the cheeks keep the target's
    # hue and saturation, with no more colour spread than the target's own skin.
    frame, lm, _ = target
    source = recolour(astronaut(), chroma)
    out = swap(source, landmarks(dlib_models, source, ASTRONAUT_FACE), frame, lm)
    mean_in, spread_in = cheek_chroma(frame, lm)
    mean_out, spread_out = cheek_chroma(out, lm)
    assert np.linalg.norm(mean_out - mean_in) <= 0.15 * np.linalg.norm(mean_in)
    assert spread_out <= 1.1 * spread_in + 0.5


def test_the_warp_covers_the_inner_face_and_the_bare_forehead(dlib_models):
    # Where the source shows bare skin above the brows, the swap reaches up the forehead
    # (the 68 points stop at the brows); where a fringe covers it, the hair is not painted on.
    image = astronaut()
    lm = landmarks(dlib_models, image, ASTRONAUT_FACE)
    bare = image.copy()
    brows, chin = lm[BROWS], lm[8]
    up = brows.mean(axis=0) - chin
    # Paint the forehead (from just above the brows) with the cheeks' colour: bare skin.
    cheeks = cv2.fillConvexPoly(np.zeros(image.shape[:2], np.uint8),
                                np.round(lm[CHEEKS]).astype(np.int32), 255)
    band = np.r_[brows + 0.03 * up, (brows + 0.45 * up)[::-1]]
    cv2.fillPoly(bare, [np.round(band).astype(np.int32)], cv2.mean(image, mask=cheeks)[:3])
    swapper = ClassicalSwapper(ClassicalOptions())
    frame = image.copy()
    face = Face(box=(*lm.min(axis=0), *lm.max(axis=0)), landmarks=lm)

    bare_source = swapper.prepare_source(bare, lm)
    result = swapper.forward(frame, face, bare_source)
    assert result is not None
    x0, y0, x1, y1 = result.region
    shape = (y1 - y0, x1 - x0)
    origin = np.array([x0, y0], np.float32)
    inner = np.zeros(shape, np.uint8)
    cv2.fillConvexPoly(inner, cv2.convexHull(np.round(lm - origin).astype(np.int32)), 255)
    inner = cv2.erode(inner, np.ones((3, 3), np.uint8))
    assert not np.any(result.valid[inner > 0] == 0), "the warp leaves part of the inner face"
    # A quarter of the brows-to-chin distance above the brows is covered (but for their outer
    # tails, where the temples' hair starts on any face).
    reach = ((brows[1:-1] + 0.25 * up) - origin).round().astype(int)
    assert (result.valid[reach[:, 1], reach[:, 0]] > 0).all()

    fringe_source = swapper.prepare_source(image, lm)
    assert fringe_source.forehead.mean() < 0.75 * bare_source.forehead.mean()


def test_identity_carries_and_the_target_keeps_its_landmarks(dlib_models, target):
    # dlib's "same person" line is 0.6: the swapped still is the source's person, while dlib
    # finds the target's landmarks where they were (pose and expression kept).
    frame, lm, box = target
    source = cv2.cvtColor(cv2.cvtColor(astronaut(), cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR)
    source_lm = landmarks(dlib_models, source, ASTRONAUT_FACE)
    reference = dlib_models[1].forward(source, source_lm)
    out = swap(source, source_lm, frame, lm)
    before = float(np.linalg.norm(dlib_models[1].forward(frame, lm) - reference))
    lm_out = landmarks(dlib_models, out, box)
    after = float(np.linalg.norm(dlib_models[1].forward(out, lm_out) - reference))
    assert after < 0.6 < before
    iod = float(np.linalg.norm(lm[36:42].mean(axis=0) - lm[42:48].mean(axis=0)))
    shift = float(np.linalg.norm(lm_out - lm, axis=1).mean()) / iod
    assert shift <= 0.05


def test_shape_keeps_the_target_pose_jaw_mouth_and_eyelids(dlib_models, target):
    # The source's proportions come in on brows, nose and eye positions only, fitted to the
    # target's pose: rolled and scaled targets get the same relative change.
    _, lm, _ = target
    source = landmarks(dlib_models, astronaut(), ASTRONAUT_FACE)
    moved = blend_shape(lm, source, 0.3)
    assert np.array_equal(moved[:17], lm[:17]) and np.array_equal(moved[48:], lm[48:])
    for eye in (slice(36, 42), slice(42, 48)):  # each eye shifted whole: its lids' shape stays
        offsets = moved[eye] - lm[eye]
        np.testing.assert_allclose(offsets, np.broadcast_to(offsets[0], offsets.shape), atol=1e-4)
    iod = float(np.linalg.norm(lm[36:42].mean(axis=0) - lm[42:48].mean(axis=0)))
    assert 0 < float(np.linalg.norm(moved - lm, axis=1).mean()) / iod <= 0.05
    centre = lm.mean(axis=0)
    rot = cv2.getRotationMatrix2D((float(centre[0]), float(centre[1])), 25.0, 1.4)
    rolled = (np.c_[lm, np.ones(68)] @ rot.T).astype(np.float32)
    expected = (np.c_[moved, np.ones(68)] @ rot.T).astype(np.float32)
    np.testing.assert_allclose(blend_shape(rolled, source, 0.3), expected, atol=1e-2)
    assert blend_shape(lm, source, 0.0) is lm


def _turned_points(turn: float) -> np.ndarray:
    """68 points with only what engines.geometry.measures.face_turn reads set: the jaw's ends,
    the nose tip and the eyes' outer corners, the nose placed for a turn of `turn`."""
    lm = np.zeros((68, 2), np.float32)
    lm[0], lm[16], lm[36], lm[45] = (0, 0), (100, 0), (20, -20), (80, -20)
    lm[30] = (100 / (2 - turn), 10)  # left half 100/(2-t), right half its (1-t): turn t
    return lm


@pytest.mark.parametrize(("turn", "occluded", "expected"), [
    (0.0, False, 0.42), (0.3, False, 0.42), (0.55, False, 0.36), (0.8, False, 0.3), (0.95, False, 0.3),
    (0.0, True, 0.3),
])
def test_the_shape_blend_gives_way_on_turned_and_covered_faces(turn, occluded, expected):
    # `quality`: 0.42 of the source's proportions on a frontal face, 0.3 from a turn of 0.8
    # and while something is in front of it; without swap.shape_turned, `shape` everywhere.
    lm = _turned_points(turn)
    occlusion = Occlusion(np.zeros((8, 8), np.uint8), np.eye(2, 3, dtype=np.float32)) if occluded else None
    face = Face((0.0, -40.0, 100.0, 60.0), lm, occlusion=occlusion)
    swapper = ClassicalSwapper(ClassicalOptions(shape=0.42, shape_turned=0.3))
    assert swapper._shape_of(face, lm) == pytest.approx(expected, abs=1e-6)
    assert ClassicalSwapper(ClassicalOptions(shape=0.42))._shape_of(face, lm) == 0.42


@pytest.mark.parametrize(("turn", "expected"), [(0.0, 0.1), (0.3, 0.1), (0.55, 0.08), (0.8, 0.06), (0.95, 0.06)])
def test_the_coarse_feather_gives_way_on_turned_faces(turn, expected):
    # `quality`: 0.1 on a frontal face, 0.06 from a turn of 0.8 (a wide coarse edge moved dlib's
    # points on the suite's turned faces); without swap.feather_turned, `feather` everywhere.
    lm = _turned_points(turn)
    swapper = ClassicalSwapper(ClassicalOptions(feather=0.1, feather_turned=0.06))
    assert swapper._feather_of(lm) == pytest.approx(expected, abs=1e-6)
    assert ClassicalSwapper(ClassicalOptions(feather=0.1))._feather_of(lm) == 0.1


def test_a_fringe_on_the_target_stays_in_front_of_the_forehead(dlib_models):
    # The astronaut's fringe covers her forehead: a source with a bare forehead reaches up
    # there, but the target's hair stays, and where skin shows the swap fades out upwards.
    image = astronaut()
    lm = landmarks(dlib_models, image, ASTRONAUT_FACE)
    brows, up = lm[BROWS], lm[BROWS].mean(axis=0) - lm[8]
    bare = image.copy()
    cheeks = cv2.fillConvexPoly(np.zeros(image.shape[:2], np.uint8),
                                np.round(lm[CHEEKS]).astype(np.int32), 255)
    band = np.r_[brows + 0.03 * up, (brows + 0.45 * up)[::-1]]
    cv2.fillPoly(bare, [np.round(band).astype(np.int32)], cv2.mean(image, mask=cheeks)[:3])
    target = cv2.GaussianBlur(image, (0, 0), 0.6)  # not the source's own pixels
    out = swap(bare, lm, target, lm)
    forehead = np.zeros(image.shape[:2], np.uint8)
    cv2.fillPoly(forehead, [np.round(np.r_[brows + 0.08 * up, (brows + 0.25 * up)[::-1]])
                            .astype(np.int32)], 255)
    ycc = cv2.cvtColor(target, cv2.COLOR_BGR2YCrCb).astype(np.float32)
    mean = ycc[cheeks > 0].mean(axis=0)
    hair = (forehead > 0) & (np.abs(ycc - mean) > (30, 12, 12)).any(axis=2)
    assert hair.sum() > 200  # the fringe is there to keep
    change = np.abs(out.astype(np.int16) - target.astype(np.int16)).max(axis=2)
    # Pasted over, the hair changes by 53 levels (median), 101 (90th percentile).
    assert np.median(change[hair]) <= 3 and np.percentile(change[hair], 90) <= 40
    inner = np.zeros(image.shape[:2], np.uint8)
    cv2.fillConvexPoly(inner, cv2.convexHull(np.round(lm).astype(np.int32)), 255)
    assert (change[inner > 0] > 0).mean() > 0.5  # the face itself is swapped
