"""Landmark smoothing in two parts: the face's pose through a constant-velocity Kalman filter,
its shape through a One-Euro filter.

dlib's 68 points on a face of about 100 px move by a pixel or two from frame to frame where
the face itself is still. Filtering the points themselves trades that jitter against lag:
enough smoothing to still a face makes a moving face's swap trail behind it.

Most of a face's motion is rigid (pan, zoom, roll). So each frame's points are split into a
pose (centre, log-scale, roll: fitted against the track's first shape) and a shape (the
points in the face's own frame, in percent of its size). The pose goes through a Kalman
filter that models it as moving at a constant speed with random accelerations: a still face
is held still (its noise averaged out), and a face moving steadily is followed without lag,
because the filter predicts where the motion takes it. The shape, which changes slowly
(expressions, turns), goes through a One-Euro filter whose cut-off rises with speed.

The pose's noise figures are in percent of the face's size (its RMS distance from the
centre), so one setting fits faces of every size: the centre's in pixels scaled by the
size, the log-scale's in percent, the roll's in centiradians (1 moves the points at the
face's size by 1%).

The tracker's default (`track.smoother: pose`). Against the One-Euro filter it replaced, on
tools/eval_quality.py's suite (dlib engine, default config), it cut the jitter column by
18-27% on the seven clips with moving faces (rotate 2.12 -> 1.56) and left the still face
behind an occluder where it was (1.19 -> 1.19); identity moved by -0.008 to +0.0013 per
clip, landmark shift by -0.004 to +0.005; a mouth opening is followed more slowly than by
the One-Euro filter (0.7 px behind for about 8 frames).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from stream.analysis.one_euro import OneEuroFilter

Points = npt.NDArray[np.float32]  # (N, 2)

_UNITS = 100.0  # percent of the face's size
SURPRISE = 4.0  # innovations this much above their expected variance (recent mean) mean the motion changed
MAX_BOOST = 400.0  # at most this much more process noise while it does


class _ConstantVelocity:
    """Independent constant-velocity Kalman filters for a few coordinates (state: value and
    speed of each; process noise: white acceleration of spectral density `q`).

    Four coordinates a face, six faces a frame: in plain floats, the same IEEE arithmetic as
    numpy's on arrays of four (the same operations in the same order, so the same numbers)
    at a third of the cost, numpy's fixed cost per operation being most of it at this size."""

    def __init__(self, value: Sequence[float]) -> None:
        n = len(value)
        self.x = [float(v) for v in value]
        self.v = [0.0] * n
        # Covariance [[pxx, pxv], [pxv, pvv]] per coordinate; a fresh track's speed is unknown.
        self.pxx = [0.0] * n
        self.pxv = [0.0] * n
        self.pvv = [1e6] * n
        self.surprise = [0.0] * n  # recent innovations squared, in units of their expected variance

    def step(self, z: Sequence[float], dt: float, q: Sequence[float], r: Sequence[float]) -> list[float]:
        dt2, dt3 = dt * dt, dt ** 3
        two_dt = 2 * dt
        for i in range(len(self.x)):
            x = self.x[i] + self.v[i] * dt
            innovation = z[i] - x
            # A change of motion (a face starting, stopping, turning back) shows as innovations
            # larger than the noise: the process noise is raised by how much larger they run
            # lately, so the filter follows the new motion within a few frames.
            pxx0, pxv0, pvv0 = self.pxx[i], self.pxv[i], self.pvv[i]
            s0 = pxx0 + two_dt * pxv0 + dt2 * pvv0 + q[i] * dt3 / 3 + r[i]
            surprise = 0.5 * self.surprise[i] + 0.5 * (innovation * innovation) / s0
            self.surprise[i] = surprise
            qi = q[i] * min(max(surprise / SURPRISE, 1.0), MAX_BOOST)
            # Predict.
            pxx = pxx0 + two_dt * pxv0 + dt2 * pvv0 + qi * dt3 / 3
            pxv = pxv0 + dt * pvv0 + qi * dt * dt / 2
            pvv = pvv0 + qi * dt
            # Correct with the measurement z (variance r).
            s = pxx + r[i]
            kx, kv = pxx / s, pxv / s
            self.x[i] = x + kx * innovation
            self.v[i] = self.v[i] + kv * innovation
            self.pxx[i], self.pxv[i], self.pvv[i] = (1 - kx) * pxx, (1 - kx) * pxv, pvv - kv * pxv
        return list(self.x)


