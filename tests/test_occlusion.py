"""Occluders found against a face's remembered appearance, and kept in front of the swap."""
from __future__ import annotations

import cv2
import dlib
import numpy as np
import pytest
from skimage import data

from engines.classic.occlusion import AppearanceReference, _median_rows
from engines.classic.swapper import ClassicalOptions, ClassicalSwapper
from engines.dlib.models import model_path
from engines.face import Face


@pytest.fixture(scope="module")
def astro() -> tuple[np.ndarray, np.ndarray]:
    rgb = data.astronaut()
    box = max(dlib.get_frontal_face_detector()(rgb, 1), key=lambda r: r.area())
    predictor = dlib.shape_predictor(model_path("landmarks"))
    points = np.array([(p.x, p.y) for p in predictor(rgb, box).parts()], np.float32)
    return cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), points


def moved(astro: tuple[np.ndarray, np.ndarray], angle: float, shift: tuple[float, float]
          ) -> tuple[np.ndarray, np.ndarray]:
    image, points = astro
    m = cv2.getRotationMatrix2D((225.0, 130.0), angle, 1.0)
    m[:, 2] += shift
    frame = cv2.warpAffine(image, m, (512, 512), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
    return frame, (np.c_[points, np.ones(68)] @ m.T).astype(np.float32)


def with_bar(frame: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The frame with a dark grey vertical bar across the face's middle, and the bar's mask."""
    x = int(points[:, 0].mean())
    out = frame.copy()
    out[:, x - 10:x + 10] = (40, 40, 46)
    bar = np.zeros(frame.shape[:2], bool)
    bar[:, x - 10:x + 10] = True
    return out, bar


def hull(points: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    m = np.zeros(shape[:2], np.uint8)
    cv2.fillConvexPoly(m, cv2.convexHull(np.round(points).astype(np.int32)), 255)
    return m > 0


def in_frame(occlusion, shape: tuple[int, ...]) -> np.ndarray:  # type: ignore[no-untyped-def]
    return cv2.warpAffine(occlusion.mask, occlusion.to_frame.astype(np.float64),
                          (shape[1], shape[0])) > 127


def learned(astro: tuple[np.ndarray, np.ndarray]) -> AppearanceReference:
    """A reference that saw the bare face move a little for a dozen frames (nothing found)."""
    ref = AppearanceReference(astro[1])
    for i in range(12):
        frame, points = moved(astro, 2.0 * np.sin(i), (1.5 * i, 0.5 * i))
        assert ref.update(frame, points, clean=True) is None, f"frame {i}: a bare face cut"
    return ref


def test_a_bar_in_front_of_a_held_face_is_found_where_it_is(astro) -> None:  # type: ignore[no-untyped-def]
    ref = learned(astro)
    frame, points = moved(astro, 1.0, (18.0, 6.0))
    barred, bar = with_bar(frame, points)
    occlusion = ref.update(barred, points, clean=False)
    assert occlusion is not None
    face = hull(points, frame.shape)
    found = in_frame(occlusion, frame.shape) & face
    on_bar = (found & bar).sum() / (bar & face).sum()
    off_bar = (found & ~bar).sum() / (face & ~bar).sum()
    # Off the bar: the mask's edge only (it is grown a canonical pixel, ~2.5 frame pixels here).
    assert on_bar > 0.8 and off_bar < 0.12, (on_bar, off_bar)


def test_a_bare_face_turning_and_relit_has_nothing_found(astro) -> None:  # type: ignore[no-untyped-def]
    ref = learned(astro)
    for angle, gain in ((6.0, 1.0), (-6.0, 1.0), (0.0, 0.8), (0.0, 1.15)):
        frame, points = moved(astro, angle, (10.0, 4.0))
        frame = cv2.convertScaleAbs(frame, alpha=gain)
        assert ref.update(frame, points, clean=True) is None, (angle, gain)


@pytest.mark.parametrize("bands", [False, True])
def test_the_swap_leaves_the_bar_in_front(astro, bands) -> None:  # type: ignore[no-untyped-def]
    # Blended in two bands (`quality`), the fine detail is cut where the coarse band is.
    image, points = astro
    swapper = ClassicalSwapper(ClassicalOptions(fine_feather=0.03, feather=0.1) if bands else ClassicalOptions())
    source = swapper.prepare_source(image, points)
    ref = learned(astro)
    frame, target = moved(astro, 1.0, (18.0, 6.0))
    barred, bar = with_bar(frame, target)
    occlusion = ref.update(barred, target, clean=False)
    lo, hi = target.min(axis=0), target.max(axis=0)
    outputs = []
    for occ in (None, occlusion):
        face = Face(box=(*lo.tolist(), *hi.tolist()), landmarks=target, occlusion=occ)  # type: ignore[arg-type]
        result = swapper.forward(barred, face, source)
        assert result is not None
        out = barred.copy()
        swapper.paste(out, face, result)
        outputs.append(out)
    face_px = hull(target, frame.shape)
    changed = [np.abs(o.astype(int) - barred.astype(int)).max(axis=2) > 12 for o in outputs]
    # Without the occlusion the bar is painted over; with it the bar stays as it was, and
    # the rest of the face is swapped as much as before.
    assert changed[0][bar & face_px].mean() > 0.5
    assert changed[1][bar & face_px].mean() < 0.02
    if not bands:
        # (The source is the target's own face, so little else changes; in two bands the bar,
        # when it is not cut out, darkens the target's coarse band in the ring around it too.)
        rest = face_px & ~bar
        assert changed[1][rest].mean() > 0.8 * changed[0][rest].mean()


def test_the_lighting_shift_median_is_numpys() -> None:
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 450, 451):
        rows = (rng.standard_normal((n, 3)) * 40).astype(np.float32)
        rows[: n // 3] = np.round(rows[: n // 3])  # ties, as whole levels give
        assert np.array_equal(_median_rows(rows), np.median(rows, axis=0)), n


def counted(ref: AppearanceReference) -> list[bool]:
    """Wraps `ref.canonical` (the start of every look) and returns the list each look appends to."""
    looks: list[bool] = []
    canonical = ref.canonical

    def look(*args):  # type: ignore[no-untyped-def]
        looks.append(True)
        return canonical(*args)

    ref.canonical = look  # type: ignore[method-assign]
    return looks


def test_a_bare_face_is_looked_at_every_other_frame_and_a_barred_one_every_frame(astro) -> None:  # type: ignore[no-untyped-def]
    ref = AppearanceReference(astro[1], every=2, phase=1)
    looks = counted(ref)
    for i in range(12):  # learning: every frame until the reference is trusted, then every other
        frame, points = moved(astro, 2.0 * np.sin(i), (1.5 * i, 0.5 * i))
        assert ref.update(frame, points, clean=True) is None
    assert 8 <= len(looks) <= 9, len(looks)  # 5 to learn, then 7 frames at one in two
    # A bar comes in while the face is seen clean: found at the next look at the latest, and
    # from then on looked for on every frame while it stays.
    frame, points = moved(astro, 1.0, (18.0, 6.0))
    barred, _ = with_bar(frame, points)
    found = [ref.update(barred, points, clean=True) is not None for _ in range(2)]
    assert any(found)
    start = len(looks)
    for _ in range(4):
        assert ref.update(barred, points, clean=True) is not None
    assert len(looks) - start == 4
    # A face not seen clean is looked at on every frame too.
    ref = learned(astro)
    ref.every = 2
    looks = counted(ref)
    for _ in range(4):
        ref.update(barred, points, clean=False)
    assert len(looks) == 4


def test_frames_passed_over_weigh_in_the_next_learning_step(astro) -> None:  # type: ignore[no-untyped-def]
    # Two references that learnt the same bare frames; then the light changes. The one that
    # looks every other frame moves its mean as far in its one look as the other does in two.
    every = [learned(astro), learned(astro)]
    every[1].every = 2
    frame, points = moved(astro, 0.0, (10.0, 4.0))
    brighter = cv2.convertScaleAbs(frame, alpha=1.1)
    before = every[0].mean.copy()
    looked = [0, 0]
    for k, ref in enumerate(every):
        looks = counted(ref)
        for _ in range(2):
            ref.update(brighter, points, clean=True)
        looked[k] = len(looks)
    assert looked == [2, 1]
    moved_by = [float(np.abs(ref.mean - before).mean()) for ref in every]
    assert moved_by[1] == pytest.approx(moved_by[0], rel=0.1), moved_by
