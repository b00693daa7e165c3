"""Occluders in front of a face: what differs from the face's own remembered appearance.

A tracked face is looked at in a canonical face frame: the frame warped by a similarity (from
its 68 landmarks onto a template made from the track's first landmarks) to SIZE x SIZE pixels,
so a pixel there is the same spot of the face from frame to frame; the crop is registered
again on the remembered face (phase correlation) where the landmarks sit a little off it.
While the face is seen clean, `AppearanceReference` keeps a running mean and variance of
each canonical pixel (YCrCb) inside the 68 points' hull. A pixel counts as off when, after a
global shift for lighting (the median difference, which an occluder covering less than half
the face does not move), it differs from every remembered pixel within SLACK of it by more
than a floor and K_SPREAD times that pixel's usual spread (luma and chroma apart): the slack
keeps edges (hair, the jaw line) from reading as blobs when the landmarks are a pixel or two
off. Only connected blobs of a meaningful size count, so a blink or a first smile does not
cut a hole in a bare face. The result, an `Occlusion` (engines.face), is the mask in canonical
pixels plus the 2x3 map to frame pixels; the swapper cuts it out of its blend masks
(`cut_occlusion`).

Cost: about 0.5-1 ms a face on this project's CPU (one 128 x 128 warp, a 64 x 64 FFT, a
few 64 x 64 image operations), and 0.3 ms for the cut in the paste when something is found.
It runs in the composite stage (`find_occluders`), beside the analyse stage's landmarker.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import cv2
import numpy as np
import numpy.typing as npt

from engines.classic.blend import FaceMasks
from engines.face import Face, ImageBGR, Landmarks68, Occlusion
from engines.geometry.face_align import fit_similarity

SIZE = 64  # canonical face frame, pixels a side
_SPAN = 38.0  # the template's landmark box, pixels (the rest is margin for registration)
_CENTRE = (32.0, 38.0)  # the template's landmark box centre
_WARP_SCALE = 2  # warped at twice SIZE, then area-averaged: no aliasing of the face's texture
# A pixel is off when |difference| > max(floor, K_SPREAD x its running deviation) in luma or
# in chroma: the bar of the quality suite's occluder clip is ~100 luma levels off the skin,
# a cup's red ~40 chroma levels off; a face's own lighting and expression changes stay under
# these after the median shift.
LUMA_FLOOR = 32.0
CHROMA_FLOOR = 14.0
K_SPREAD = 3.5
# A pixel is compared with the remembered face within this many canonical pixels around it
# (about 5% of the face): landmarks a few pixels off on a small or tilted face shift the whole
# crop, and every edge (hair against skin, the jaw against the wall) would read as a blob.
SLACK = 2
MIN_BLOB = 0.03  # smallest occluder blob, as a share of the compared area
LEARN = 0.08  # weight of a clean frame in the running mean and variance
_WARMUP = 5  # clean frames before the reference is trusted
_KERNEL = np.ones((3, 3), np.uint8)
_SLACK_KERNEL = np.ones((2 * SLACK + 1, 2 * SLACK + 1), np.uint8)
_WINDOW = cv2.createHanningWindow((SIZE, SIZE), cv2.CV_32F)
MAX_REGISTER = SIZE / 8  # largest shift registration may make, canonical pixels


def _channel_max(image: np.ndarray) -> np.ndarray:
    """The largest of a 3-channel image's channels, pixel by pixel."""
    a, b, c = cv2.split(image)
    return cv2.max(cv2.max(a, b), c)


