"""Landmark smoothing: the pose through a constant-velocity Kalman filter, the shape One-Euro."""
from __future__ import annotations

import numpy as np

from stream.analysis.one_euro import OneEuroFilter
from stream.analysis.pose_smoother import PoseShapeSmoother

FPS = 30.0


def face_shape(seed: int = 3) -> np.ndarray:
    """68 points spread like a face's, about 100 px across, centred on the origin."""
    rng = np.random.default_rng(seed)
    angle = np.linspace(0, 2 * np.pi, 68, endpoint=False)
    radius = 40 + 10 * rng.random(68)
    return np.c_[radius * np.cos(angle), radius * np.sin(angle)]


def posed(shape: np.ndarray, cx: float, cy: float, scale: float = 1.0, roll_deg: float = 0.0) -> np.ndarray:
    a = np.deg2rad(roll_deg)
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    return (scale * shape @ rot.T + (cx, cy)).astype(np.float32)


def run(smoother, frames: list[np.ndarray]) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    return [smoother(f, i / FPS) for i, f in enumerate(frames)]


def frame_jitter(seq: list[np.ndarray]) -> float:
    return float(np.mean([np.linalg.norm(b - a, axis=1).mean() for a, b in zip(seq, seq[1:])]))


def test_a_still_face_is_held_as_steady_as_by_the_one_euro_filter() -> None:
    shape = face_shape()
    truth = posed(shape, 320, 180, 1.0, 5)
    rng = np.random.default_rng(0)
    # dlib-like noise: the whole face wobbles a pixel, each point another pixel.
    raw = [truth + rng.normal(0, 1.0, 2).astype(np.float32) + rng.normal(0, 1.0, truth.shape).astype(np.float32)
           for _ in range(90)]
    ours = run(PoseShapeSmoother(), raw)[30:]
    euro = run(OneEuroFilter(1.5, 0.3), raw)[30:]
    assert frame_jitter(ours) < 0.45 * frame_jitter(raw[30:])
    assert frame_jitter(ours) < 1.05 * frame_jitter(euro)
    error = [float(np.linalg.norm(o - truth, axis=1).mean()) for o in ours]
    assert np.mean(error) < 0.75 * np.mean([np.linalg.norm(r - truth, axis=1).mean() for r in raw[30:]])


def test_a_face_moving_steadily_is_followed_without_lag() -> None:
    """Pan, zoom and roll at constant speeds: once the filter has the speed, no lag (the
    One-Euro filter, for comparison, trails by pixels)."""
    shape = face_shape()
    rng = np.random.default_rng(1)
    truths = [posed(shape, 200 + 4.0 * i, 150 + 1.5 * i, 1.0 + 0.004 * i, 0.6 * i) for i in range(60)]
    raw = [t + rng.normal(0, 0.7, t.shape).astype(np.float32) for t in truths]
    ours = run(PoseShapeSmoother(), raw)
    euro = run(OneEuroFilter(1.5, 0.3), raw)

    def lag(seq: list[np.ndarray]) -> float:  # the mean error of the face's centre, late frames
        return float(np.linalg.norm(np.mean([s.mean(0) - t.mean(0) for s, t in zip(seq[20:], truths[20:])], 0)))

    def error(seq: list[np.ndarray]) -> float:
        return float(np.mean([np.linalg.norm(s - t, axis=1).mean() for s, t in zip(seq[20:], truths[20:])]))

    assert lag(ours) < 0.3
    assert error(ours) < 0.6 < error(euro)
    assert frame_jitter(ours) < 1.2 * frame_jitter(truths)  # the motion itself, hardly more


def test_a_change_of_expression_is_followed_within_a_few_frames() -> None:
    shape = face_shape()
    opened = shape.copy()
    opened[48:68, 1] += 12  # the mouth drops by 12 px (a quarter of the face's height)
    frames = [posed(shape, 300, 200)] * 20 + [posed(opened, 300, 200)] * 20
    out = run(PoseShapeSmoother(), frames)
    gap = [float(np.abs(o[48:68, 1] - posed(opened, 300, 200)[48:68, 1]).mean()) for o in out[20:]]
    assert gap[6] < 3.0 and gap[15] < 1.0


def test_a_jump_after_reset_is_taken_as_found() -> None:
    shape = face_shape()
    smoother = PoseShapeSmoother()
    for i in range(10):
        smoother(posed(shape, 100, 100), i / FPS)
    smoother.reset()
    far = posed(shape, 400, 300, 1.3, 20)
    assert np.allclose(smoother(far, 10 / FPS), far, atol=1e-3)


def test_a_full_turn_of_roll_does_not_spin_the_face() -> None:
    """Roll past 180 degrees: the angle found wraps from +pi to -pi; the filter must not."""
    shape = face_shape()
    truths = [posed(shape, 300, 300, 1.0, 150 + 3 * i) for i in range(30)]  # 150 to 237 degrees
    out = run(PoseShapeSmoother(), truths)
    assert max(float(np.linalg.norm(o - t, axis=1).mean()) for o, t in zip(out, truths)) < 2.0