class PoseShapeSmoother:
    """Filters successive (N, 2) landmark arrays of one face, given their times in seconds.

    `noise`: how far the landmarker's pose of a still face wanders from frame to frame (std, %
    of the face's size); `agility`: how fast the face's motion may change (std of acceleration,
    % of its size per s²); higher follows changes in motion sooner, lower holds it steadier.
    `shape_cutoff` and `shape_beta`: the shape's One-Euro filter (Hz at rest; Hz per percent
    of size per second)."""

    def __init__(self, noise: float = 1.0, agility: float = 30.0,
                 shape_cutoff: float = 0.3, shape_beta: float = 0.1) -> None:
        self.noise = noise
        self.agility = agility
        self.shape = OneEuroFilter(shape_cutoff, shape_beta)
        self._template: np.ndarray | None = None
        self._pose: _ConstantVelocity | None = None
        self._t: float | None = None

    def reset(self) -> None:
        self.shape.reset()
        self._template = None
        self._pose = None
        self._t = None

    def __call__(self, points: Points, t: float) -> Points:
        pts = np.asarray(points, np.float64)
        centre = pts.mean(axis=0)
        centred = pts - centre
        size = float(np.sqrt((centred * centred).sum(axis=1).mean()))
        if not np.isfinite(size) or size < 1e-6:
            return np.asarray(points, np.float32).copy()
        unit = centred / size
        if self._template is None or self._template.shape != unit.shape:
            self.reset()
            self._template = unit.copy()
        angle = _angle(self._template, unit)
        # The pose: centre (pixels), log-scale and roll (percent-of-size units).
        pose = [float(centre[0]), float(centre[1]), float(np.log(size)) * _UNITS, angle * _UNITS]
        if self._pose is None or self._t is None or t <= self._t:
            self._pose = _ConstantVelocity(pose)
            smooth_pose = pose
        else:
            # Roll as the turn nearest the filter's (no jump of a full turn at +-180 degrees).
            turn = 2 * np.pi * _UNITS
            pose[3] += turn * round((self._pose.x[3] - pose[3]) / turn)
            px = size / _UNITS  # one percent of the face's size, in pixels
            smooth_pose = self._pose.step(pose, t - self._t, _variances(self.agility, px),
                                          _variances(self.noise, px))
        self._t = t
        shape = unit @ _rotation(angle)  # the points in the face's own frame (the template's roll)
        smooth_shape = self.shape(shape * _UNITS, t).astype(np.float64) / _UNITS
        new_size = float(np.exp(smooth_pose[2] / _UNITS))
        out = new_size * smooth_shape @ _rotation(smooth_pose[3] / _UNITS).T + np.array(smooth_pose[:2])
        return out.astype(np.float32)


def _variances(std: float, px: float) -> list[float]:
    """The pose's four variances for a std in percent of the face's size: the centre's in
    pixels (`px` a percent), the log-scale's and the roll's in percent units."""
    centre = std * px
    return [centre * centre, centre * centre, std * std, std * std]


def _angle(template: np.ndarray, unit: np.ndarray) -> float:
    """The angle (radians) of the rotation that best turns `template` onto `unit`."""
    cross = float((template[:, 0] * unit[:, 1] - template[:, 1] * unit[:, 0]).sum())
    dot = float((template * unit).sum())
    return float(np.arctan2(cross, dot))


def _rotation(angle: float) -> np.ndarray:
    """R with points @ R.T turned by `angle`."""
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s], [s, c]])
