"""Each face swapped at a cadence and carried between (issue 56): a swap made for a face's
landmarks on one frame, warped onto its landmarks on a later one (engines.geometry.carry),
lands where the face now is and tears nothing, even after a 60-degree turn or a mouth opened
wide; the carry of a neural swap follows the face; faces that cross, enter, leave or change
source never get another's swap; files swap on fixed frames, live runs swap off the frame
path and never wait; and the cadence is configured, reported and paced."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import av
import cv2
import numpy as np
import numpy.typing as npt
import pytest

from engines.backends.base import RuntimeOptions
from engines.backends.ort import OrtRuntime
from engines.classic.swapper import ClassicalSwap, ClassicalSwapper
from engines.face import Face, SwapResult
from engines.geometry.carry import carry_warp, ring
from engines.geometry.face_align import as_kps5, estimate_norm
from engines.geometry.measures import face_turn, mouth_open_ratio
from engines.geometry.piecewise_affine import prepare_mesh, prepare_triangulation, warp_maps
from engines.models.inswapper import InSwapper
from engines.protocols import CarrySwapper
from stream.cli.main import main
from stream.config import load_config
from stream.errors import ConfigError
from stream.job.cadence import AdaptiveCadence
from stream.runtime.metrics import Metrics
from stream.stages.carry import BackgroundSwaps, CarriedSwapper, Cut, Made, SwapStore, moved_past_bound
from tests.fixtures import make_clip, make_inswapper, probe, window_frame
from tools.cost_models import mean_face_68

# ---- a synthetic face: 68 points on a 3-D head, turned, its mouth opened, moved ----

BOX_FACE = mean_face_68().astype(np.float64)  # dlib's order, box units: x, y in [0, 1]
CROP = 128  # inswapper's crop (arcface_128 template)
FRAME_W, FRAME_H = 360, 320
DEPTH = 0.35  # the head's depth over its width
NOSE = 0.1  # how far the nose stands out of the face (box units), at its tip (30)
OUTLINE = np.r_[0:4, 13:17]  # the jaw's sides: on the head's outline, whichever way it turns


def face_points(yaw: float = 0.0, mouth: float = 0.0, roll: float = 0.0, scale: float = 1.0,
                centre: tuple[float, float] = (180.0, 150.0), size: float = 120.0) -> npt.NDArray[np.float32]:
    """The face's 68 points in the frame: the head turned `yaw` degrees about the vertical axis
    (orthographic projection), the mouth opened by `mouth` box units (the lower lip and the jaw
    under it dropped), then rolled, scaled and placed.

    The face lies on a half ellipse from side to side, DEPTH deep for its width, the nose
    standing out of it; the jaw's sides stay on the head's outline as it turns, as a landmark
    predictor puts them, so the far cheek narrows toward the nose: a 60-degree turn reads 0.9
    in `face_turn` (1: the far cheek gone)."""
    p = BOX_FACE.copy()
    if mouth:
        p[55:60, 1] += mouth  # outer lower lip
        p[65:68, 1] += mouth  # inner lower lip
        k = np.arange(3, 14)
        p[k, 1] += mouth * np.cos((k - 8) / 6 * np.pi / 2)  # the jaw, the chin most
    x, y = p[:, 0] - 0.5, p[:, 1] - 0.55
    z = 0.5 * DEPTH * np.sqrt(np.clip(1.0 - (2.0 * x) ** 2, 0.0, 1.0))
    z[27:31] += np.linspace(0.3, 1.0, 4) * NOSE
    z[31:36] += 0.5 * NOSE
    t = np.radians(yaw)
    turned = x * np.cos(t) + z * np.sin(t)
    turned[OUTLINE] = x[OUTLINE] * np.sqrt(np.cos(t) ** 2 + (DEPTH * np.sin(t)) ** 2)
    r = np.radians(roll)
    xy = np.stack([turned * np.cos(r) - y * np.sin(r), turned * np.sin(r) + y * np.cos(r)], axis=1)
    return (xy * size * scale + np.asarray(centre)).astype(np.float32)


THEN = face_points()
MOVES = {
    "moved, grown and rolled": face_points(roll=12.0, scale=1.15, centre=(205.0, 140.0)),
    "turned 60 degrees": face_points(yaw=60.0),
    "turned -60 degrees": face_points(yaw=-60.0),
    "mouth opened wide": face_points(mouth=0.22),
}


def test_the_synthetic_moves_are_what_they_say() -> None:
    assert face_turn(THEN) < 0.05 and mouth_open_ratio(THEN) < 0.2
    assert face_turn(MOVES["turned 60 degrees"]) > 0.85 and face_turn(MOVES["turned -60 degrees"]) > 0.85
    assert mouth_open_ratio(MOVES["mouth opened wide"]) > 0.4
    for now in MOVES.values():
        assert moved_past_bound(THEN, now) == (now is not MOVES["moved, grown and rolled"])


def crop_points(points: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """The points in the face's aligned 128 px crop, as InSwapper.cut_face / carry_many put them."""
    M = estimate_norm(as_kps5(points), CROP, "arcface_128")
    return cv2.transform(points.reshape(-1, 1, 2), M).reshape(-1, 2)


def crop_carry(image: npt.NDArray[np.generic], then: npt.NDArray[np.float32], now: npt.NDArray[np.float32],
               planes: tuple[npt.NDArray[np.generic], ...] = ()
               ) -> tuple[npt.NDArray[np.generic], npt.NDArray[np.uint8], list[npt.NDArray[np.generic]]]:
    """A crop made for the crop points `then` carried onto `now`, with the anchors on the
    crop's border that InSwapper.carry_many adds."""
    anchors = ring(-1.0, -1.0, float(CROP), float(CROP))
    out = carry_warp(image, np.concatenate([then, anchors]), np.concatenate([now, anchors]), (CROP, CROP), planes)
    assert out is not None
    return out


# ---- landmarks: where the carried picture shows each point then ----

SEARCH = 6  # px around a point now where the carried picture is searched for it (beyond the 2 px allowed)


def coordinates(size: tuple[int, int]) -> npt.NDArray[np.float32]:
    """A (h, w, 3) float picture whose pixels hold their own coordinates (x, y, 0): carried,
    each pixel says which point of the swap it shows, exactly (the carry's bilinear samples
    of a linear ramp are the ramp), as a marker at each landmark would, to any precision."""
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    return np.dstack([xx, yy, np.zeros_like(xx)])


SHOWN_WITHIN = 0.5  # px of the swap: how close to a point the picture must show it, near its place now