def _median_rows(rows: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """`np.median(rows, axis=0)` of a (n, c) float32 array without NaNs, the same numbers: the
    middle row of each column after a partition (the mean of the two middle ones for an even
    n), without np.median's general-case overhead (0.1 ms a call here)."""
    n = len(rows)
    half = n // 2
    if n % 2:
        return np.partition(rows, half, axis=0)[half]
    part = np.partition(rows, (half - 1, half), axis=0)
    return (part[half - 1] + part[half]) * np.float32(0.5)


class AppearanceReference:
    """One track's remembered appearance in its canonical face frame (owned by the tracker).

    `every` (track.occlusion_every): a face seen clean whose last look found nothing in front
    of it is looked at on one frame in `every` only (`phase`, its track's id, makes the faces
    of a frame take turns); in between nothing is in front of it, as the last look said, and
    the frames not looked at count in the next learning step's weight, so the reference keeps
    its time constant. A face with something in front, not seen clean, or not yet learnt is
    looked at on every frame."""

    def __init__(self, landmarks: Landmarks68, every: int = 1, phase: int = 0) -> None:
        self.every = max(int(every), 1)
        self._turn = int(phase)
        self._found = False  # whether the last look found an occluder
        self._unseen = 0  # frames passed over since the last look
        lm = np.asarray(landmarks, np.float64)
        lo, hi = lm.min(axis=0), lm.max(axis=0)
        scale = _SPAN / max(float((hi - lo).max()), 1.0)
        self.template = (lm - (lo + hi) / 2) * scale + np.array(_CENTRE)
        # The 68 points' hull only: above the brows the swapper keeps whatever is not skin
        # (keep_target_hair), and there the hairline's edge moves against the landmarks.
        area = np.zeros((SIZE, SIZE), np.uint8)
        cv2.fillConvexPoly(area, cv2.convexHull(np.round(self.template).astype(np.int32)), 255)
        self.area = area > 0
        self.area_px = int(self.area.sum())
        # Every other pixel of the area, every other row: enough for the lighting shift's median.
        sparse = np.zeros_like(self.area)
        sparse[::2, ::2] = self.area[::2, ::2]
        self._sparse = np.flatnonzero(sparse)  # row-major, as a boolean mask picks them
        self.mean: npt.NDArray[np.float32] | None = None
        self._floor = np.empty((SIZE, SIZE, 3), np.float32)
        self._floor[:] = (LUMA_FLOOR, CHROMA_FLOOR, CHROMA_FLOOR)
        self.var = np.zeros((SIZE, SIZE, 3), np.float32)
        self.seen = 0

    def canonical(self, image: ImageBGR, to_canon: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """The picture warped to the canonical frame by `to_canon` (YCrCb, float32), the 2x3
        map back to frame pixels, and where the canonical frame lies on the picture (None:
        all of it)."""
        big = to_canon * _WARP_SCALE
        n = SIZE * _WARP_SCALE
        crop = cv2.warpAffine(image, big, (n, n), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        crop = cv2.resize(crop, (SIZE, SIZE), interpolation=cv2.INTER_AREA)
        ycc = cv2.cvtColor(crop, cv2.COLOR_BGR2YCrCb).astype(np.float32)
        to_frame = cv2.invertAffineTransform(to_canon)
        h, w = image.shape[:2]
        corners = np.array([[0, 0, 1], [SIZE, 0, 1], [0, SIZE, 1], [SIZE, SIZE, 1]], np.float64) @ to_frame.T
        inside = None
        if corners.min() < 0 or corners[:, 0].max() > w or corners[:, 1].max() > h:
            # Part of the canonical frame lies off the picture: nothing there to compare.
            inside = cv2.warpAffine(np.full((h, w), 255, np.uint8), big, (n, n), flags=cv2.INTER_NEAREST)
            inside = cv2.resize(inside, (SIZE, SIZE), interpolation=cv2.INTER_AREA) == 255
        return ycc, to_frame, inside

    def update(self, image: ImageBGR, landmarks: Landmarks68, clean: bool) -> Occlusion | None:
        """Compare this frame's face with the reference and learn from it when `clean` (the
        face detected, not held behind something): the occluders found, or None."""
        if self.area_px < 64:
            return None
        self._turn += 1
        if (self.every > 1 and clean and not self._found and self.seen >= _WARMUP
                and self._turn % self.every):
            self._unseen += 1
            return None
        unseen, self._unseen = self._unseen, 0
        linear, mu_s, mu_t = fit_similarity(np.asarray(landmarks, np.float64), self.template)
        to_canon = np.hstack([linear.T, (mu_t - mu_s @ linear)[:, None]])
        ycc, to_frame, inside = self.canonical(image, to_canon)
        if self.mean is None:
            if clean:
                self.mean = ycc
                self.seen = 1
            return None
        # Landmarks a few pixels off the face (pulled by the occluder before the face was held,
        # or a small face's jitter) shift the whole crop: registered again on the picture
        # itself (phase correlation of the luma, which a bar over part of the face barely moves).
        (dx, dy), response = cv2.phaseCorrelate(self.mean[:, :, 0].copy(), ycc[:, :, 0].copy(), _WINDOW)
        if 0.75 <= np.hypot(dx, dy) <= MAX_REGISTER and response > 0.05:
            back = np.array([[1.0, 0.0, dx], [0.0, 1.0, dy]])
            ycc = cv2.warpAffine(ycc, back, (SIZE, SIZE), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                                 borderMode=cv2.BORDER_REPLICATE)
            to_frame = to_frame.copy()
            to_frame[:, 2] += to_frame[:, :2] @ np.array([dx, dy])
        diff = ycc - self.mean
        diff -= _median_rows(diff.reshape(-1, 3)[self._sparse])  # the lighting's shift
        tol = cv2.max(self._floor, K_SPREAD * cv2.sqrt(self.var))
        mask = None
        if self.seen >= _WARMUP:
            # Off from every remembered pixel within SLACK: above the brightest and darker
            # than the darkest there (channel by channel), by more than the tolerance.
            now = self.mean + diff
            excess = cv2.max(now - cv2.dilate(self.mean, _SLACK_KERNEL) - tol,
                             cv2.erode(self.mean, _SLACK_KERNEL) - now - tol)
            far = (_channel_max(excess) > 0) & self.area
            if inside is not None:
                far &= inside
            blobs = self._blobs(far.view(np.uint8))
            # Its edge pixels may lie within SLACK of like ones.
            mask = None if blobs is None else np.asarray(cv2.dilate(blobs, _KERNEL), np.uint8)
        if clean:
            # A clean frame teaches the pixels that look as expected at the full rate, those
            # that do not (an occluder coming in before it is a blob of its own size, a face
            # turning) at a tenth of it, and the blobs not at all; the squared difference a
            # pixel adds to its variance is capped, so one frame of a bar passing over it
            # does not make that pixel blind to the bar for the next second.
            rate = max(LEARN, 1.0 / (self.seen + 1))
            if unseen:  # the frames passed over weigh as if each had been learnt from
                rate = 1.0 - (1.0 - rate) ** (unseen + 1)
            off = (_channel_max(np.abs(diff) - tol) > 0).view(np.uint8)
            near = cv2.dilate(off, _KERNEL) * np.uint8(255)
            blocked = None if mask is None else cv2.dilate(mask, _KERNEL, iterations=2)
            slow = near if blocked is None else cv2.subtract(near, blocked)
            full = cv2.bitwise_not(near if blocked is None else cv2.max(near, blocked))
            sq = cv2.min(diff * diff, self._floor * self._floor)
            now = self.mean + diff
            for weight, where in ((rate, full), (rate / 10, slow)):
                cv2.accumulateWeighted(now, self.mean, weight, mask=where)
                cv2.accumulateWeighted(sq, self.var, weight, mask=where)
            self.seen += 1
        self._found = mask is not None
        if mask is None:
            return None
        return Occlusion(mask=mask, to_frame=to_frame.astype(np.float32))

    def _blobs(self, off: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8] | None:
        """The connected blobs of `off` (after an opening) of at least MIN_BLOB of the area,
        as a 0/255 mask; None when there are none."""
        opened = cv2.morphologyEx(off, cv2.MORPH_OPEN, _KERNEL)
        _, labels, stats, _ = cv2.connectedComponentsWithStats(opened, connectivity=8)
        big = np.flatnonzero(stats[1:, cv2.CC_STAT_AREA] >= MIN_BLOB * self.area_px) + 1
        if big.size == 0:
            return None
        return np.where(np.isin(labels, big), 255, 0).astype(np.uint8)


def find_occluders(image: ImageBGR, faces: Sequence[Face]) -> list[Face]:
    """`faces` with their `occlusion` set from their `look` (what stands in front of each in
    `image`); a face without a look as it is. Each call teaches the references: call it once
    per frame, in frame order, on the frame before any swap is pasted into it. The composite
    stage does, for a swapper that cuts occluders out (so this work stays off the analyse
    stage, which the landmarker already keeps the busiest)."""
    if image.ndim != 3:
        return list(faces)
    out = []
    for face in faces:
        found = None if face.look is None else \
            face.look.reference.update(image, face.landmarks, face.look.clean)
        out.append(face if found is None else replace(face, occlusion=found))
    return out


def cut_occlusion(masks: FaceMasks, occlusion: Occlusion, origin: tuple[int, int], radius: int) -> FaceMasks:
    """A region's blend masks (its top-left corner at `origin` in the frame) with the
    occluders taken out: alpha 0 on them and rising over `radius` pixels outside them; core 0
    on them and `radius` around (colour statistics leave them out)."""
    h, w = masks.alpha.shape[:2]
    m = occlusion.to_frame.astype(np.float64).copy()
    m[:, 2] -= origin
    hard = cv2.warpAffine(occlusion.mask, m, (w, h), flags=cv2.INTER_LINEAR)
    if not hard.any():
        return masks
    _, hard = cv2.threshold(hard, 127, 255, cv2.THRESH_BINARY)
    r = max(int(radius), 2)
    grown = cv2.dilate(hard, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (r + 1 - r % 2,) * 2))
    soft = cv2.GaussianBlur(grown, (2 * r + 1, 2 * r + 1), 0)
    cv2.max(soft, hard, dst=soft)
    keep = cv2.bitwise_not(soft)
    return FaceMasks(alpha=cv2.multiply(masks.alpha, keep, scale=1 / 255.0),
                     core=cv2.min(masks.core, cv2.bitwise_not(grown)))
