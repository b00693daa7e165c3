"""Behaviour of the classical swapper: piecewise-affine warp, masks, colour transfer, blends.

Targets are synthesised from the astronaut's real dlib landmarks: the picture and its
landmarks are moved by one known affine map, so the warped source must equal the moved
picture wherever the mesh covers it.
"""
from __future__ import annotations

from dataclasses import dataclass

import cv2
import dlib
import numpy as np
import pytest
from skimage import data

from engines.classic import swapper as classical_swapper
from engines.classic.blend import (
    LIP_EDGE,
    blend_bands,
    blend_feather,
    detail,
    detail_mix,
    face_pixels,
    lip_band,
    lip_shift,
    match_detail,
    match_lips,
    match_shading,
    prepare_masks,
    shift_lips,
    soften_by,
    transfer_color,
)
from engines.classic.swapper import (
    LEVEL_MARGIN,
    ClassicalOptions,
    ClassicalSwapper,
    SourceFace,
    place_forehead,
)
from engines.dlib.models import model_path
from engines.errors import EngineError
from engines.face import INNER_LIPS, Face, SwapResult
from engines.geometry.measures import face_size, face_turn, mouth_open_ratio
from engines.geometry.piecewise_affine import (
    _nonzero,
    _pixels_of,
    forward_warp,
    prepare_affines,
    prepare_triangulation,
)


@dataclass(frozen=True)
class Astronaut:
    image: np.ndarray  # BGR
    landmarks: np.ndarray  # (68, 2) float32


@pytest.fixture(scope="module")
def astro() -> Astronaut:
    rgb = data.astronaut()
    detector = dlib.get_frontal_face_detector()
    predictor = dlib.shape_predictor(model_path("landmarks"))
    boxes = detector(rgb, 1)
    assert len(boxes) >= 1
    box = max(boxes, key=lambda r: r.area())
    points = np.array([(p.x, p.y) for p in predictor(rgb, box).parts()], np.float32)
    return Astronaut(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), points)


@pytest.fixture(scope="module")
def source(astro: Astronaut) -> SourceFace:
    return ClassicalSwapper(ClassicalOptions()).prepare_source(astro.image, astro.landmarks)


def similarity(angle: float = 0.0, scale: float = 1.0, shift: tuple[float, float] = (0.0, 0.0),
               centre: tuple[float, float] = (225.0, 130.0)) -> np.ndarray:
    """2x3 map: rotate/scale about `centre` (the astronaut's face), then translate."""
    m = cv2.getRotationMatrix2D(centre, angle, scale)
    m[:, 2] += shift
    return m


def move(astro: Astronaut, matrix: np.ndarray, size: tuple[int, int] = (512, 512),
         ) -> tuple[np.ndarray, np.ndarray]:
    """The astronaut picture and landmarks moved by `matrix` onto a (w, h) canvas."""
    frame = cv2.warpAffine(astro.image, matrix, size, flags=cv2.INTER_LINEAR,
                           borderMode=cv2.BORDER_REFLECT)
    points = (np.c_[astro.landmarks, np.ones(68)] @ matrix.T).astype(np.float32)
    return frame, points


def face_of(points: np.ndarray) -> Face:
    lo, hi = points.min(axis=0), points.max(axis=0)
    return Face(box=(float(lo[0]), float(lo[1]), float(hi[0]), float(hi[1])), landmarks=points)


def hull_mask(points: np.ndarray, shape: tuple[int, int], grow: int = 0) -> np.ndarray:
    """Filled convex hull of `points` (grow < 0 erodes, > 0 dilates by |grow| px)."""
    mask = np.zeros(shape, np.uint8)
    cv2.fillConvexPoly(mask, cv2.convexHull(np.round(points).astype(np.int32)), 255)
    if grow:
        kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * abs(grow) + 1,) * 2)
        mask = cv2.dilate(mask, kernel) if grow > 0 else cv2.erode(mask, kernel)
    return mask


def region_points(points: np.ndarray, result: SwapResult) -> np.ndarray:
    return points - np.array(result.region[:2], np.float32)