def _closest_on_triangles(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64], c: npt.NDArray[np.float64],
                          p: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """For N triangles (a, b, c: (N, 2) corners) the barycentric weights (N, 3) of each one's
    point closest to `p`, and that point's distance to `p` (N,)."""
    e1, e2, d = b - a, c - a, p - a
    det = e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]
    safe = np.where(np.abs(det) > 1e-12, det, 1.0)
    u = (d[:, 0] * e2[:, 1] - d[:, 1] * e2[:, 0]) / safe
    v = (e1[:, 0] * d[:, 1] - e1[:, 1] * d[:, 0]) / safe
    inside = (np.abs(det) > 1e-12) & (u >= 0) & (v >= 0) & (u + v <= 1)
    weights = np.where(inside[:, None], np.stack([1 - u - v, u, v], axis=1), 0.0)
    dist = np.where(inside, 0.0, np.inf)
    for i, j in ((0, 1), (1, 2), (2, 0)):  # outside: the nearest point of an edge
        corners = (a, b, c)
        s, e = corners[i], corners[j]
        edge = e - s
        t = np.clip(((p - s) * edge).sum(axis=1) / np.maximum((edge * edge).sum(axis=1), 1e-12), 0.0, 1.0)
        gap = np.linalg.norm(s + t[:, None] * edge - p, axis=1)
        better = ~inside & (gap < dist)
        dist = np.where(better, gap, dist)
        w = np.zeros((len(a), 3))
        w[:, i], w[:, j] = 1 - t, t
        weights = np.where(better[:, None], w, weights)
    return weights, dist


