"""The region warp against the full-frame `cv2.warpAffine`.

Every candidate scheme is called directly, whatever this CPU picks, so a slip in one of
them fails on any machine; a candidate that raises or differs is never chosen; the fallback
(no exact candidate) is chosen on purpose; and the region's pixels are within `BOUND` grey
levels of the full warp's on every CPU (tests/test_cpu_dispatch.py runs this file under each
OpenCV dispatch level this CPU can select). Exactness is not asserted: it depends on the CPU.
"""

from __future__ import annotations

import logging

import cv2
import numpy as np
import pytest

from engines.geometry import region_warp
from engines.geometry.region_warp import BOUND, SCHEMES, SHIFTED, WarpChoice, choose, warp_affine_region

SIZE = (640, 360)


def _transform(rng: np.random.Generator, size: tuple[int, int]) -> np.ndarray:
    angle, scale = rng.uniform(-np.pi, np.pi), rng.uniform(0.2, 4.0)
    c, s = scale * np.cos(angle), scale * np.sin(angle)
    w, h = size
    return np.array([[c, -s, rng.uniform(-0.2, 1.0) * w], [s, c, rng.uniform(-0.2, 1.0) * h]])


def _region(rng: np.random.Generator) -> tuple[int, int, int, int]:
    x0, y0 = int(rng.integers(0, 300)), int(rng.integers(0, 150))
    return x0, y0, x0 + int(rng.integers(1, 340)), y0 + int(rng.integers(1, 210))


def _smooth(size: int = 128) -> np.ndarray:
    """A colour bump that falls to 0 at its edges: no step anywhere, the border included, so
    a sample coordinate off by a fixed-point step (1/32 px) moves a pixel by under a level."""
    t = np.sin(np.pi * (np.arange(size) + 0.5) / size)
    bump = np.outer(t, t)
    return np.stack([200 * bump, 150 * bump ** 2, 250 * np.sqrt(bump)], axis=-1).round().astype(np.uint8)


def _diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()) if a.size else 0.0


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_every_candidate_runs_and_follows_the_warp(scheme: str) -> None:
    rng = np.random.default_rng(11)
    src, white = _smooth(), np.full((128, 128), 255, np.float32)
    for _ in range(12):
        IM, region = _transform(rng, SIZE), _region(rng)
        x0, y0, x1, y1 = region
        ours, ours_white = warp_affine_region(IM, region, [(src, 0.0), (white, 0.0)], scheme=scheme)
        full = cv2.warpAffine(src, IM, SIZE, borderValue=0.0)[y0:y1, x0:x1]
        full_white = cv2.warpAffine(white, IM, SIZE, borderValue=0.0)[y0:y1, x0:x1]
        assert ours.shape == full.shape and ours.dtype == np.uint8
        assert ours_white.shape == full_white.shape and ours_white.dtype == np.float32
        assert _diff(ours, full) <= 1, f"{scheme}: {_diff(ours, full)} grey levels from the full warp"
    # On the probe's textures too: it measures, and raises only what the scheme raises.
    assert region_warp.probe_difference(scheme) < 16


def _half_pixel_off(IM: np.ndarray, region, images):  # noqa: ANN001 - a SCHEMES entry
    moved = np.array(IM, np.float64)
    moved[:, 2] += 0.5
    return SCHEMES[SHIFTED](moved, region, images)


def _broken(IM: np.ndarray, region, images):  # noqa: ANN001 - a SCHEMES entry
    raise TypeError("a signature slip")


def test_a_candidate_that_raises_is_not_exact(monkeypatch: pytest.MonkeyPatch,
                                              caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(SCHEMES, "broken", _broken)
    with caplog.at_level(logging.DEBUG, logger="engines.geometry.region_warp"):
        choice = choose(["broken", *[s for s in SCHEMES if s != "broken"]])
    assert choice.scheme != "broken"
    assert "'broken' failed on the probe (TypeError: a signature slip); not exact" in caplog.text


def test_with_no_exact_candidate_the_shifted_warp_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SCHEMES, "broken", _broken)
    monkeypatch.setitem(SCHEMES, "half a pixel off", _half_pixel_off)
    choice = choose(["broken", "half a pixel off"])
    assert choice.scheme == SHIFTED
    assert choice.max_diff == region_warp.probe_difference(SHIFTED) <= BOUND
    assert choice.exact == (choice.max_diff == 0)
    assert choice.cpu == cv2.getCPUFeaturesLine()


@pytest.mark.parametrize("which", ["this CPU's choice", "the fallback"])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_region_is_within_the_bound_of_the_full_warp(monkeypatch: pytest.MonkeyPatch, which: str,
                                                     dtype: type) -> None:
    if which == "the fallback":
        monkeypatch.setattr(region_warp, "current", lambda: WarpChoice(SHIFTED, False, 0.0, ""))
    rng = np.random.default_rng(7)
    worst = 0.0
    for _ in range(25):
        shape = (128, 128, 3) if dtype is np.uint8 else (128, 128)
        src = rng.integers(0, 256, shape).astype(dtype)
        IM, region = _transform(rng, SIZE), _region(rng)
        full = cv2.warpAffine(src, IM, SIZE, borderValue=0.0)[region[1]:region[3], region[0]:region[2]]
        ours, = warp_affine_region(IM, region, [(src, 0.0)])
        assert ours.shape == full.shape and ours.dtype == full.dtype
        worst = max(worst, _diff(ours, full))
    assert worst <= BOUND


def test_the_choice_is_logged_with_its_measured_difference(caplog: pytest.LogCaptureFixture) -> None:
    region_warp.current.cache_clear()
    try:
        with caplog.at_level(logging.DEBUG, logger="engines.geometry.region_warp"):
            choice = region_warp.current()
    finally:
        region_warp.current.cache_clear()
    assert choice.scheme in SCHEMES and choice.max_diff <= BOUND
    assert f"region warp: {choice.scheme}, " in caplog.text
    assert ("exact against cv2.warpAffine" if choice.exact
            else f"largest difference {choice.max_diff:g} grey levels") in caplog.text
    assert choice.cpu in caplog.text