def random_similarity(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return similarity(angle=rng.uniform(-20, 20), scale=rng.uniform(0.7, 1.6),
                      shift=tuple(rng.uniform(-60, 60, size=2)))


# Each row: a map applied to the astronaut and its landmarks, and the tolerated mean / 99th
# percentile absolute error (grey levels) between the warp and the moved picture in the hull.
MOVES = [
    pytest.param(np.eye(2, 3), 0.5, 2, id="identity"),
    pytest.param(similarity(shift=(37.25, -21.5)), 0.5, 2, id="translate-subpixel"),
    pytest.param(similarity(scale=1.5, shift=(40, 60)), 0.5, 3, id="scale-up"),
    # A face this small (about 70 px) is warped at twice its size and area-averaged down,
    # smoother than warpAffine's one bilinear sample a pixel at its sharpest edges.
    pytest.param(similarity(scale=0.75), 1.0, 12, id="scale-down"),
    pytest.param(similarity(angle=17, scale=1.1, shift=(-30, 15)), 0.5, 3, id="rotate"),
    pytest.param(np.array([[1.1, 0.25, -40.0], [-0.1, 0.9, 30.0]]), 0.5, 3, id="shear"),
    # At a third of the size the swapper samples a pre-blurred pyramid level, which is
    # smoother than warpAffine's plain bilinear sampling.
    pytest.param(similarity(scale=0.35), 7.0, 40, id="scale-third-pyramid"),
    *[pytest.param(random_similarity(seed), 0.8, 6, id=f"seed{seed}") for seed in range(4)],
]


@pytest.mark.parametrize(("matrix", "mean_tol", "p99_tol"), MOVES)
def test_warp_reproduces_moved_source(astro, source, matrix, mean_tol, p99_tol):
    frame, points = move(astro, matrix)
    untouched = frame.copy()
    # shape=0: the target's landmarks exactly (no source proportions), so the warp is the map.
    result = ClassicalSwapper(ClassicalOptions(shape=0.0)).forward(frame, face_of(points), source)
    assert result is not None
    assert np.array_equal(frame, untouched), "forward must not modify the frame"
    x0, y0, x1, y1 = result.region
    inside = hull_mask(region_points(points, result), (y1 - y0, x1 - x0), grow=-2) > 0
    error = np.abs(result.patch.astype(int) - frame[y0:y1, x0:x1].astype(int))[inside]
    assert error.mean() <= mean_tol
    assert np.percentile(error, 99) <= p99_tol


@pytest.mark.parametrize("matrix", [pytest.param(m.values[0], id=m.id) for m in MOVES])
def test_valid_covers_hull_and_little_else(astro, source, matrix):
    frame, points = move(astro, matrix)
    result = ClassicalSwapper(ClassicalOptions(shape=0.0)).forward(frame, face_of(points), source)
    assert result is not None
    x0, y0, x1, y1 = result.region
    # The mesh is the 68 points plus the forehead points measured on the source.
    local = region_points(place_forehead(points, source.landmarks), result)
    shape = (y1 - y0, x1 - x0)
    assert result.valid.dtype == np.uint8 and set(np.unique(result.valid)) <= {0, 255}
    assert not np.any(hull_mask(local, shape, grow=-1)[result.valid == 0])
    assert not np.any(result.valid[hull_mask(local, shape, grow=2) == 0])


def test_region_is_the_landmark_box_plus_a_small_margin(astro, source):
    frame, points = move(astro, similarity(scale=1.2, shift=(10, 20)))
    result = ClassicalSwapper(ClassicalOptions(shape=0.0)).forward(frame, face_of(points), source)
    points = place_forehead(points, source.landmarks)  # the 68 and the source's forehead points
    x0, y0, x1, y1 = result.region
    lo, hi = points.min(axis=0), points.max(axis=0)
    assert all(isinstance(v, int) for v in result.region)
    assert x0 <= lo[0] and y0 <= lo[1] and x1 > hi[0] and y1 > hi[1]
    size = float(np.sqrt(np.prod(hi - lo)))
    assert max(lo[0] - x0, lo[1] - y0, x1 - hi[0], y1 - hi[1]) <= 0.1 * size
    assert result.patch.shape == (y1 - y0, x1 - x0, 3) and result.valid.shape == (y1 - y0, x1 - x0)


def test_affines_are_exact_for_a_global_affine(astro):
    tri = prepare_triangulation(astro.landmarks)
    matrix = np.array([[0.9, 0.2, 15.0], [-0.3, 1.2, -7.0]])
    moved = (np.c_[astro.landmarks, np.ones(68)] @ matrix.T).astype(np.float32)
    coef = prepare_affines(tri, astro.landmarks, moved)
    inverse = cv2.invertAffineTransform(matrix)
    np.testing.assert_allclose(coef[:, :2, :], np.broadcast_to(inverse[:, :2].T, coef[:, :2].shape),
                               atol=1e-4)
    np.testing.assert_allclose(coef[:, 2, :], np.broadcast_to(inverse[:, 2], coef[:, 2].shape),
                               atol=1e-2)


def test_triangulation_uses_every_landmark_once_per_corner(astro, source):
    tri = source.triangles
    assert tri.dtype == np.int32 and tri.ndim == 2 and tri.shape[1] == 3
    n = len(source.landmarks)  # the 68 and the forehead points measured on the source
    assert n in (68, 78)
    assert 100 <= len(tri) <= 2 * n - 5  # Delaunay of n points: 2n - 2 - hull size
    assert set(np.unique(tri)) == set(range(n))
    assert len({tuple(sorted(t)) for t in tri.tolist()}) == len(tri)


def test_source_pyramid_steps_down_by_sqrt2(astro, source):
    assert len(source.levels) >= 3
    crop_h, crop_w = source.image.shape[:2]
    for k, mesh in enumerate(source.levels):
        h, w = mesh.image.shape[:2]
        # Pixel centres scale with the level: x + 0.5 -> (x + 0.5) * w / crop_w.
        expected = (source.landmarks + 0.5) * np.array([w / crop_w, h / crop_h]) - 0.5
        np.testing.assert_allclose(mesh.points, expected, atol=1e-3)
        assert mesh.points.min() >= 0 and (mesh.points.max(axis=0) < mesh.image.shape[1::-1]).all()
        assert mesh.triangles is source.triangles
        assert source.sizes[k] == pytest.approx(source.sizes[0] / np.sqrt(2) ** k, rel=0.03)
    # A target samples the smallest level at least LEVEL_MARGIN x its own size (or the crop).
    assert source.level_for(source.sizes[0]) == 0
    for k in (1, 2):
        assert source.level_for(source.sizes[k] / LEVEL_MARGIN) == k
        assert source.level_for(source.sizes[k] / LEVEL_MARGIN * 1.01) == k - 1


@pytest.mark.parametrize("size", [40.0, 30.0])
def test_a_small_target_keeps_the_source_detail(astro, size):
    # The astronaut area-averaged down to a `size` px face is what a camera sees of her at that
    # size; the source warped onto that face must look the same, not softer (a Gaussian pyramid
    # sampled at 1-2x left a 40 px face with 0.68 of the detail, mean error 3.3 levels).
    swapper = ClassicalSwapper(ClassicalOptions(forehead=0.0))
    source = swapper.prepare_source(astro.image, astro.landmarks)
    h, w = astro.image.shape[:2]
    scale = size / source.sizes[0]
    sw, sh = round(w * scale), round(h * scale)
    small = cv2.resize(astro.image, (sw, sh), interpolation=cv2.INTER_AREA)
    points = ((astro.landmarks + 0.5) * np.array([sw / w, sh / h]) - 0.5).astype(np.float32)
    result = swapper.forward(small, face_of(points), source)
    assert result is not None
    x0, y0, x1, y1 = result.region
    reference = small[y0:y1, x0:x1]
    inner = hull_mask(region_points(points, result), reference.shape[:2], grow=-1) > 0

    def detail(image: np.ndarray) -> float:
        grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
        return float(np.abs(cv2.Laplacian(grey, cv2.CV_32F))[inner].mean())

    error = np.abs(result.patch.astype(np.float32) - reference.astype(np.float32))[inner].mean()
    assert error <= 2.0
    assert 0.9 <= detail(result.patch) / detail(reference) <= 1.15


@pytest.mark.parametrize(("image", "points"), [
    (np.zeros((64, 64), np.uint8), "ok"),
    (np.zeros((64, 64, 3), np.float32), "ok"),
    ("astro", np.zeros((5, 2), np.float32)),
    ("astro", np.full((68, 2), np.nan, np.float32)),
    ("astro", np.full((68, 2), 100.0, np.float32)),
])
def test_prepare_source_rejects_bad_input(astro, image, points):
    image = astro.image if isinstance(image, str) else image
    points = astro.landmarks if isinstance(points, str) else points
    with pytest.raises(EngineError):
        ClassicalSwapper(ClassicalOptions()).prepare_source(image, points)


def test_source_near_photo_edge_is_padded(astro):
    # The face's crop leaves the photo: it is edge-replicated, and the warp still works.
    cut = astro.image[100:, 190:].copy()
    points = astro.landmarks - np.array([190, 100], np.float32)
    swapper = ClassicalSwapper(ClassicalOptions())
    src = swapper.prepare_source(cut, points)
    assert src.origin[0] < 0 and src.origin[1] < 0
    result = swapper.forward(astro.image, face_of(astro.landmarks), src)
    assert result is not None and np.count_nonzero(result.valid) > 1000


@pytest.mark.parametrize("blend", ["feather", "poisson", "bands"])
@pytest.mark.parametrize("color", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_paste_changes_the_region_only(astro, source, blend, color, seed):
    rng = np.random.default_rng(seed)
    other = cv2.cvtColor(data.coffee(), cv2.COLOR_RGB2BGR)
    frame, points = move(astro, random_similarity(seed), size=(640, 480))
    frame[:] = cv2.resize(other, (640, 480))  # a different picture under the same landmarks
    frame[:, :, rng.integers(3)] //= 2
    before = frame.copy()
    bands = {"blend": "feather", "fine_feather": 0.03, "feather": 0.1} if blend == "bands" else {"blend": blend}
    swapper = ClassicalSwapper(ClassicalOptions(color_transfer=color, **bands))
    face = face_of(points)
    result = swapper.forward(frame, face, source)
    swapper.paste(frame, face, result)
    x0, y0, x1, y1 = result.region
    outside = np.ones(frame.shape[:2], bool)
    outside[y0:y1, x0:x1] = False
    assert np.array_equal(frame[outside], before[outside])
    changed = np.any(frame != before, axis=2)
    assert changed[y0:y1, x0:x1].mean() > 0.2
    # Outside the landmark hull (grown by a pixel), the region keeps the target as well.
    far = hull_mask(place_forehead(points, source.landmarks), frame.shape[:2], grow=2) == 0
    assert not changed[far].any()
    assert (swapper.calls, swapper.pastes, swapper.skipped) == (1, 1, 0)


@pytest.mark.parametrize("feather", [0.06, 0.12, 0.25])
def test_feathered_mask_is_soft_at_the_edge_and_opaque_inside(astro, feather):
    points = astro.landmarks - astro.landmarks.min(axis=0) + 6
    shape = tuple(int(v) for v in points.max(axis=0)[::-1] + 8)
    valid = np.full(shape, 255, np.uint8)
    masks = prepare_masks(points, valid, feather, keep_mouth=True, mouth_open=0.12)
    alpha = masks.alpha
    soft = (alpha > 0) & (alpha < 255)
    assert soft.any()
    nose = tuple(np.round(points[30]).astype(int)[::-1])
    assert alpha[nose] == 255 and masks.core[nose] == 255
    assert not alpha[hull_mask(points, shape, grow=1) == 0].any()
    # A wider feather gives a wider soft band, of about feather x face size.
    size = float(np.sqrt(np.prod(points.max(axis=0) - points.min(axis=0))))
    band = soft.sum() / (cv2.arcLength(cv2.convexHull(points[:27]), True))
    assert 0.5 * feather * size <= band <= 1.5 * feather * size + 2


def test_the_fine_bands_mask_is_the_same_area_with_a_narrower_edge(astro):
    points = astro.landmarks - astro.landmarks.min(axis=0) + 6
    shape = tuple(int(v) for v in points.max(axis=0)[::-1] + 8)
    valid = np.full(shape, 255, np.uint8)
    one = prepare_masks(points, valid, 0.1, keep_mouth=True, mouth_open=0.05)
    masks = prepare_masks(points, valid, 0.1, keep_mouth=True, mouth_open=0.05, fine_feather=0.03)
    assert one.fine is None
    assert np.array_equal(masks.alpha, one.alpha) and np.array_equal(masks.core, one.core)
    fine = masks.fine
    assert fine is not None and np.array_equal(fine > 0, masks.alpha > 0)
    assert (fine >= masks.alpha).all()
    soft = lambda m: int(((m > 0) & (m < 255)).sum())  # noqa: E731
    assert soft(fine) < 0.5 * soft(masks.alpha)
    # The open mouth (parted lips, mouth_open 0.05) is cut out of both alike.
    mouth = tuple(np.round(points[INNER_LIPS].mean(axis=0)).astype(int)[::-1])
    assert masks.alpha[mouth] == 0 and fine[mouth] == 0


def _bands_scene(offset: float, texture: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A flat grey target; a patch that is the target plus a uniform `offset` (its coarse band
    differs) plus a fine checker of +-`texture` (its fine band differs); a disc's masks with a
    wide coarse ramp and a narrow fine one."""
    h = w = 160
    roi = np.full((h, w, 3), 100, np.uint8)
    checker = (np.indices((h, w)).sum(axis=0) % 2 * 2 - 1).astype(np.float32)[..., None]
    patch = np.clip(np.repeat(100 + offset + texture * checker, 3, axis=2), 0, 255).astype(np.uint8)
    disc = cv2.circle(np.zeros((h, w), np.uint8), (80, 80), 60, 255, -1)
    dist = cv2.distanceTransform(disc, cv2.DIST_L2, 5)
    alpha = np.clip(dist * 255 / 30, 0, 255).astype(np.uint8)
    fine = np.clip(dist * 255 / 6, 0, 255).astype(np.uint8)
    return roi, patch, disc, alpha, fine


def test_two_bands_blend_the_light_over_the_wide_edge_and_the_detail_over_the_narrow_one():
    # Coarse only: a patch brighter by 40 everywhere comes in as alpha says.
    roi, patch, disc, alpha, fine = _bands_scene(40, 0)
    out = roi.copy()
    blend_bands(out, patch, disc, alpha, fine, 4.0)
    gain = (out[..., 1].astype(np.float32) - 100) / 40
    ring = (alpha > 20) & (alpha < 235)
    assert np.abs(gain[ring] - alpha[ring] / 255.0).max() < 0.08
    # ... also when the coarse ramp is the narrower one.
    out = roi.copy()
    blend_bands(out, patch, disc, fine, alpha, 4.0)
    gain = (out[..., 1].astype(np.float32) - 100) / 40
    ring = (fine > 20) & (fine < 235)
    assert np.abs(gain[ring] - fine[ring] / 255.0).max() < 0.08
    # Fine only: a checker of +-30 comes in as fine says, already whole where alpha is low.
    roi, patch, disc, alpha, fine = _bands_scene(0, 30)
    out = roi.copy()
    blend_bands(out, patch, disc, alpha, fine, 4.0)
    amplitude = np.abs(out[..., 1].astype(np.float32) - 100) / 30
    ring = (fine == 255) & (alpha < 128) & (cv2.erode(disc, np.ones((9, 9))) > 0)
    assert ring.sum() > 500 and amplitude[ring].mean() > 0.9
    # Exact at both ends: the target where both weights are 0, the patch where both are 255.
    roi, patch, disc, alpha, fine = _bands_scene(40, 30)
    out = roi.copy()
    blend_bands(out, patch, disc, alpha, fine, 4.0)
    assert np.array_equal(out[fine == 0], roi[fine == 0])
    inner = alpha == 255
    assert np.abs(out[inner].astype(int) - patch[inner]).max() <= 1
    # The same weight for both bands is the one-band blend.
    out, one = roi.copy(), roi.copy()
    blend_bands(out, patch, disc, alpha, alpha, 4.0)
    blend_feather(one, patch, alpha)
    assert np.abs(out.astype(int) - one).max() <= 1


def test_the_patchs_coarse_band_leaves_out_what_the_warp_did_not_cover():
    # Black outside `valid` (the warp's edge) must not darken the patch's light near it.
    roi, patch, disc, alpha, fine = _bands_scene(40, 0)
    patch[disc == 0] = 0
    out = roi.copy()
    blend_bands(out, patch, disc, alpha, fine, 4.0)
    gain = (out[..., 1].astype(np.float32) - 100) / 40
    ring = (alpha > 20) & (alpha < 235)
    assert np.abs(gain[ring] - alpha[ring] / 255.0).max() < 0.08


def test_no_feather_gives_a_hard_mask(astro):
    points = astro.landmarks - astro.landmarks.min(axis=0) + 6
    shape = tuple(int(v) for v in points.max(axis=0)[::-1] + 8)
    masks = prepare_masks(points, np.full(shape, 255, np.uint8), 0.0, True, 0.12)
    assert set(np.unique(masks.alpha)) == {0, 255}


def set_mouth(points: np.ndarray, gap: float) -> np.ndarray:
    """The same landmarks with the inner lower lip `gap` px below the inner upper lip.

    The lower lip, outer lower lip and chin move with it, as when a jaw opens; gap 0 closes
    the mouth (the astronaut smiles with parted lips).
    """
    moved = points.copy()
    drop = points[[63, 62, 61]] + (0, gap) - points[[65, 66, 67]]
    moved[[65, 66, 67]] += drop
    moved[[55, 56, 57, 58, 59]] += drop.mean(axis=0)
    moved[6:11] += drop.mean(axis=0)
    return moved


def swap_painted(frame: np.ndarray, points: np.ndarray, region: np.ndarray, options: ClassicalOptions,
                 source: SourceFace, keep_areas: tuple[str, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """`frame` with `region` painted a dark red nothing in the source has, before and after a
    swap of the face on `points` with `options` (and the target's `keep_areas` kept)."""
    frame[region] = (40, 0, 160)
    before = frame.copy()
    swapper = ClassicalSwapper(options, keep_areas=keep_areas)
    face = face_of(points)
    swapper.paste(frame, face, swapper.forward(frame, face, source))
    return before, frame


def assert_kept(before: np.ndarray, after: np.ndarray, region: np.ndarray, kept: bool) -> None:
    """`region` is the target's exactly (kept), or mostly the swap's."""
    if kept:
        assert np.array_equal(after[region], before[region])
    else:
        assert np.any(after[region] != before[region], axis=1).mean() > 0.5


@pytest.mark.parametrize(("keep_mouth", "threshold", "kept"), [
    (True, 0.12, True),  # open, and asked to keep it
    (False, 0.12, False),  # open, but keep_mouth is off
    (True, 0.5, False),  # the gap is below this threshold: counts as closed, nothing is cut
])
def test_open_mouth_keeps_the_target_mouth(astro, source, keep_mouth, threshold, kept):
    frame, points = move(astro, similarity(scale=1.3))
    points = set_mouth(points, 14.0)
    lips = np.round(points[INNER_LIPS]).astype(np.int32)
    mouth = np.zeros(frame.shape[:2], np.uint8)
    cv2.fillPoly(mouth, [lips], 255)
    mouth = cv2.erode(mouth, np.ones((3, 3), np.uint8)) > 0
    options = ClassicalOptions(keep_mouth=keep_mouth, mouth_open=threshold)
    before, after = swap_painted(frame, points, mouth, options, source)
    assert mouth.sum() > 100
    assert_kept(before, after, mouth, kept)


@pytest.mark.parametrize(("keep_lips", "gap", "kept"), [
    (True, 0.0, True),  # closed lips under a smiling source: the target's lips stay
    (False, 0.0, False),  # the switch is off: the source's mouth, teeth and all
    (True, 12.0, False),  # the target's mouth is open as wide as the source's: nothing kept
])
def test_keep_lips_keeps_the_targets_lips_under_a_wider_open_source_mouth(astro, source, keep_lips,
                                                                         gap, kept):
    frame, points = move(astro, similarity(scale=1.3))
    points = set_mouth(points, gap)
    lips = np.zeros(frame.shape[:2], np.uint8)
    cv2.fillPoly(lips, [np.round(points[48:60]).astype(np.int32)], 255)
    lips = cv2.erode(lips, np.ones((3, 3), np.uint8)) > 0
    before, after = swap_painted(frame, points, lips, ClassicalOptions(keep_lips=keep_lips, keep_mouth=False),
                                 source)
    assert lips.sum() > 200
    assert_kept(before, after, lips, kept)
    # Past the lips and the soft edge around them, the swap is what it is without the switch
    # but for the colour statistics, which no longer count the lips.
    _, plain = swap_painted(before.copy(), points, lips, ClassicalOptions(keep_mouth=False), source)
    edge = int(ClassicalOptions().feather * face_size(points)) + 12
    away = cv2.dilate(lips.astype(np.uint8), np.ones((2 * edge + 1,) * 2, np.uint8)) == 0
    change = np.abs(after[away].astype(np.int16) - plain[away]).max(axis=1)
    assert change.mean() < 1.0


def hull_of(points: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The pixels well inside the convex hull of `points` (eroded by 2 px)."""
    region = np.zeros(shape[:2], np.uint8)
    cv2.fillConvexPoly(region, cv2.convexHull(np.round(points).astype(np.int32)), 255)
    return cv2.erode(region, np.ones((5, 5), np.uint8)) > 0


@pytest.mark.parametrize(("keep", "mouth_kept", "eyes_kept"), [
    (("mouth",), True, False),  # mask area, areas upper-face and lower-face: the target's own mouth
    (("upper-face",), False, True),  # its eyes and brows instead
    ((), False, False),  # every area swapped, as without a mask
])
def test_mask_areas_keep_the_targets_own_areas(astro, source, keep, mouth_kept, eyes_kept):
    """`mask.types area` on the classical swapper: each area left out of `mask.areas` keeps
    the target's pixels exactly (no model: its 68 points), the rest is swapped."""
    frame, points = move(astro, similarity(scale=1.3))
    points = set_mouth(points, 0.0)  # closed: the open-mouth cut (keep_mouth) plays no part
    mouth, eyes = hull_of(points[48:68], frame.shape), hull_of(points[36:42], frame.shape) | hull_of(
        points[42:48], frame.shape)
    before, after = swap_painted(frame, points, mouth | eyes, ClassicalOptions(), source, keep_areas=keep)
    assert mouth.sum() > 150 and eyes.sum() > 40
    assert_kept(before, after, mouth, mouth_kept)
    assert_kept(before, after, eyes, eyes_kept)


def test_an_unknown_mask_area_is_one_line():
    with pytest.raises(ValueError, match="unknown mask area 'chin'; known: upper-face, lower-face, mouth"):
        ClassicalSwapper(keep_areas=("chin",))


def test_closed_mouth_is_not_cut_out(astro):
    points = set_mouth(astro.landmarks, 0.0) - astro.landmarks.min(axis=0) + 6
    shape = tuple(int(v) for v in points.max(axis=0)[::-1] + 8)
    masks = prepare_masks(points, np.full(shape, 255, np.uint8), 0.12, True, 0.12)
    for i in (61, 62, 63, 65, 66, 67):
        x, y = np.round(points[i]).astype(int)
        assert masks.alpha[y, x] == 255


def test_mouth_open_ratio(astro):
    assert mouth_open_ratio(set_mouth(astro.landmarks, 0.0)) < 0.01
    assert mouth_open_ratio(set_mouth(astro.landmarks, 14.0)) > 0.2


@pytest.mark.parametrize("gap", [3.0, 14.0])
def test_a_turned_head_does_not_open_the_mouth(astro, gap):
    # The same face turned about 55 degrees away: seen from the side its width shrinks to
    # cos(55) = 0.57 of it, its height does not. Its lips are no more open than before.
    points = set_mouth(astro.landmarks, gap)
    centre = points.mean(axis=0)
    turned = (points - centre) * (0.57, 1.0) + centre
    assert mouth_open_ratio(turned) == pytest.approx(mouth_open_ratio(points), rel=0.2)
    assert (mouth_open_ratio(turned) > 0.12) == (mouth_open_ratio(points) > 0.12)


@pytest.mark.parametrize("tint", [(0.6, 1.0, 1.3), (1.2, 0.8, 0.7), (0.5, 0.5, 0.5)])
def test_colour_transfer_moves_the_face_toward_the_target(astro, source, tint):
    frame, points = move(astro, similarity(angle=-6, scale=1.2))
    frame = np.clip(frame * np.array(tint), 0, 255).astype(np.uint8)
    face = face_of(points)
    means = {}
    for color in (False, True):
        swapper = ClassicalSwapper(ClassicalOptions(color_transfer=color))
        result = swapper.forward(frame, face, source)
        x0, y0, x1, y1 = result.region
        masks = prepare_masks(region_points(place_forehead(points, source.landmarks), result),
                              result.valid, ClassicalOptions().feather, True, 0.12)
        core = masks.core > 0
        target_mean = frame[y0:y1, x0:x1][core].mean(axis=0)
        out = frame.copy()
        swapper.paste(out, face, result)
        means[color] = out[y0:y1, x0:x1][core].mean(axis=0)
    before = np.linalg.norm(means[False] - target_mean)
    after = np.linalg.norm(means[True] - target_mean)
    assert after < 0.25 * before
    # The first tint saturates red: the transfer's own clipping leaves a few levels of bias.
    assert after < 4.5


def lip_masks(points: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The lips' band (between the outer and the inner lip lines) and the mouth inside the
    inner line, each shrunk by a pixel so that no rounding of the polygons' edges counts,
    and the band grown by two pixels (to paint: it covers every pixel of the band)."""
    outer = np.zeros(shape[:2], np.uint8)
    cv2.fillPoly(outer, [np.round(points[48:60]).astype(np.int32)], 255)
    inner = np.zeros(shape[:2], np.uint8)
    cv2.fillPoly(inner, [np.round(points[INNER_LIPS]).astype(np.int32)], 255)
    kernel = np.ones((3, 3), np.uint8)
    band = cv2.erode(cv2.subtract(outer, cv2.dilate(inner, kernel)), kernel)
    grown = cv2.subtract(cv2.dilate(outer, kernel, iterations=2), cv2.erode(inner, kernel, iterations=2))
    return band > 0, cv2.erode(inner, kernel) > 0, grown > 0


def away_from_lips(points: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Pixels past the reach of the lips' colour fade (3 sigma of LIP_EDGE, and 2 px more)."""
    reach = int(np.ceil(3 * LIP_EDGE * face_size(points))) + 2
    lips = np.zeros(shape[:2], np.uint8)
    cv2.fillPoly(lips, [np.round(points[48:60]).astype(np.int32)], 255)
    return cv2.dilate(lips, np.ones((2 * reach + 1,) * 2, np.uint8)) == 0


def chroma(pixels: np.ndarray) -> np.ndarray:
    """Mean (Cr, Cb) of BGR pixels, (N, 3)."""
    return cv2.cvtColor(pixels.reshape(-1, 1, 3), cv2.COLOR_BGR2YCrCb).reshape(-1, 3)[:, 1:].mean(axis=0)


LIP_CHROMA = (165.0, 110.0)  # Cr, Cb: red lips


def paint_lips(image: np.ndarray, band: np.ndarray) -> None:
    """In place: `band` made red, its luma kept (a lip colour any light level can carry)."""
    ycc = cv2.cvtColor(image, cv2.COLOR_BGR2YCrCb)
    ycc[band, 1:] = LIP_CHROMA
    image[band] = cv2.cvtColor(ycc, cv2.COLOR_YCrCb2BGR)[band]


@pytest.mark.parametrize("occluded", [False, True])
def test_lips_take_the_targets_colour_and_keep_their_shading(astro, occluded):
    # A grey source's lips on a target with red lips: the band between the lip lines takes
    # the target's lips' mean colour and keeps its own luma; the mouth inside the inner line
    # and everything past the fade stay exactly as they were. An occluder over the target's
    # lips (alpha 0 there, as a cut leaves it) does not count in the target's colour.
    frame, points = move(astro, similarity(scale=1.3))
    points = set_mouth(points, 14.0)
    band, mouth, paint = lip_masks(points, frame.shape)
    patch = cv2.cvtColor(cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR)
    target = frame.copy()
    paint_lips(target, paint)
    alpha = np.full(frame.shape[:2], 255, np.uint8)
    if occluded:
        right = np.zeros_like(band)
        right[:, int(points[51, 0]):] = True
        target[paint & right] = (200, 120, 20)  # a blue cup over the lips' right half
        alpha[right] = 0
    out = match_lips(patch, target, points, alpha)
    assert band.sum() > 150 and mouth.sum() > 100
    assert np.abs(chroma(out[band]) - chroma(target[band & (alpha > 0)])).max() < 1.5
    luma = cv2.cvtColor(out, cv2.COLOR_BGR2GRAY).astype(int) - cv2.cvtColor(patch, cv2.COLOR_BGR2GRAY)
    assert np.abs(luma[band]).max() <= 2
    assert np.array_equal(out[mouth], patch[mouth])
    away = away_from_lips(points, frame.shape)
    assert np.array_equal(out[away], patch[away])


def test_lips_covered_by_something_less_red_than_the_skin_are_left_alone(astro):
    # A dark grey bar across the mouth that the occluder search missed: its grey is no lip
    # colour (lips are never less red than the skin around them), so the source's lips
    # stay as they are rather than turning grey.
    frame, points = move(astro, similarity(scale=1.3))
    _, _, paint = lip_masks(points, frame.shape)
    target = frame.copy()
    target[paint] = (40, 40, 46)
    skin = hull_mask(points, frame.shape[:2], grow=-6)
    skin[cv2.dilate(paint.astype(np.uint8), np.ones((9, 9), np.uint8)) > 0] = 0
    alpha = np.full(frame.shape[:2], 255, np.uint8)
    assert match_lips(frame, target, points, alpha, skin) is frame
    assert not np.array_equal(match_lips(frame, target, points, alpha), frame)  # without the check


def test_a_grey_sources_lips_come_out_the_targets_colour(astro):
    # The whole swap, from a grey photo of the astronaut onto her in colour with red lips:
    # with lip_color the lips come out red; without it, the colour of the skin around them.
    # Elsewhere the two swaps are the same.
    grey = cv2.cvtColor(cv2.cvtColor(astro.image, cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR)
    frame, points = move(astro, similarity(scale=1.3))
    band, _, paint = lip_masks(points, frame.shape)
    paint_lips(frame, paint)
    face = face_of(points)
    outs = {}
    for on in (False, True):
        swapper = ClassicalSwapper(ClassicalOptions(lip_color=on))
        grey_source = swapper.prepare_source(grey, astro.landmarks)
        out = frame.copy()
        swapper.paste(out, face, swapper.forward(frame, face, grey_source))
        outs[on] = out
    red = chroma(frame[band])
    assert np.abs(chroma(outs[True][band]) - red).max() < 3.0
    assert np.abs(chroma(outs[False][band]) - red).max() > 10.0  # the skin's red: 15 levels short
    away = away_from_lips(points, frame.shape)
    assert np.array_equal(outs[True][away], outs[False][away])


@pytest.mark.parametrize("shade", [(60, 110, 170), (150, 120, 60)])
def test_a_wall_in_the_faces_mask_does_not_change_the_swaps_colour(astro, source, shade):
    # A quarter of the face's mask showing a wall (as where a turned face's points overshoot
    # it) is not the face's colour: the swap's skin elsewhere must come out as it does without
    # it, not tinted towards the wall.
    frame, points = move(astro, similarity(angle=-6, scale=1.2))
    face = face_of(points)
    swapper = ClassicalSwapper(ClassicalOptions())
    result = swapper.forward(frame, face, source)
    x0, y0, x1, y1 = result.region
    lo, hi = points.min(axis=0), points.max(axis=0)
    bar_x0 = int(lo[0] + 0.58 * (hi[0] - lo[0]))
    bar_x1 = int(lo[0] + 0.80 * (hi[0] - lo[0]))
    barred = frame.copy()
    barred[:, bar_x0:bar_x1] = shade
    clean_out, barred_out = frame.copy(), barred.copy()
    swapper.paste(clean_out, face, result)
    swapper.paste(barred_out, face, result)
    skin = hull_mask(points, frame.shape[:2], grow=-8) > 0
    skin[:, bar_x0 - 12:bar_x1 + 12] = False
    skin[:y0] = skin[y1:] = False
    shift = barred_out[skin].astype(np.float64).mean(axis=0) - clean_out[skin].mean(axis=0)
    assert np.abs(shift).max() < 4.0  # 16-28 levels when the wall counts as skin


@pytest.mark.parametrize("tint", [(1.0, 1.0, 1.0), (0.6, 1.0, 1.3), (0.5, 0.5, 0.5)])
def test_a_bare_face_keeps_all_its_pixels_in_the_colour_statistics(astro, source, tint):
    # Its eyes, brows and lips are far from its skin's colour but belong to it: the statistics
    # of a face with nothing in front of it are taken over the whole mask, as they always were.
    frame, points = move(astro, similarity(angle=-6, scale=1.2))
    frame = np.clip(frame * np.array(tint), 0, 255).astype(np.uint8)
    result = ClassicalSwapper(ClassicalOptions()).forward(frame, face_of(points), source)
    x0, y0, x1, y1 = result.region
    masks = prepare_masks(region_points(place_forehead(points, source.landmarks), result),
                          result.valid, ClassicalOptions().feather, True, 0.12)
    for image in (frame[y0:y1, x0:x1], result.patch):
        ycc = cv2.cvtColor(image, cv2.COLOR_BGR2YCrCb)
        assert face_pixels(ycc, masks.core) is masks.core


def _face_patch(astro: Astronaut) -> tuple[np.ndarray, np.ndarray]:
    """The astronaut's face with a margin, and the hull of her landmarks in it."""
    x0, y0 = np.floor(astro.landmarks.min(axis=0)).astype(int) - 10
    x1, y1 = np.ceil(astro.landmarks.max(axis=0)).astype(int) + 10
    patch = np.ascontiguousarray(astro.image[y0:y1, x0:x1])
    return patch, hull_mask(astro.landmarks - np.array([x0, y0], np.float32), patch.shape[:2], grow=-3)


@pytest.mark.parametrize("sigma", [0.6, 0.9, 1.3, 1.8, 2.6])
@pytest.mark.parametrize("ratio", [1.0, 1.3])
def test_a_sharper_patch_is_softened_to_the_targets_detail(astro, sigma, ratio):
    # The target is the same face, softer (a video frame of it); the source keeps its detail.
    patch, mask = _face_patch(astro)
    target = cv2.GaussianBlur(patch, (0, 0), sigma)
    assert detail(patch, mask) > 1.2 * ratio * detail(target, mask)
    soft = match_detail(patch, target, mask, ratio)
    assert soft.shape == patch.shape and soft.dtype == np.uint8
    assert 0.9 <= detail(soft, mask) / (ratio * detail(target, mask)) <= 1.05
    # Softened like the target, not otherwise changed: nearer the target than the patch was,
    # with the patch's mean colour.
    def off(image: np.ndarray) -> float:
        return float(np.abs(image.astype(np.float32) - target)[mask > 0].mean())
    if ratio == 1.0:
        assert off(soft) < 0.6 * off(patch)
    assert np.abs(soft.mean(axis=(0, 1)) - patch.mean(axis=(0, 1))).max() < 0.5


def test_the_softening_follows_the_target_smoothly(astro):
    # A face whose sharpness changes a little from frame to frame must get a swap whose
    # sharpness changes a little too: no jump where one blur gives way to the next.
    patch, mask = _face_patch(astro)
    targets = [cv2.GaussianBlur(patch, (0, 0), s) for s in np.linspace(0.7, 2.4, 24)]
    got = np.array([detail(match_detail(patch, t, mask), mask) for t in targets])
    goal = np.array([detail(t, mask) for t in targets])
    assert np.all(np.diff(got) < 0)  # softer targets, softer swaps, at every step
    steps, goal_steps = -np.diff(got), -np.diff(goal)
    assert np.all(steps < 2.0 * goal_steps + 0.05)


@pytest.mark.parametrize("ratio", [1.0, 0.0])
def test_a_patch_no_sharper_than_the_target_is_kept_as_it_is(astro, ratio):
    patch, mask = _face_patch(astro)
    soft = cv2.GaussianBlur(patch, (0, 0), 1.2)
    assert match_detail(soft, patch, mask, 1.0) is soft  # never sharpened
    assert match_detail(patch, soft, np.zeros_like(mask), 1.0) is patch  # no pixels to measure
    if ratio == 0.0:
        assert match_detail(patch, soft, mask, ratio) is patch  # switched off


@pytest.mark.parametrize("amount", [1.0, 0.0])
def test_the_pasted_face_takes_a_soft_frames_detail(astro, source, amount):
    # A soft (out of focus, low resolution) frame: the swap pasted into it is as soft as the
    # face it replaces with swap.detail 1, as sharp as the source photo with 0.
    frame, points = move(astro, similarity(angle=8, scale=1.1))
    frame = cv2.GaussianBlur(frame, (0, 0), 1.6)
    face = face_of(points)
    swapper = ClassicalSwapper(ClassicalOptions(detail=amount))
    result = swapper.forward(frame, face, source)
    x0, y0, x1, y1 = result.region
    inner = hull_mask(region_points(points, result), (y1 - y0, x1 - x0), grow=-6)
    before = detail(frame[y0:y1, x0:x1], inner)
    out = frame.copy()
    swapper.paste(out, face, result)
    after = detail(out[y0:y1, x0:x1], inner)
    if amount:
        assert 0.85 <= after / before <= 1.1
    else:
        assert after > 1.5 * before


def _side_light(image: np.ndarray, dark: float, bright: float) -> np.ndarray:
    """`image` lit from the right: a luma offset from `dark` (left edge) to `bright` (right)."""
    ramp = np.linspace(dark, bright, image.shape[1], dtype=np.float32)[None, :, None]
    return np.clip(image.astype(np.float32) + ramp, 0, 255).round().astype(np.uint8)


def _thirds(image: np.ndarray, mask: np.ndarray) -> tuple[float, float]:
    """Mean luma of the mask's left and right thirds."""
    luma = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY).astype(np.float32)
    xs = np.flatnonzero(mask.any(axis=0))
    cut = np.linspace(xs[0], xs[-1] + 1, 4).astype(int)
    left, right = np.zeros_like(mask), np.zeros_like(mask)
    left[:, cut[0]:cut[1]], right[:, cut[2]:cut[3]] = mask[:, cut[0]:cut[1]], mask[:, cut[2]:cut[3]]
    return float(luma[left > 0].mean()), float(luma[right > 0].mean())


@pytest.mark.parametrize("weight", [0.5, 1.0])
def test_shading_takes_the_targets_light_and_keeps_the_patchs_detail(astro, weight):
    patch, mask = _face_patch(astro)
    target = _side_light(patch, -60.0, 30.0)  # the same face, lit from the right
    left, right = _thirds(patch, mask)
    t_left, t_right = _thirds(target, mask)
    shaded = match_shading(patch, target, mask, sigma=8.0, weight=weight)
    s_left, s_right = _thirds(shaded, mask)
    # The broad light moves `weight` of the way to the target's, side by side.
    assert s_left - left == pytest.approx(weight * (t_left - left), abs=4.0)
    assert s_right - right == pytest.approx(weight * (t_right - right), abs=4.0)
    # The features stay the patch's: its fine detail, and one offset for B, G and R (hues kept).
    assert detail(shaded, mask) == pytest.approx(detail(patch, mask), rel=0.1)
    inner = cv2.erode(mask, np.ones((9, 9), np.uint8)) > 0
    unclipped = inner & (patch.min(axis=2) > 70) & (patch.max(axis=2) < 180)
    offsets = shaded.astype(int)[unclipped] - patch.astype(int)[unclipped]
    assert np.abs(offsets - offsets.mean(axis=1, keepdims=True)).max() <= 1


def test_shading_is_the_difference_of_the_two_lumas_normalised_blurs(astro):
    # By definition: each luma blurred over the mask and divided by the mask's own blur, the
    # target's minus the patch's. The code blurs their difference once (the blur is linear),
    # at half size for a sigma this large: the same picture to within a level or two on the
    # mask and as far past it as a blend's soft edge reaches.
    patch, mask = _face_patch(astro)
    target = _side_light(patch, -60.0, 30.0)
    inside = (mask > 0).astype(np.float32)
    norm = np.maximum(cv2.GaussianBlur(inside, (0, 0), 8.0), 1e-3)

    def lowpass(image):  # noqa: ANN001, ANN202
        luma = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY).astype(np.float32)
        return cv2.GaussianBlur(luma * inside, (0, 0), 8.0) / norm

    offset = 0.5 * (lowpass(target) - lowpass(patch))
    expected = np.clip(patch.astype(np.float32) + offset[..., None], 0, 255) + 0.5
    shaded = match_shading(patch, target, mask, sigma=8.0, weight=0.5)
    off = np.abs(shaded.astype(int) - expected.astype(np.uint8).astype(int)).max(axis=2)
    near = cv2.dilate(mask, np.ones((17, 17), np.uint8)) > 0  # the mask and 8 px (a sigma) past it
    assert off[near].max() <= 2 and off[near].mean() < 0.2, (off[near].max(), off[near].mean())
    assert not np.array_equal(shaded, patch)


def test_shading_off_or_without_pixels_keeps_the_patch(astro):
    patch, mask = _face_patch(astro)
    target = _side_light(patch, -60.0, 30.0)
    assert match_shading(patch, target, mask, sigma=8.0, weight=0.0) is patch
    assert match_shading(patch, target, np.zeros_like(mask), sigma=8.0, weight=1.0) is patch


def _turned(points: np.ndarray, squeeze: float) -> np.ndarray:
    """The landmarks of a face turned to its left: the half right of the nose tip squeezed."""
    out = points.copy()
    nose = out[30, 0]
    right = out[:, 0] > nose
    out[right, 0] = nose + squeeze * (out[right, 0] - nose)
    return out


@pytest.mark.parametrize("turned", [True, False])
def test_a_turned_face_takes_the_frames_side_light_and_a_frontal_one_does_not(
        astro, source, turned):
    # A frontal source photo swapped onto a face in side light: on a turned face the swap
    # takes the target's light and shade (swap.shading); a frontal face's swap is left as is.
    frame, points = move(astro, similarity(scale=1.1, shift=(10, 20)))
    frame = _side_light(frame, -70.0, 40.0)
    if turned:
        points = _turned(points, 0.2)
    assert (face_turn(points) > 0.7) == turned and (face_turn(points) < 0.3) != turned
    face = face_of(points)
    outs = {}
    for shading in (0.0, 0.5):
        swapper = ClassicalSwapper(ClassicalOptions(shading=shading))
        result = swapper.forward(frame, face, source)
        out = frame.copy()
        swapper.paste(out, face, result)
        outs[shading] = out
    if not turned:
        assert np.array_equal(outs[0.0], outs[0.5])
        return
    inner = hull_mask(points, frame.shape[:2], grow=-4)
    t_left, t_right = _thirds(frame, inner)
    plain, shaded = _thirds(outs[0.0], inner), _thirds(outs[0.5], inner)
    # The target's near side is far brighter than its far side; the shaded swap takes a
    # good part of that step, the plain swap (the source's even light) much less of it.
    step, plain_step, shaded_step = t_right - t_left, plain[1] - plain[0], shaded[1] - shaded[0]
    assert shaded_step > plain_step + 0.15 * step


@pytest.mark.parametrize("contrast", [0.3, 0.5, 0.8])
def test_a_flat_target_keeps_most_of_the_sources_features(astro, contrast):
    # A soft, flatly lit target face (a small or turned face in video) has a fraction of a
    # photo's luma spread. The transfer brings the swap's spread down toward it, but never
    # below 0.7 of the source's own: the features that carry identity stay.
    patch = astro.image[150:300, 180:330]
    mask = np.full(patch.shape[:2], 255, np.uint8)
    mean = patch.reshape(-1, 3).mean(axis=0)
    flat = np.clip((patch - mean) * contrast + mean, 0, 255).astype(np.uint8)
    def luma(img: np.ndarray) -> float:
        return float(cv2.cvtColor(img, cv2.COLOR_BGR2GRAY).astype(np.float64).std())

    out = transfer_color(patch, flat, mask)
    assert luma(out) >= 0.69 * luma(patch)
    assert luma(out) == pytest.approx(max(contrast, 0.7) * luma(patch), rel=0.05)


@pytest.mark.parametrize("width", [36, 42, 56])
def test_a_small_face_is_warped_with_several_samples_a_pixel(astro, source, monkeypatch, width):
    # The astronaut shrunk to a small face and swapped with herself: the warp is her own
    # picture shrunk, so the best it can give is that picture area-averaged. Several bilinear
    # samples a pixel, averaged, come closer to it than one, and leave no dark rim at the
    # warp's edge.
    scale = width / face_size(astro.landmarks)
    frame = cv2.resize(astro.image, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    points = ((astro.landmarks + 0.5) * scale - 0.5).astype(np.float32)
    face = face_of(points)
    errors, edges = {}, {}
    for supersample in (0.0, classical_swapper.SUPERSAMPLE_FACE):
        monkeypatch.setattr(classical_swapper, "SUPERSAMPLE_FACE", supersample)
        result = ClassicalSwapper(ClassicalOptions(shape=0.0)).forward(frame, face, source)
        x0, y0, x1, y1 = result.region
        target = frame[y0:y1, x0:x1].astype(np.float64)
        inner = hull_mask(points - (x0, y0), target.shape[:2], grow=-1) > 0
        errors[supersample] = np.abs(result.patch.astype(np.float64) - target)[inner].mean()
        rim = (result.valid > 0) & (cv2.erode(result.valid, np.ones((3, 3), np.uint8)) == 0)
        edges[supersample] = result.patch[rim].mean()
    one, several = errors[0.0], errors[classical_swapper.SUPERSAMPLE_FACE]
    assert several < 0.5 * one, f"error against the shrunk picture {one:.2f} -> {several:.2f}"
    assert edges[classical_swapper.SUPERSAMPLE_FACE] > edges[0.0] - 4


def test_a_squeezed_half_face_is_sampled_over_each_pixel(astro, monkeypatch):
    # A textured picture on the astronaut's points, and the same picture with the half of the
    # face left of the nose squeezed to a fifth of its width (a face turned away): the best a
    # warp of the first onto the second's points can give there is the squeeze itself, area
    # averaged. One bilinear sample a pixel skips four source pixels in five and aliases (a
    # dotted line down a turned face's far cheek); the squeezed triangles, sampled over each
    # pixel, come much closer. The rest of the warp is left exactly as it was.
    from engines.geometry import piecewise_affine

    rng = np.random.default_rng(3)
    h, w = astro.image.shape[:2]
    texture = cv2.GaussianBlur(rng.integers(0, 256, (2 * h, 2 * w, 3), dtype=np.uint8), (0, 0), 0.7)
    lm = ((astro.landmarks + 0.5) * 2 - 0.5).astype(np.float32)  # a 180 px face: one sample a pixel
    nose = int(round(float(lm[30, 0])))
    narrow = nose // 5
    frame = np.hstack([cv2.resize(texture[:, :nose], (narrow, 2 * h), interpolation=cv2.INTER_AREA),
                       texture[:, nose:]])
    points = lm.copy()
    left = points[:, 0] < nose - 0.5
    points[left, 0] = (points[left, 0] + 0.5) * narrow / nose - 0.5
    points[~left, 0] -= nose - narrow
    options = ClassicalOptions(shape=0.0, forehead=0.0)
    source = ClassicalSwapper(options).prepare_source(texture, lm)
    results = {}
    for name, squeeze_from in (("one sample", np.inf), ("resampled", piecewise_affine.SQUEEZE_FROM)):
        monkeypatch.setattr(piecewise_affine, "SQUEEZE_FROM", squeeze_from)
        results[name] = ClassicalSwapper(options).forward(frame, face_of(points), source)
    x0, y0, x1, y1 = results["resampled"].region
    target = frame[y0:y1, x0:x1].astype(np.float64)
    inner = hull_mask(points - (x0, y0), target.shape[:2], grow=-2) > 0
    nose_x = int(points[30, 0]) - x0
    squeezed, wide = inner.copy(), inner.copy()
    squeezed[:, nose_x - 1:] = False
    wide[:, :nose_x + 1] = False
    errors = {name: np.abs(r.patch - target)[squeezed].mean() for name, r in results.items()}
    assert errors["resampled"] < 0.75 * errors["one sample"], errors
    changed = (results["resampled"].patch != results["one sample"].patch).any(axis=2)
    assert changed[squeezed].mean() > 0.5
    # The triangles wholly past the nose are not squeezed: their pixels stay as they were.
    past = source.triangles[(points[source.triangles][:, :, 0] > points[30, 0] + 1).all(axis=1)]
    kept = np.zeros(changed.shape, np.uint8)
    for corners in points[past] - (x0, y0):
        cv2.fillConvexPoly(kept, np.round(corners).astype(np.int32), 255)
    kept = cv2.erode(kept, np.ones((3, 3), np.uint8)) > 0
    assert kept.sum() > 0.5 * wide.sum()
    assert not changed[kept].any()
    assert np.array_equal(results["resampled"].valid, results["one sample"].valid)


def test_a_crease_is_drawn_from_the_surfaces_beside_it(monkeypatch):
    # A triangle folded to less than half a pixel high (the cheek between the nose and the
    # mouth of a face turned away, a mouth's corner) is a crease, not a squeezed surface.
    # Its one sample a pixel jumps across a source triangle tens of pixels wide: dots darker
    # or brighter than everything around them (a dotted line down the face); the mean over
    # its whole source drew a line. Its pixels now lie within what their neighbours on the
    # surfaces either side show, and nothing off the crease changes.
    from engines.geometry import piecewise_affine
    from engines.geometry.piecewise_affine import prepare_mesh

    rng = np.random.default_rng(5)
    image = cv2.GaussianBlur(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), (0, 0), 0.7)
    corners = np.array([[8, 8], [56, 8], [56, 56], [8, 56]], np.float32)
    mesh = prepare_mesh(image, corners, np.array([[0, 2, 3], [0, 1, 2]], np.int32))
    dst = corners.copy()
    dst[1] = (32.1, 31.9)  # the second triangle (drawn last) folded onto the diagonal: 0.1 px high
    one, _ = forward_warp(mesh, dst, (64, 64))
    labels = np.zeros((64, 64), np.uint8)
    for tid, tri in enumerate(mesh.triangles, 1):
        cv2.fillConvexPoly(labels, np.round(dst[tri] * 16).astype(np.int32), tid, cv2.LINE_8, 4)
    crease = labels == 2
    beside = (labels == 1).astype(np.uint8)
    assert crease.sum() > 30
    patches = {}
    for name, height in (("crease rule", piecewise_affine.MIN_SQUEEZED_HEIGHT), ("none", 0.0)):
        monkeypatch.setattr(piecewise_affine, "MIN_SQUEEZED_HEIGHT", height)
        patches[name], _ = forward_warp(mesh, dst, (64, 64), squeezed=True)

    def outliers(patch: np.ndarray) -> float:
        """The share of crease pixels more than 2 levels outside the range of their 3 x 3
        neighbours off the crease (in any channel)."""
        big = np.where(beside[..., None] > 0, patch, 0).astype(np.int16)
        small = np.where(beside[..., None] > 0, patch, 255).astype(np.int16)
        hi = cv2.dilate(big, np.ones((3, 3), np.uint8))
        lo = cv2.erode(small, np.ones((3, 3), np.uint8))
        has = cv2.dilate(beside, np.ones((3, 3), np.uint8)) > 0
        where = crease & has
        p = patch.astype(np.int16)
        out = ((p > hi + 2) | (p < lo - 2)).any(axis=2)
        return float(out[where].mean())

    assert outliers(one) > 0.2  # the dots
    assert outliers(patches["crease rule"]) == 0.0
    assert not np.array_equal(patches["none"][crease], patches["crease rule"][crease])
    assert np.array_equal(patches["crease rule"][~crease], one[~crease])


def test_colour_transfer_without_pixels_is_a_no_op(astro):
    patch = astro.image[:40, :40]
    assert transfer_color(patch, patch, np.zeros((40, 40), np.uint8)) is patch


# Faces touching or leaving the frame: (frame size, shift applied to the astronaut).
EDGES = [
    pytest.param((260, 200), (-150, -40), id="touching-left-top"),
    pytest.param((512, 512), (-200, 0), id="half-off-left"),
    pytest.param((512, 512), (280, 0), id="half-off-right"),
    pytest.param((512, 512), (0, -150), id="half-off-top"),
    pytest.param((400, 220), (0, 60), id="half-off-bottom"),
    pytest.param((300, 200), (-195, -110), id="corner"),
]


@pytest.mark.parametrize("blend", ["feather", "poisson"])
@pytest.mark.parametrize(("size", "shift"), EDGES)
def test_faces_at_the_frame_edge_do_not_raise(astro, source, blend, size, shift):
    frame, points = move(astro, similarity(shift=shift), size=size)
    frame[:] = (frame * 0.8).astype(np.uint8)  # the target differs from the source
    before = frame.copy()
    swapper = ClassicalSwapper(ClassicalOptions(blend=blend))
    face = face_of(points)
    result = swapper.forward(frame, face, source)
    assert result is not None
    x0, y0, x1, y1 = result.region
    assert 0 <= x0 < x1 <= size[0] and 0 <= y0 < y1 <= size[1]
    swapper.paste(frame, face, result)
    assert np.any(frame != before)


def test_poisson_with_the_hull_filling_the_whole_frame(astro, source):
    # The frame is exactly the landmarks' box: the mask touches every border.
    lo = np.floor(astro.landmarks.min(axis=0)).astype(int)
    hi = np.ceil(astro.landmarks.max(axis=0)).astype(int)
    frame = (astro.image[lo[1]:hi[1], lo[0]:hi[0]] * 0.7).astype(np.uint8)
    points = astro.landmarks - lo.astype(np.float32)
    swapper = ClassicalSwapper(ClassicalOptions(blend="poisson"))
    face = face_of(points)
    result = swapper.forward(frame, face, source)
    assert result is not None and result.region == (0, 0, frame.shape[1], frame.shape[0])
    before = frame.copy()
    swapper.paste(frame, face, result)
    assert np.any(frame != before)


@pytest.mark.parametrize("points", [
    pytest.param(lambda p: p + (2000, 0), id="off-frame"),
    pytest.param(lambda p: p - (0, 1000), id="off-frame-above"),
    pytest.param(lambda p: np.full_like(p, 200.0), id="collapsed"),
    pytest.param(lambda p: np.where(np.arange(68)[:, None] == 3, np.nan, p), id="nan"),
    pytest.param(lambda p: p[:5], id="too-few"),
])
def test_degenerate_targets_give_none(astro, source, points):
    swapper = ClassicalSwapper(ClassicalOptions())
    lm = points(astro.landmarks.copy()).astype(np.float32)
    assert swapper.forward(astro.image, Face(box=(0, 0, 1, 1), landmarks=lm), source) is None
    assert swapper.skipped == 1 and swapper.calls == 0


@pytest.mark.parametrize("squash", [0.02, 0.03, 0.2])
def test_thin_triangles_sample_inside_their_source_triangle(astro, source, squash):
    # A face squashed sideways (a head seen edge-on) has thin triangles whose inverse maps
    # magnify rasterisation slack many times; no sample may land outside the source crop
    # (which the constant border would show as black).
    points = place_forehead(astro.landmarks, source.landmarks)
    points[:, 0] = (points[:, 0] - points[:, 0].min()) * squash + 3
    points[:, 1] += 3 - points[:, 1].min()
    size = tuple(int(v) for v in points.max(axis=0) + 6)
    patch, valid = forward_warp(source.levels[0], points, size)
    assert np.count_nonzero(valid) > 100
    assert (patch[valid > 0].max(axis=1) > 0).all()


def test_paste_rejects_a_mismatched_result(astro, source):
    swapper = ClassicalSwapper(ClassicalOptions())
    face = face_of(astro.landmarks)
    result = swapper.forward(astro.image, face, source)
    bad = SwapResult(region=(0, 0, 10, 10), patch=result.patch, valid=result.valid)
    with pytest.raises(EngineError):
        swapper.paste(astro.image.copy(), face, bad)


@pytest.mark.parametrize("resample", [True, False])
def test_resample_switch_decides_the_squeezed_sampling(astro, monkeypatch, resample):
    """`swap.resample` (off in `fast`): a face turned away has triangles that squeeze the
    source; with it on they are sampled several times a pixel, off once (the cheap warp)."""
    frame, points = move(astro, similarity())
    turned = points.copy()
    nose_x = turned[30, 0]
    far = turned[:, 0] > nose_x
    turned[far, 0] = nose_x + 0.15 * (turned[far, 0] - nose_x)  # the far half a seventh as wide
    seen = []

    def recording(*args, **kwargs):
        seen.append(kwargs.get("squeezed"))
        return forward_warp(*args, **kwargs)

    monkeypatch.setattr(classical_swapper, "forward_warp", recording)
    patches = {}
    for on in (resample, not resample):
        swapper = ClassicalSwapper(ClassicalOptions(resample=on))
        src = swapper.prepare_source(astro.image, astro.landmarks)
        patches[on] = swapper.forward(frame, face_of(turned), src).patch
    assert seen == [resample, not resample]
    # The squeezed half really is sampled differently (so the switch is not a no-op here).
    assert np.count_nonzero(np.abs(patches[True].astype(int) - patches[False].astype(int)).max(axis=2) > 8) > 20


def test_a_faces_skip_leaves_out_its_steps_as_the_config_would(astro):
    """A live run that falls behind sheds steps through each face's `skip`: the result is
    the one the config without those steps gives, and the other steps still run."""
    from dataclasses import replace

    frame, points = move(astro, similarity(angle=8, scale=0.9), size=(640, 480))
    frame[:, :, 2] //= 2  # a tinted target: the colour steps have work to do
    # Turned: shading has weight on it (it leaves a frontal face as it is).
    turned = points.copy()
    far = turned[:, 0] > turned[30, 0]
    turned[far, 0] = turned[30, 0] + 0.5 * (turned[far, 0] - turned[30, 0])
    face = face_of(turned)
    steps = {"resample", "bands", "shading", "lip_color", "detail"}
    full = ClassicalOptions(shading=1.0, fine_feather=0.03)
    without = ClassicalOptions(shading=0.0, detail=0.0, lip_color=False, resample=False, fine_feather=0.0)

    def swapped(options: ClassicalOptions, f) -> np.ndarray:
        swapper = ClassicalSwapper(options)
        src = swapper.prepare_source(astro.image, astro.landmarks)
        out = frame.copy()
        swapper.paste(out, f, swapper.forward(out, f, src))
        return out

    shed = swapped(full, replace(face, skip=frozenset(steps)))
    assert np.array_equal(shed, swapped(without, face))
    assert not np.array_equal(shed, swapped(full, face))  # the steps do change this face
    assert set(ClassicalSwapper.optional_steps) == steps


def test_a_followed_faces_colour_transfer_is_measured_every_n_frames(astro, source, monkeypatch):
    # swap.color_every 3: a face with a track (its memo) has its colour transfer measured on
    # every third of its frames, counted from its track id so the faces of a frame take turns,
    # and the matrix last measured applied between; a face without a track is measured each time.
    frames = []
    for k in range(7):
        frame, points = move(astro, similarity(angle=2.0 * k, shift=(3.0 * k, 0.0)), size=(640, 480))
        frame[:, :, 0] = np.clip(frame[:, :, 0].astype(np.int16) + 6 * k, 0, 255).astype(np.uint8)  # light changes
        frames.append((frame, points))
    measured: list[int] = []
    real = classical_swapper.color_matrix

    def counting(patch, target, mask):  # noqa: ANN001, ANN202
        measured.append(len(measured))
        return real(patch, target, mask)

    monkeypatch.setattr(classical_swapper, "color_matrix", counting)

    def run(every: int, memo: dict | None, track_id: int) -> list[np.ndarray]:
        swapper = ClassicalSwapper(ClassicalOptions(color_every=every))
        out = []
        for frame, points in frames:
            face = Face(box=face_of(points).box, landmarks=points, track_id=track_id, memo=memo)
            result = swapper.forward(frame, face, source)
            pasted = frame.copy()
            swapper.paste(pasted, face, result)
            out.append(pasted)
        return out

    each = run(1, {}, 4)
    assert len(measured) == 7
    measured.clear()
    memo: dict = {}
    kept = run(3, memo, 4)  # 4 % 3 = 1: measured on its frames 2 and 5, and first on frame 0
    assert len(measured) == 3 and memo["color_n"] == 1 + 7
    for k in (0, 2, 5):
        assert np.array_equal(kept[k], each[k])
    assert not np.array_equal(kept[1], each[1])  # the light moved on: frame 0's matrix applied
    measured.clear()
    no_track = run(3, None, -1)
    assert len(measured) == 7 and all(np.array_equal(a, b) for a, b in zip(no_track, each))
    with pytest.raises(ValueError, match="swap.color_every must be a whole number from 1 to 30, got 0"):
        ClassicalOptions(color_every=0)


def test_a_followed_faces_lips_and_softening_are_measured_with_its_colour(astro, source, monkeypatch):
    # The lips' colour shift and the softening (detail) are colour statistics too: with
    # swap.color_every 2 a followed face's are measured on the frames its colour transfer is,
    # and the last ones applied between. At 1 the paste is match_lips and match_detail as they are.
    frames = [move(astro, similarity(angle=2.0 * k, shift=(3.0 * k, 0.0)), size=(640, 480)) for k in range(6)]
    calls: dict[str, list[int]] = {"color": [], "lips": [], "detail": []}
    now = [0]  # the frame being pasted
    for name, key in (("color_matrix", "color"), ("lip_shift", "lips"), ("detail_mix", "detail")):
        real = getattr(classical_swapper, name)

        def counting(*args, _real=real, _key=key):  # noqa: ANN002, ANN202
            calls[_key].append(now[0])
            return _real(*args)

        monkeypatch.setattr(classical_swapper, name, counting)

    def run(every: int, memo: dict | None) -> list[np.ndarray]:
        swapper = ClassicalSwapper(ClassicalOptions(color_every=every, lip_color=True, detail=1.0))
        out = []
        for k, (frame, points) in enumerate(frames):
            now[0] = k
            face = Face(box=face_of(points).box, landmarks=points, track_id=3, memo=memo)
            pasted = frame.copy()
            swapper.paste(pasted, face, swapper.forward(frame, face, source))
            out.append(pasted)
        return out

    every = run(2, {})
    assert calls["color"] == [0, 1, 3, 5]  # its first frame, then every other (counted from 3 % 2 = 1)
    assert calls["lips"] == calls["color"] and calls["detail"] == calls["color"]
    for key in calls:
        calls[key].clear()
    each = run(1, {})
    assert len(calls["lips"]) == len(calls["detail"]) == 6
    for k in range(6):  # the measured frames as at 1; frames 2 and 4 apply frames 1 and 3's
        assert np.array_equal(every[k], each[k]) == (k not in (2, 4)), k
    # At 1, the paste's lips and softening are match_lips' and match_detail's.
    frame, points = frames[0]
    lips = lip_band(points, frame.shape)
    assert lips is not None
    patch = cv2.GaussianBlur(frame, (0, 0), 0.5)
    alpha = np.full(frame.shape[:2], 255, np.uint8)
    assert np.array_equal(match_lips(patch, frame, points, alpha),
                          shift_lips(patch, lips, lip_shift(patch, frame, lips, alpha)))
    mask = np.zeros(frame.shape[:2], np.uint8)
    cv2.fillConvexPoly(mask, cv2.convexHull(points.astype(np.int32)), 255)
    sharp = cv2.addWeighted(frame, 2.0, patch, -1.0, 0.0)
    assert detail_mix(sharp, patch, mask) is not None
    assert np.array_equal(match_detail(sharp, patch, mask), soften_by(sharp, detail_mix(sharp, patch, mask)))



def test_the_pixels_of_flagged_triangles_in_numpys_order():
    # The squeezed sampling finds its pixels with a table lookup and OpenCV's search: the
    # same pixels, in the order numpy's boolean indexing gives them (row by row).
    rng = np.random.default_rng(5)
    labels = cv2.resize(rng.integers(0, 120, (9, 7)).astype(np.uint8), (70, 90), interpolation=cv2.INTER_NEAREST)
    flags = rng.random(119) < 0.2
    mine = np.zeros(256, bool)
    mine[1:120] = flags
    ys, xs = _nonzero(_pixels_of(labels, flags))
    want_y, want_x = np.nonzero(mine[labels])
    assert len(ys) > 0 and np.array_equal(ys, want_y) and np.array_equal(xs, want_x)
    assert ys.dtype == np.intp
    none_y, none_x = _nonzero(_pixels_of(labels, np.zeros(119, bool)))
    assert none_y.size == 0 and none_x.size == 0