def where_shown(shown: npt.NDArray[np.float32], point: npt.NDArray[np.float32], near: npt.NDArray[np.float32]
                ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Where the carried picture `shown` (h, w, 2+: the swap's coordinates at each pixel)
    comes closest to showing the swap's `point`, within SEARCH px of `near`: each 2 x 2
    pixels split in two triangles, the picture linear on each (as it is drawn between its
    pixels), each triangle's place whose coordinates come closest to `point` (N, 2), and how
    close (N,: px of the swap)."""
    h, w = shown.shape[:2]
    x0, y0 = max(int(near[0]) - SEARCH, 0), max(int(near[1]) - SEARCH, 0)
    x1, y1 = min(int(near[0]) + SEARCH + 1, w - 1), min(int(near[1]) + SEARCH + 1, h - 1)
    if x1 <= x0 or y1 <= y0:
        return np.empty((0, 2)), np.empty(0)
    ys, xs = np.mgrid[y0:y1, x0:x1]
    ys, xs = ys.ravel(), xs.ravel()
    places, gaps = [], []
    for corners in (((0, 0), (1, 0), (0, 1)), ((1, 1), (0, 1), (1, 0))):
        at = [np.stack([xs + dx, ys + dy], axis=1) for dx, dy in corners]
        values = [shown[q[:, 1], q[:, 0], :2].astype(np.float64) for q in at]
        weights, gap = _closest_on_triangles(*values, np.asarray(point, np.float64))
        places.append(sum(weights[:, k, None] * at[k] for k in range(3)))
        gaps.append(gap)
    return np.concatenate(places), np.concatenate(gaps)


def landmark_misses(shown: npt.NDArray[np.float32], origin: tuple[int, int], then: npt.NDArray[np.float32],
                    now: npt.NDArray[np.float32]) -> dict[int, tuple[float, float]]:
    """The points that the carried picture `shown` (its top-left at `origin` in `now`'s
    coordinates) does not show (to SHOWN_WITHIN px of the swap) within 2 px of where they are
    now; for each, the nearest place it shows them at and the closest it comes within 2 px.
    (Where the carry folds a turned face's far side, a point may show twice: once near its
    place is what counts.)"""
    misses = {}
    for i, (a, b) in enumerate(zip(then, now)):
        places, gaps = where_shown(shown, a, b - np.asarray(origin, np.float32))
        far = np.linalg.norm(places + np.asarray(origin) - b, axis=1)
        if not ((far <= 2.0) & (gaps <= SHOWN_WITHIN)).any():
            shows = far[gaps <= SHOWN_WITHIN]
            misses[i] = (round(float(shows.min()), 2) if shows.size else np.inf,
                         round(float(gaps[far <= 2.0].min()), 2) if (far <= 2.0).any() else np.inf)
    return misses


@pytest.fixture(scope="module")
def inswapper(tmp_path_factory: pytest.TempPathFactory) -> InSwapper:
    """InSwapper on the synthetic inswapper_128 (its output: the crop times a fixed per-pixel
    gain that the source's latent shapes)."""
    path = make_inswapper(tmp_path_factory.mktemp("carry") / "inswapper.onnx", seed=5, batch=1)
    model = InSwapper(OrtRuntime(path, RuntimeOptions(providers="cpu")))
    model.open()
    return model


def _face(points: npt.NDArray[np.float32], track: int = -1) -> Face:
    lo, hi = points.min(axis=0), points.max(axis=0)
    return Face((float(lo[0]), float(lo[1]), float(hi[0]), float(hi[1])), points, track_id=track)


@pytest.mark.parametrize("move", list(MOVES))
def test_the_carried_crops_landmarks_land_within_2px_of_the_current_ones(move: str) -> None:
    then, now = crop_points(THEN), crop_points(MOVES[move])
    shown = crop_carry(coordinates((CROP, CROP)), then, now)[0]
    assert landmark_misses(shown, (0, 0), then, now) == {}


@pytest.mark.parametrize("move", list(MOVES))
def test_the_classical_carry_puts_the_warps_landmarks_on_the_faces_in_the_frame(move: str) -> None:
    swapper, now = ClassicalSwapper(), MOVES[move]
    region = swapper.face_region((FRAME_H, FRAME_W, 3), THEN)
    assert region is not None
    x0, y0, x1, y1 = region
    # The carry only remaps the warp's patch: a float one carries the coordinates as they are.
    patch = coordinates((x1 - x0, y1 - y0))
    swap = ClassicalSwap(SwapResult(region, patch, np.full(patch.shape[:2], 255, np.uint8)), THEN)  # type: ignore[arg-type]
    result = swapper.carry_many(np.zeros((FRAME_H, FRAME_W, 3), np.uint8), [_face(now)], [swap])[0]
    assert result is not None
    assert landmark_misses(result.patch, result.region[:2], THEN - np.float32([x0, y0]), now) == {}


# ---- no tearing: every pixel covered, the picture as smooth as the map's stretch allows ----

WAVE = (40.0, 50.0)  # px: the texture's periods along x and y
AMPLITUDE = 50.0  # grey levels of each of its two waves
# The texture's largest change over one pixel in any direction (its gradient's largest norm).
TEXTURE_SLOPE = AMPLITUDE * 2 * np.pi * float(np.hypot(1 / WAVE[0], 1 / WAVE[1]))


def texture(size: tuple[int, int]) -> npt.NDArray[np.uint8]:
    """A smooth (h, w, 3) texture: two waves, TEXTURE_SLOPE grey levels a pixel at most."""
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    grey = 128 + AMPLITUDE * np.sin(2 * np.pi * xx / WAVE[0]) + AMPLITUDE * np.sin(2 * np.pi * yy / WAVE[1])
    return np.repeat(np.clip(np.round(grey), 0, 255).astype(np.uint8)[..., None], 3, axis=2)


def local_stretch(then: npt.NDArray[np.float32], now: npt.NDArray[np.float32], size: tuple[int, int]
                  ) -> npt.NDArray[np.float64]:
    """Per pixel of the carried picture, the most its map stretches a step of one pixel into
    the swap (the largest singular value of the affine map of each triangle around the pixel,
    3 x 3): how far apart two neighbouring pixels' samples may lie when the map is continuous.
    The triangles are the carry's own (triangulated on the points now, engines.geometry.carry)."""
    triangles = prepare_triangulation(now)
    _, _, labels, coef = warp_maps(prepare_mesh(np.zeros((1, 1, 3), np.uint8), then, triangles), now, size)
    norms = np.concatenate([[0.0], np.linalg.norm(coef[:, 0:2, :], ord=2, axis=(1, 2))])
    return cv2.dilate(norms[labels].astype(np.float32), np.ones((3, 3), np.uint8)).astype(np.float64)


def tears(picture: npt.NDArray[np.generic], shown: npt.NDArray[np.float32], stretch: npt.NDArray[np.float64],
          inside: npt.NDArray[np.bool_]) -> dict[str, int]:
    """Neighbouring pixels (both `inside`) torn apart: whose samples of the swap (`shown`: its
    coordinates at each pixel) lie further apart than the map allows, or whose texture
    (`picture`) differs by more than the texture's slope over that reach (plus 3 grey levels:
    bilinear sampling and rounding).

    What the map allows: one pixel's step, stretched as much as the triangles around the two
    pixels stretch it (`stretch`), doubled, because each pixel of a rasterised triangle may lie
    up to half a pixel past its edge and sample that far past its corner in the swap. A
    continuous map stays within it; a seam, where neighbours sample parts of the swap that do
    not meet, does not."""
    out = {"map": 0, "texture": 0}
    grey = picture[..., 0].astype(np.float64)
    for axis in (0, 1):
        a: list[slice] = [slice(None), slice(None)]
        b: list[slice] = [slice(None), slice(None)]
        a[axis], b[axis] = slice(0, -1), slice(1, None)
        both = inside[tuple(a)] & inside[tuple(b)]
        reach = 2.0 * np.maximum(stretch[tuple(a)], stretch[tuple(b)]) + 0.1
        step = np.linalg.norm(shown[tuple(a)][..., :2] - shown[tuple(b)][..., :2], axis=-1)
        jump = np.abs(grey[tuple(a)] - grey[tuple(b)])
        out["map"] += int((both & (step > reach)).sum())
        out["texture"] += int((both & (jump > TEXTURE_SLOPE * reach + 3.0)).sum())
    return out


TURNS = ["turned 60 degrees", "turned -60 degrees", "mouth opened wide"]


@pytest.mark.parametrize("move", TURNS)
def test_the_crop_carry_covers_the_whole_crop_and_tears_nothing(move: str) -> None:
    anchors = ring(-1.0, -1.0, float(CROP), float(CROP))
    then, now = crop_points(THEN), crop_points(MOVES[move])
    picture, covered, (shown,) = crop_carry(texture((CROP, CROP)), then, now, (coordinates((CROP, CROP)),))
    assert covered.min() == 255  # every pixel of the crop: the anchors ring it
    stretch = local_stretch(np.concatenate([then, anchors]), np.concatenate([now, anchors]), (CROP, CROP))
    assert tears(picture, shown, stretch, np.ones((CROP, CROP), bool)) == {"map": 0, "texture": 0}


def test_a_mesh_triangulated_on_the_points_then_would_tear_where_the_check_looks() -> None:
    """The check above can fail: the same warp with its mesh triangulated on the points then
    (each triangle of the swap drawn where its corners are now) folds over itself on a
    60-degree turn, and where folded triangles overlap, neighbouring pixels sample parts of
    the swap that do not meet."""
    anchors = ring(-1.0, -1.0, float(CROP), float(CROP))
    then = np.concatenate([crop_points(THEN), anchors])
    now = np.concatenate([crop_points(MOVES["turned 60 degrees"]), anchors])
    mesh = prepare_mesh(texture((CROP, CROP)), then, prepare_triangulation(then))
    map_x, map_y, labels, _ = warp_maps(mesh, now, (CROP, CROP))
    picture = cv2.remap(mesh.image, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    found = tears(picture, np.dstack([map_x, map_y]), local_stretch(then, now, (CROP, CROP)), labels > 0)
    assert found["map"] > 10 and found["texture"] > 0, found


@pytest.mark.parametrize("move", TURNS)
def test_the_classical_carry_covers_the_face_now(move: str) -> None:
    """The classical carry's picture covers the whole face now: no part of it is left out
    where the face moved past the region of its swap. (Its map is carry_warp's, checked for
    seams above; where it lands, by the landmark test.)"""
    swapper, now = ClassicalSwapper(), MOVES[move]
    region = swapper.face_region((FRAME_H, FRAME_W, 3), THEN)
    assert region is not None
    x0, y0, x1, y1 = region
    size = (x1 - x0, y1 - y0)
    swap = ClassicalSwap(SwapResult(region, texture(size), np.full((size[1], size[0]), 255, np.uint8)), THEN)
    frame = np.zeros((FRAME_H, FRAME_W, 3), np.uint8)
    picture = swapper.carry_many(frame, [_face(now)], [swap])[0]
    assert picture is not None
    valid = np.zeros((FRAME_H, FRAME_W), np.uint8)
    cx0, cy0, cx1, cy1 = picture.region
    valid[cy0:cy1, cx0:cx1] = picture.valid
    hull = np.zeros((FRAME_H, FRAME_W), np.uint8)
    cv2.fillConvexPoly(hull, np.round(cv2.convexHull(now)).astype(np.int32), 255)
    hull = cv2.erode(hull, np.ones((3, 3), np.uint8))  # off the hull's rounded edge
    assert valid[hull > 0].min() == 255, "pixels inside the face now left out"


# ---- the neural carry end to end: cut, swap off the frame path, carry ----

def scene(w: int = FRAME_W, h: int = FRAME_H, seed: int = 7) -> npt.NDArray[np.uint8]:
    """A smooth, colourful picture (blurred noise, stretched to the full range): crops of it
    taken at slightly different places agree closely, so what differs is the carry."""
    rng = np.random.default_rng(seed)
    small = rng.uniform(0, 255, (h // 12 + 2, w // 12 + 2, 3)).astype(np.float32)
    big = cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)
    big = cv2.GaussianBlur(big, (0, 0), 3)
    big = (big - big.min()) / max(float(big.max() - big.min()), 1e-6) * 255
    return np.clip(big, 0, 255).astype(np.uint8)


def _latent(model: InSwapper, seed: int = 1) -> npt.NDArray[np.float32]:
    return model.prepare_source(np.random.default_rng(seed).standard_normal(512).astype(np.float32))


def _psnr(a: npt.NDArray[np.uint8], b: npt.NDArray[np.uint8]) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return np.inf if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def _carried(model: InSwapper, frame_then: npt.NDArray[np.uint8], then: npt.NDArray[np.float32],
             frame_now: npt.NDArray[np.uint8], now: npt.NDArray[np.float32],
             latent: npt.NDArray[np.float32]) -> SwapResult:
    """The face cut out of `frame_then`, swapped once that frame is gone (its buffer blanked,
    as the ring reuses it), and carried onto the face in `frame_now`."""
    cut = model.cut_face(frame_then, _face(then, track=0), latent)
    assert cut is not None
    kept = frame_then.copy()
    frame_then[...] = 0
    try:
        swap = model.swap_cut(cut)
        result = model.carry_many(frame_now, [_face(now, track=0)], [swap])[0]
    finally:
        frame_then[...] = kept
    assert result is not None
    return result


def test_a_neural_swap_carried_onto_its_own_frame_is_the_direct_swap(inswapper: InSwapper) -> None:
    """Cut, swapped apart and carried onto the frame it was cut from: the direct swap, to a grey
    level at all but about 1% of the pixels. (Those lie on the mesh's edges, where the warp
    holds each sample inside its triangle's box, up to half a pixel off; on the stand-in
    model's grainy output that reads as a few tens of grey levels.)"""
    frame, latent = scene(), _latent(inswapper)
    direct = inswapper.forward(frame, _face(THEN), latent)
    carried = _carried(inswapper, frame.copy(), THEN, frame, THEN, latent)
    assert direct is not None and carried.region == direct.region
    x0, y0, x1, y1 = direct.region
    assert np.abs(direct.patch.astype(int) - frame[y0:y1, x0:x1]).mean() > 10  # the swap changed the face
    diff = np.abs(carried.patch.astype(int) - direct.patch.astype(int))
    assert (diff <= 2).mean() > 0.98 and diff.mean() < 0.1, ((diff <= 2).mean(), diff.mean())
    assert np.array_equal(carried.valid, direct.valid)


@pytest.mark.parametrize("shift", [(32, -11), (-32, 17)])  # whole columns of the paste (COLUMN_ALIGN)
def test_a_neural_swap_carried_onto_a_face_moved_by_whole_pixels_is_the_swap_made_there(
        inswapper: InSwapper, shift: tuple[int, int]) -> None:
    dx, dy = shift
    canvas = scene(FRAME_W + 80, FRAME_H + 80)
    frame_then = np.ascontiguousarray(canvas[40:40 + FRAME_H, 40:40 + FRAME_W])
    frame_now = np.ascontiguousarray(canvas[40 - dy:40 - dy + FRAME_H, 40 - dx:40 - dx + FRAME_W])
    now = THEN + np.float32([dx, dy])
    latent = _latent(inswapper)
    stale = inswapper.forward(frame_then, _face(THEN), latent)
    direct = inswapper.forward(frame_now, _face(now), latent)
    carried = _carried(inswapper, frame_then, THEN, frame_now, now, latent)
    assert direct is not None and stale is not None
    x0, y0, x1, y1 = stale.region
    assert carried.region == direct.region == (x0 + dx, y0 + dy, x1 + dx, y1 + dy)  # it follows the face
    diff = np.abs(carried.patch.astype(int) - direct.patch.astype(int))
    assert (diff <= 2).mean() > 0.98 and diff.mean() < 0.1, ((diff <= 2).mean(), diff.mean())


def test_a_neural_swap_carried_onto_a_face_moved_grown_and_rolled_follows_it(inswapper: InSwapper) -> None:
    now = MOVES["moved, grown and rolled"]
    m, _ = cv2.estimateAffinePartial2D(THEN, now)
    frame_then = scene()
    frame_now = cv2.warpAffine(frame_then, m, (FRAME_W, FRAME_H), borderMode=cv2.BORDER_REFLECT)
    latent = _latent(inswapper)
    stale = inswapper.forward(frame_then, _face(THEN), latent)
    direct = inswapper.forward(frame_now, _face(now), latent)
    carried = _carried(inswapper, frame_then, THEN, frame_now, now, latent)
    assert direct is not None and stale is not None
    assert carried.region == direct.region != stale.region
    assert np.array_equal(carried.valid, direct.valid)
    assert _psnr(carried.patch, direct.patch) > 35


# ---- CarriedSwapper: whose swap each face gets, when faces are swapped, never waiting ----

SMALL_W, SMALL_H = 200, 120


class Source:
    """A stand-in source face, told apart by identity (as the pipeline's prepared sources are)."""

    def __init__(self, tag: int) -> None:
        self.tag = tag


@dataclass(frozen=True)
class TagCut:
    track: int
    source: Source
    frame: int  # the frame's number, read off its first pixel


@dataclass(frozen=True)
class Tag:
    """A stand-in swap: whose face it was cut from (its track), for which source, on which frame."""

    track: int
    source: int
    frame: int


class TagSwapper:
    """A CarrySwapper stand-in whose swaps say whose they are: a carried face's patch is
    painted (track + 1, source tag, frame the swap was cut on), the face's box wide. `gate`:
    each swap first waits for it to be set (a slow model, held until the test lets it go);
    `fail`: a swap raises."""

    name = "tags"
    calls = 0

    def __init__(self, gate: threading.Event | None = None, fail: bool = False) -> None:
        self.gate, self.fail = gate, fail
        self.started: list[int] = []  # the track of each swap begun, in order
        self.swapped: list[tuple[int, int]] = []  # (track, frame) of each swap made, in order
        self.threads: set[str] = set()

    def open(self) -> None: ...

    def prepare_source(self, image: object, landmarks: object) -> Source:
        return Source(0)

    def cut(self, frame: npt.NDArray[np.uint8], face: Face, source: Source) -> TagCut:
        return TagCut(face.track_id, source, int(frame[0, 0, 0]))

    def swap_cut(self, cut: TagCut) -> Tag:
        self.threads.add(threading.current_thread().name)
        self.started.append(cut.track)
        if self.gate is not None:
            assert self.gate.wait(timeout=20), "the test never let the swap go"
        if self.fail:
            raise RuntimeError("the model fell over")
        self.swapped.append((cut.track, cut.frame))
        return Tag(cut.track, cut.source.tag, cut.frame)

    def carry_many(self, frame: npt.NDArray[np.uint8], faces: Sequence[Face],
                   swaps: Sequence[Tag | None]) -> list[SwapResult | None]:
        out: list[SwapResult | None] = []
        for face, swap in zip(faces, swaps):
            if swap is None:
                out.append(None)
                continue
            x0, y0, x1, y1 = (int(round(v)) for v in face.box)
            patch = np.empty((y1 - y0, x1 - x0, 3), np.uint8)
            patch[...] = (swap.track + 1, swap.source, swap.frame)
            out.append(SwapResult((x0, y0, x1, y1), patch, np.full(patch.shape[:2], 255, np.uint8)))
        return out

    def paste(self, frame: npt.NDArray[np.uint8], face: Face, result: SwapResult) -> None:
        result.paste_into(frame)


def test_the_stand_in_is_a_carry_swapper() -> None:
    assert isinstance(TagSwapper(), CarrySwapper) and isinstance(ClassicalSwapper(), CarrySwapper)


def small_frame(n: int, size: tuple[int, int] = (SMALL_W, SMALL_H)) -> npt.NDArray[np.uint8]:
    """Frame n: black, its number in its first pixel (TagSwapper's cut reads it)."""
    frame = np.zeros((size[1], size[0], 3), np.uint8)
    frame[0, 0, 0] = n
    return frame


def crossing(n: int, frames: int = 20) -> list[tuple[int, tuple[float, float]]]:
    """Frame n's two faces (track, centre), crossing: track 0 left to right, track 1 right to
    left, their boxes overlapping for the middle frames."""
    t = n / (frames - 1)
    return [(0, (40.0 + 120.0 * t, 60.0)), (1, (160.0 - 120.0 * t, 62.0))]


def small_face(track: int, centre: tuple[float, float], size: float = 40.0) -> Face:
    points = (BOX_FACE - 0.5).astype(np.float32) * size + np.float32(centre)
    cx, cy = centre
    return Face((cx - size / 2, cy - size / 2, cx + size / 2, cy + size / 2), points, track_id=track)


def step(carried: CarriedSwapper, n: int, faces: Sequence[Face], sources: Sequence[object],
         size: tuple[int, int] = (SMALL_W, SMALL_H)) -> list[SwapResult | None]:
    """One frame through the three phases, in order (the pipeline's stages do them on three
    threads, frame after frame)."""
    frame = small_frame(n, size)
    batch = carried.prepare_batch(frame, faces, sources, {})
    swapped = carried.forward_batch(batch, {}, {})
    return carried.finish_batch(frame, batch, swapped)


def owner(result: SwapResult | None) -> tuple[int, int, int] | None:
    """(track, source tag, frame) that a TagSwapper result was made from; None for none."""
    if result is None:
        return None
    b, g, r = (int(v) for v in result.patch[0, 0])
    assert (result.patch == result.patch[0, 0]).all()
    return b - 1, g, r


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Poll until `condition` holds (the worker thread's progress); fails after `timeout` s."""
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.002)


@pytest.mark.parametrize("every", [4, 1])
def test_files_each_face_gets_only_its_own_tracks_swap_while_two_faces_cross(every: int) -> None:
    swapper, metrics = TagSwapper(), Metrics()
    carried = CarriedSwapper(swapper, every, live=False, metrics=metrics)
    sources = (Source(10), Source(11))
    overlapping = 0
    for n in range(20):
        faces = [small_face(track, centre) for track, centre in crossing(n)]
        overlapping += faces[0].box[2] > faces[1].box[0] and faces[1].box[2] > faces[0].box[0]
        results = step(carried, n, faces, sources)
        for face, source, result in zip(faces, sources, results):
            made = owner(result)
            assert made is not None  # a file swaps a face on its first frame
            track, tag, frame = made
            assert (track, tag) == (face.track_id, source.tag)
            assert frame == n - n % every  # its newest swap: on its 1st, (every+1)-th ... frame
    assert overlapping >= 4
    assert sorted(swapper.swapped) == sorted((t, n) for n in range(0, 20, every) for t in (0, 1))
    assert metrics.swaps_made == len(swapper.swapped)
    assert metrics.faces_carried == 40 - len(swapper.swapped)
    carried.close()


def test_files_with_the_classical_swapper_paste_each_face_from_its_own_source_while_they_cross() -> None:
    """The real carry (ClassicalSwapper), two sources of two plain colours: while the faces
    cross, every pixel each face's carried warp covers is its own source's colour."""
    colours = ((0, 0, 255), (255, 0, 0))  # red, blue
    swapper = ClassicalSwapper()
    photo_points = (BOX_FACE * 100 + 50).astype(np.float32)
    sources = [swapper.prepare_source(np.full((200, 200, 3), c, np.uint8), photo_points) for c in colours]
    carried = CarriedSwapper(swapper, 4, live=False, metrics=Metrics())
    frames, overlapping = 20, 0
    for n in range(frames):
        t = n / (frames - 1)
        faces = [Face((0, 0, 1, 1), face_points(centre=(90 + 180 * t, 150), size=90, yaw=20 * t), track_id=0),
                 Face((0, 0, 1, 1), face_points(centre=(270 - 180 * t, 160), size=90, yaw=-20 * t), track_id=1)]
        results = step(carried, n, faces, sources, (FRAME_W, FRAME_H))
        a, b = (r.region for r in results if r is not None)
        overlapping += a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
        for k, result in enumerate(results):
            assert result is not None
            pixels = result.patch[result.valid > 0].astype(int)
            own, other = colours[k].index(255), colours[1 - k].index(255)
            assert pixels.size and pixels[:, own].min() > 0 and pixels[:, other].max() == 0, (n, k)
    assert overlapping >= 6
    carried.close()


def test_files_a_track_that_enters_or_changes_source_is_swapped_at_once_and_never_shows_another() -> None:
    swapper = TagSwapper()
    carried = CarriedSwapper(swapper, 4, live=False, metrics=Metrics())
    first, second = Source(10), Source(20)
    seen = []
    for n in range(12):
        # Track 0 leaves after frame 4; track 2 enters where it was on frame 5; track 1's
        # source changes on frame 6 (its next swap on its own schedule would be frame 8).
        faces = [small_face(0 if n <= 4 else 2, (60.0, 60.0)), small_face(1, (140.0, 60.0))]
        sources = [first, first if n < 6 else second]
        seen.append([owner(r) for r in step(carried, n, faces, sources)])
    assert [s[0] for s in seen] == [(0, 10, 0)] * 4 + [(0, 10, 4)] + [(2, 10, 5)] * 4 + [(2, 10, 9)] * 3
    assert [s[1] for s in seen] == [(1, 10, 0)] * 4 + [(1, 10, 4)] * 2 + [(1, 20, 6)] * 4 + [(1, 20, 10)] * 2
    carried.close()


# ---- live: the swaps off the frame path, in a worker ----

def live_carried(swapper: TagSwapper, every: int | None = None) -> tuple[CarriedSwapper, Metrics]:
    metrics = Metrics()
    carried = CarriedSwapper(swapper, every, live=True, metrics=metrics)
    assert carried.worker is not None
    return carried, metrics


def test_live_frames_never_wait_for_a_swap_and_a_face_shows_nothing_until_its_own_arrives() -> None:
    gate = threading.Event()  # closed: a model that has not answered yet
    swapper = TagSwapper(gate)
    carried, metrics = live_carried(swapper)
    sources = (Source(10), Source(11))
    try:
        for n in range(30):  # the frames go on (a frame waiting for a swap would never end)
            faces = [small_face(track, centre) for track, centre in crossing(n, 30)]
            assert step(carried, n, faces, sources) == [None, None]  # the target shows, not a stranger
        assert metrics.swaps_made == 0 and swapper.swapped == []
        wait_for(lambda: swapper.started == [0], "the worker to take the first face")  # posted first, no swap yet
        gate.set()
        wait_for(lambda: all(carried.store.get(t) is not None for t in (0, 1)), "both faces' swaps")
        for n in range(30, 34):
            faces = [small_face(track, centre) for track, centre in crossing(29, 30)]
            made = [owner(r) for r in step(carried, n, faces, sources)]
            assert [m[:2] if m else None for m in made] == [(0, 10), (1, 11)]
            assert all(m is not None and m[2] < n for m in made)  # cut on an earlier frame, carried
        assert swapper.threads == {"swap-worker"}
        assert metrics.faces_carried == 8 and metrics.swaps_made == len(swapper.swapped) >= 2
    finally:
        gate.set()
        carried.close()


def test_live_each_face_gets_only_its_own_tracks_swap_while_two_faces_cross() -> None:
    swapper = TagSwapper()
    carried, metrics = live_carried(swapper)
    sources = (Source(10), Source(11))
    try:
        for n in range(20):
            faces = [small_face(track, centre) for track, centre in crossing(n)]
            for face, source, result in zip(faces, sources, step(carried, n, faces, sources)):
                made = owner(result)
                assert made is None or (made[:2] == (face.track_id, source.tag) and made[2] <= n)
            time.sleep(0.005)  # a camera's pace, loosely: the worker gets the cores now and then
        wait_for(lambda: all(carried.store.get(t) is not None for t in (0, 1)), "both faces' swaps")
        faces = [small_face(track, centre) for track, centre in crossing(19)]
        made = [owner(r) for r in step(carried, 20, faces, sources)]
        assert [m[:2] if m else None for m in made] == [(0, 10), (1, 11)]
        assert metrics.swaps_made == len(swapper.swapped) and swapper.threads == {"swap-worker"}
    finally:
        carried.close()


def test_live_a_new_track_or_a_new_source_shows_nothing_until_swapped_anew() -> None:
    gate = threading.Event()
    gate.set()
    swapper = TagSwapper(gate)
    carried, metrics = live_carried(swapper)
    first, second = Source(10), Source(20)
    at = (60.0, 60.0)
    try:
        step(carried, 0, [small_face(0, at)], [first])
        wait_for(lambda: carried.store.get(0) is not None, "track 0's swap")
        assert owner(step(carried, 1, [small_face(0, at)], [first])[0])[:2] == (0, 10)  # type: ignore[index]
        gate.clear()  # the model stalls
        # Track 0 leaves; track 3 enters where it was: nothing until its own swap.
        for n in range(2, 8):
            assert step(carried, n, [small_face(3, at)], [first]) == [None]
        gate.set()
        wait_for(lambda: carried.store.get(3) is not None, "track 3's swap")
        assert owner(step(carried, 8, [small_face(3, at)], [first])[0])[:2] == (3, 10)  # type: ignore[index]
        gate.clear()
        # Its source changes: nothing until a swap with the new one.
        for n in range(9, 14):
            assert step(carried, n, [small_face(3, at)], [second]) == [None]
        gate.set()
        wait_for(lambda: getattr(carried.store.get(3), "source", None) is second, "a swap with the new source")
        assert owner(step(carried, 14, [small_face(3, at)], [second])[0])[:2] == (3, 20)  # type: ignore[index]
    finally:
        gate.set()
        carried.close()


def test_live_every_n_cuts_each_face_every_n_frames_at_most() -> None:
    swapper = TagSwapper()
    carried, metrics = live_carried(swapper, every=5)
    source = Source(10)
    try:
        for n in range(20):
            step(carried, n, [small_face(0, (60.0, 60.0))], [source])
            if n % 5 == 0:  # let the worker keep up, so each cut is swapped
                wait_for(lambda n=n: len(swapper.swapped) == n // 5 + 1, "the swap of the face's cut")
        assert [f for _, f in swapper.swapped] == [0, 5, 10, 15]
    finally:
        carried.close()


def test_the_worker_swaps_a_face_with_none_first_then_one_that_moved_past_a_bound_then_the_oldest() -> None:
    gate = threading.Event()
    swapper = TagSwapper(gate)
    store, metrics = SwapStore(), Metrics()
    worker = BackgroundSwaps(swapper, store, metrics)  # type: ignore[arg-type]
    source = Source(10)
    still, opened = THEN, MOVES["mouth opened wide"]

    def cut(track: int, points: npt.NDArray[np.float32]) -> Cut:
        return Cut(track, TagCut(track, source, 1), source, 1, points)

    try:
        worker.post([cut(9, still)])
        wait_for(lambda: swapper.started == [9], "the worker to be busy")
        # Swapped before: 1 long ago, 4 longer ago, 2 recently but its mouth has opened since.
        for track, at, points in ((1, 100.0, still), (4, 50.0, still), (2, 200.0, still)):
            store.put(track, Made(Tag(track, 10, 0), source, 0, points, at))
        worker.post([cut(1, still), cut(2, opened), cut(3, still), cut(4, still)])  # 3: never swapped
        assert worker.wants(1, 2) is False and worker.wants(5, 2) is True
        gate.set()
        wait_for(lambda: metrics.swaps_made == 5, "the five swaps")
        assert swapper.started == [9, 3, 2, 4, 1]
        assert worker.swaps == 5 and worker.busy_s > 0
    finally:
        gate.set()
        worker.close()
    assert not worker._thread.is_alive()  # close() ends the thread


def test_moved_past_bound_reads_turns_mouths_and_eyes() -> None:
    eyes_shut = THEN.copy()
    eyes_shut[[37, 38], 1] = eyes_shut[[41, 40], 1]
    eyes_shut[[43, 44], 1] = eyes_shut[[47, 46], 1]
    assert not moved_past_bound(THEN, THEN + 5.0)
    assert not moved_past_bound(THEN, MOVES["moved, grown and rolled"])
    assert moved_past_bound(THEN, face_points(yaw=30.0))
    assert moved_past_bound(THEN, MOVES["mouth opened wide"])
    assert moved_past_bound(THEN, eyes_shut)


def test_a_worker_error_stops_the_frame_path_with_it() -> None:
    swapper = TagSwapper(fail=True)
    carried, _ = live_carried(swapper)
    source = Source(10)
    try:
        step(carried, 0, [small_face(0, (60.0, 60.0))], [source])
        assert carried.worker is not None
        wait_for(lambda: carried.worker is not None and carried.worker.failed is not None, "the worker to fail")
        with pytest.raises(RuntimeError, match="the model fell over"):
            step(carried, 1, [small_face(0, (60.0, 60.0))], [source])
        assert not carried.worker._thread.is_alive()
    finally:
        carried.close()


def test_close_ends_an_idle_worker_and_a_file_run_has_none() -> None:
    # No thread until the first face is posted (a pipeline built and never run owns none).
    unused, _ = live_carried(TagSwapper())
    assert unused.worker is not None and unused.worker._thread.ident is None
    unused.close()
    carried, _ = live_carried(TagSwapper())
    step(carried, 0, [small_face(0, (60.0, 60.0))], [Source(10)])
    assert carried.worker is not None and carried.worker._thread.is_alive()
    carried.close()
    assert not carried.worker._thread.is_alive()
    files = CarriedSwapper(TagSwapper(), 3, live=False, metrics=Metrics())
    assert files.worker is None
    files.close()
    with pytest.raises(ValueError, match="auto is live's"):
        CarriedSwapper(TagSwapper(), None, live=False, metrics=Metrics())


class NoCarry:
    name = "plain"


def test_a_swapper_that_cannot_carry_is_refused() -> None:
    with pytest.raises(ValueError, match="the plain swapper cannot be carried"):
        CarriedSwapper(NoCarry(), 4, live=False, metrics=Metrics())


def test_files_swap_on_fixed_frames_and_a_second_run_gives_the_same_pictures() -> None:
    """every=4: a face is swapped on its 1st, 5th, 9th ... frame whatever the machine does,
    and two runs paste the same pixels."""

    def run() -> tuple[list[list[SwapResult | None]], int, list[int]]:
        swapper, metrics = ClassicalSwapper(), Metrics()
        calls: list[int] = []
        swap_cut = swapper.swap_cut

        def counted(cut: object) -> object:
            calls.append(len(out))
            return swap_cut(cut)  # type: ignore[arg-type]

        swapper.swap_cut = counted  # type: ignore[method-assign]
        source = swapper.prepare_source(scene(200, 200, seed=3), (BOX_FACE * 100 + 50).astype(np.float32))
        carried = CarriedSwapper(swapper, 4, live=False, metrics=metrics)
        out: list[list[SwapResult | None]] = []
        for n in range(11):
            now = face_points(yaw=4.0 * n, mouth=0.01 * n, centre=(150.0 + 3 * n, 150.0), size=100.0)
            out.append(step(carried, n, [Face((0, 0, 1, 1), now, track_id=0)], [source], (FRAME_W, FRAME_H)))
        carried.close()
        return out, metrics.swaps_made, calls

    first, swaps, calls = run()
    second, _, _ = run()
    assert calls == [0, 4, 8] and swaps == 3
    for a, b in zip(first, second):
        assert a[0] is not None and b[0] is not None
        assert a[0].region == b[0].region
        assert np.array_equal(a[0].patch, b[0].patch) and np.array_equal(a[0].valid, b[0].valid)


# ---- configured, run and reported ----

@pytest.mark.parametrize("value,expect", [("auto", "auto"), ("4", 4), ('"4"', 4), ("1", 1), ("12", 12)])
def test_swap_every_takes_a_whole_number_or_auto(value: str, expect: object) -> None:
    assert load_config(None, [f"models.swap_every={value}"]).models.swap_every == expect


def test_swap_every_is_auto_by_default() -> None:
    assert load_config(None).models.swap_every == "auto"


@pytest.mark.parametrize("value", ["0", "-1", "x", "true", "2.5", '"0"'])
def test_swap_every_refuses_anything_else_in_one_line(value: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(None, [f"models.swap_every={value}"])
    message = str(exc.value)
    assert "\n" not in message and message.startswith("models.swap_every must be a whole number >= 1 or auto")


def _cli(argv: list[str]) -> int:
    """`facestream ARGV` in this process: its exit status (argparse's exits included)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.fixture(scope="module")
def small_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ten frames of three faces (the suite's window of t1.jpg, panning), no audio."""
    path = tmp_path_factory.mktemp("carry-clip") / "faces.mp4"
    make_clip(path, window_frame, 10, fps=25, audio=False, options=None)
    return path


def _frames(path: Path) -> list[npt.NDArray[np.uint8]]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]


def test_swap_every_4_on_the_classical_engine_writes_a_playable_clip_and_reports_the_cadence(
        small_clip: Path, source_photo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outs = []
    for run in range(2):
        out = tmp_path / f"out{run}.mp4"
        code = _cli(["swap", "--source", str(source_photo), "--input", str(small_clip), "--output", str(out),
                     "--engine", "dlib", "--swap-every", "4", "--crf", "0", "--x264-preset", "ultrafast",
                     "--stats-json", str(out.with_suffix(".json"))])
        printed = capsys.readouterr()
        assert code == 0, printed.err
        outs.append(out)
    assert probe(outs[0])["frames"] == probe(small_clip)["frames"] == 10
    assert "swaps/s a face, carried between" in printed.out
    report = json.loads(outs[0].with_suffix(".json").read_text())
    cadence = report["cadence"]
    assert cadence["swap_every"] == "4" and cadence["swapper"] == "classical"
    assert 0 < cadence["swaps"] < report["faces_swapped"]
    assert cadence["swaps"] + cadence["faces_carried"] == report["faces_swapped"]
    assert cadence["swaps_per_s_a_face"] > 0
    # files swap on fixed frames: a second run writes the same pictures
    assert all(np.array_equal(a, b) for a, b in zip(_frames(outs[0]), _frames(outs[1])))


@pytest.mark.parametrize("args", [["--swap-every", "0"], ["--swap-every", "x"], ["--set", "models.swap_every=0"]])
def test_a_bad_swap_every_is_a_one_line_error(args: list[str], source_photo: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code = _cli(["swap", "--source", str(source_photo), "--input", str(tmp_path / "in.mp4"),
                 "--output", str(tmp_path / "out.mp4"), "--engine", "dlib", *args])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code != 0
    assert len(lines) == 1 and lines[0].startswith("facestream: error:") and "swap_every" in lines[0], err
    assert "Traceback" not in err


# ---- the live cadence: a run falling behind slows the swaps before it sheds quality ----

class FakeRing:
    def __init__(self) -> None:
        self.drops = 0


class FakeTracker:
    detect_every = 3


class FakePace:
    """The swaps' worker's pace: `steps` slower steps to take, each logged."""

    def __init__(self, log: list[str], steps: int = 2) -> None:
        self.log, self.steps, self.slowed = log, steps, 0

    def slower(self) -> bool:
        if self.slowed == self.steps:
            return False
        self.slowed += 1
        self.log.append(f"swaps slower {self.slowed}")
        return True

    def faster(self) -> bool:
        if self.slowed == 0:
            return False
        self.slowed -= 1
        self.log.append(f"swaps faster {self.slowed}")
        return True


def test_drops_slow_the_swaps_before_shedding_quality_and_calm_gives_them_back_last() -> None:
    log: list[str] = []
    tracker, ring_ = FakeTracker(), FakeRing()
    pace = FakePace(log)
    cadence = AdaptiveCadence(tracker, [ring_], 3, ["resample", "occlusion"],  # type: ignore[arg-type]
                              lambda shed: log.append(f"shed {sorted(shed)}"), pace)
    now = 100.0
    cadence.on_frame(now)
    for drops in [5, 5, 5, 5] + [0] * 18:
        ring_.drops += drops
        for _ in range(30):  # a second of frames
            now += 0.034
            cadence.on_frame(now)
        log.append(f"detect every {tracker.detect_every}")
    changes = [entry for entry in log if not entry.startswith("detect")]
    assert changes == [
        "swaps slower 1", "swaps slower 2",  # the swaps first
        "shed ['resample']", "shed ['occlusion', 'resample']",  # then quality
        "shed ['resample']", "shed []",  # calm: quality back (after detection's cadence)
        "swaps faster 1", "swaps faster 0",  # the swaps' pace last
    ]
    assert cadence.swaps_slowed == 2 and pace.slowed == 0
    detect = [int(e.split()[-1]) for e in log if e.startswith("detect")]
    assert detect[:4] == [6, 12, 12, 12] and detect[-1] == 3


def test_the_live_worker_rests_longer_while_frames_drop_and_less_while_the_run_keeps_up() -> None:
    carried, _ = live_carried(TagSwapper())
    worker = carried.worker
    assert worker is not None
    try:
        steps = []
        while worker.slower():
            steps.append(worker.rest)
        assert steps[0] > 0 and steps == sorted(steps) and len(steps) >= 3
        back = []
        while worker.faster():
            back.append(worker.rest)
        assert back[-1] == 0.0 and back == sorted(back, reverse=True)
    finally:
        carried.close()


# ---- what a carried neural swap leaves out: the crop's fill past the frame, a changed picture ----

class IdentityInSwapper(InSwapper):
    """inswapper's pipeline with each crop swapped for itself (the model left out)."""

    def forward_blob(self, blob: npt.NDArray[np.floating], latent: npt.NDArray[np.float32]) -> npt.NDArray[np.floating]:
        return blob.copy()


def test_a_face_swapped_at_the_frame_edge_carries_no_fill_inwards(inswapper: InSwapper) -> None:
    # The face half out of the frame on the left: its crop is black past the edge. Carried onto
    # the face moved 14 px in, none of that black is pasted: every pasted pixel is the grey's.
    identity = IdentityInSwapper(inswapper.runtime)
    grey = np.full((FRAME_H, FRAME_W, 3), 128, np.uint8)
    then = face_points(centre=(30.0, 150.0))
    now = face_points(centre=(44.0, 150.0))
    cut = identity.cut_face(grey, _face(then, track=0), _latent(inswapper))
    assert cut is not None and cut.inside is not None and cut.inside.min() == 0.0
    swap = identity.swap_cut(cut)
    assert swap.crop.min() < 20  # the fill is in the swap
    result = identity.carry_many(grey, [_face(now, track=0)], [swap])[0]
    assert result is not None
    pasted = result.patch[result.valid > 0]
    assert pasted.min() >= 120
    # On its own frame the swap is pasted as made (those pixels fall outside the frame).
    own = identity.carry_many(grey, [_face(then, track=0)], [swap])[0]
    direct = identity.blend_crop(grey, swap.crop, identity.face_crop(grey, _face(then))[1])
    assert own is not None and direct is not None
    np.testing.assert_array_equal(own.patch, direct.patch)


def test_where_the_picture_under_a_carried_swap_changed_the_target_shows(inswapper: InSwapper) -> None:
    # A bar comes in front of the face after its swap: where it is, the carried swap is left
    # out (the bar shows), while the rest of the face is still swapped.
    frame = scene()
    then = face_points()
    now = face_points(centre=(182.0, 151.0))
    swap = inswapper.swap_cut(inswapper.cut_face(frame, _face(then, track=0), _latent(inswapper)))
    barred = frame.copy()
    barred[140:160, 100:260] = 0
    result = inswapper.carry_many(barred, [_face(now, track=0)], [swap])[0]
    clear = inswapper.carry_many(frame, [_face(now, track=0)], [swap])[0]
    assert result is not None and clear is not None
    x0, y0, x1, y1 = result.region
    out = barred.copy()
    out[y0:y1, x0:x1] = result.patch
    inner = out[144:156, 150:210].astype(int)  # the bar's middle, over the face
    assert np.abs(inner).max() <= 8
    # Away from the bar the swap is pasted as without it.
    away = (slice(175 - y0, 195 - y0), slice(150 - x0, 210 - x0))
    assert np.abs(result.patch[away].astype(int) - clear.patch[away].astype(int)).max() <= 2
    assert np.abs(clear.patch[away].astype(int) - frame[175:195, 150:210].astype(int)).max() > 20  # swapped there
