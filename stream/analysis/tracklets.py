"""Tracklets: target faces followed across frames, so the costly models run rarely.

Per track the cache holds the detector-convention box, the smoothed landmarks, the
identity embedding (computed once when needed, re-checked rarely), the source face it
maps to, and its age. Per frame:

- detection runs every `detect.every` frames, and on the next frame whenever a track
  lost confidence (a detection missed it, or its landmarks jumped); its boxes are
  matched to tracks by overlap, unmatched boxes start tracks, tracks missed too often end;
- landmarks run on every frame on each track's box, which between detections is moved
  as the picture of the face moved (optical flow of its inner points, `face_motion`), so
  points pulled by an occluder or an edge do not drag the box; where the flow cannot follow
  the face (no texture) the box follows the landmarks (the detector box expressed relative
  to the landmarks' bounding box at the last detection), except at the frame's edge, where
  a face the flow loses has left (the predictor would clamp its points to the edge); a face
  the flow followed and then loses (something in front of it, or a cut) keeps its last
  motion instead until a detection says which, and while something is in front of a face
  (the flow lost it, or the detector misses it) its last points move with it rather than
  being placed anew, where the predictor's would follow the occluder; so do they from the
  first frame the flow loses part of the face (`COVERED_SHARE`), before it loses all of it;
- a detection that misses a followed face does not end it at once when the detector can
  confirm a box (the dlib engine's face filter: landmarks laid out as a face, an embedding
  that reads as one): a face behind a cup or a bar is still a face there, and is kept for up
  to `track.max_held` detections; where the filter reads no face (a bar across the eyes)
  but the face's picture is still followed, or the filter read one behind the occluder
  before, it is kept for up to MAX_DOUBTED detections in a row, each on the next frame; on a
  scene cut the box holds no face and the track ends;
- with no face followed, detection runs every `detect.every_empty` frames (nothing else is
  computed then), so a face coming in is swapped within a frame or two;
- landmarks are smoothed so the swapped face does not jitter (`track.smoothing`): by
  default the face's pose through a constant-velocity Kalman filter and its shape through a
  One-Euro filter (`track.smoother: pose`, stream/analysis/pose_smoother.py), or every point
  through a One-Euro filter (`one-euro`); with `track.points: detector` each face also carries the detector's
  own five points from this frame's detection (detection on every frame), for alignment;
- a detection's box replaces a followed face's only where dlib's points on it stay near
  where the optical flow carried the face's points (BOX_JUMP): the predictor depends on its
  box, and HOG boxes a face at scales 1.2x apart (a face between two of them flips from
  one to the other from detection to detection) and larger with a cup in front of it. On
  such a jump the predictor is given the face's own box, its last detection's box relative
  to its points, laid on where the flow carried them, and the detection only confirms the
  face; the next detection is taken as it comes, so a drifting box is still set right. A
  face turned so far that its far cheek is hidden is not checked (MAX_TURN);
- a face stays while any of it is inside the frame: one mostly outside is still swapped,
  as insightface swaps every face its detector finds (between detections a face the optical
  flow loses at the frame's edge ends: see above).

Live runs detect in the background (`BackgroundDetector`) while there are tracks to
follow: the frame due for detection is copied to a detection thread and tracking goes
on; the boxes are merged into the tracks a few frames later, moved by how far each
track's landmarks moved meanwhile. A late box that no track takes (a face that came
in, or one whose track was lost meanwhile) only says where a face was: then that frame
is detected in line instead, so no track starts where there is no face. The analyse
stage then never waits a whole detection (the largest per-frame cost), so no frame's
latency carries it. With no track (the
start, an empty scene) detection runs in line, so a face is swapped from its first frame.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engines.classic.occlusion import AppearanceReference
from engines.face import Box, Face, ImageBGR, Keypoints5, Landmarks68, Look, iou
from engines.frame_views import FrameViews
from engines.geometry.measures import face_turn
from engines.protocols import Detector, Embedder, Landmarker, PointDetector
from stream.analysis.background_detector import BackgroundDetector
from stream.analysis.face_motion import face_motion, follow_face, move_box
from stream.analysis.one_euro import OneEuroFilter
from stream.analysis.pose_smoother import PoseShapeSmoother
from stream.config import DetectConfig, TrackConfig
from stream.errors import ConfigError

log = logging.getLogger(__name__)

# Frames after a face was lost during which every detection scans the whole frame (3 s at
# 30 fps): the face may come back anywhere (from behind something, into the frame), and a
# detection looking only near the faces still followed would not see it (panned-group: a face
# behind a board for 1 s was not found again in the 0.7 s left of the clip).
LOST_SCAN_FRAMES = 90
# Landmark box changes beyond these in one frame mean the predictor lost the face.
MAX_SCALE_JUMP = 1.35
MAX_SHIFT_JUMP = 0.5  # of the face size
# A face followed by optical flow keeps its last motion while the flow loses it (an occluder
# crossing it), confirmed by a detection every this many frames.
MAX_COAST = 6
# Detections in a row that may keep a held face the face filter does not confirm, while the
# optical flow follows its picture (an occluder over the eyes, not a scene cut).
MAX_DOUBTED = 2
# Shares of a followed face's inner points that the optical flow follows (a bare face's:
# 0.88-1.0). Under COVERED_SHARE something has come in front of part of the face: its last
# points move with the flow instead of being placed anew by the predictor, which follows the
# occluder's edge (a bar entering a still face dragged them 7 px before the flow lost it, the
# held swap sat that far off the face for 20 frames and snapped back: flicker 1.17x the
# input's). Under LOST_SHARE the fit to what is left is not the face's motion (a bar over
# half the face turned it by 3 degrees): the face keeps its last motion, as when the flow
# loses it, but counts as followed (no scene cut), so a detection is not forced.
COVERED_SHARE = 0.8
LOST_SHARE = 0.6
# Mean distance, in units of the distance between the eyes' centres, between dlib's points on
# a detection's box and the face's last points moved as the optical flow moved its picture,
# beyond which the box is taken for a jump of the box, not of the face. On the quality clips a
# detection moves a frontal face's points by 0.01-0.05 and a 40 px face's by up to about 0.1;
# with `quality` (detection every 5 frames, the frame scanned 2x) the jumps that painted the
# occluder clip's face too wide (the cup in front of it) and the rolling face askew were
# 0.14-0.29.
BOX_JUMP = 0.12
KEEP_IOU = 0.5  # the face's own box must overlap the detection's this much to be kept instead
# A face turned further (engines.classic.blend.face_turn: 0 frontal, near 1 with the far cheek hidden)
# is not checked: dlib's points on it depend on the box several times more than on a frontal
# face (a 5% move of the box moves them 0.03-0.075 against 0.01-0.02), and which box fits it
# better is a toss (checked too, the default's small clip: shift 0.089 -> 0.081, but the
# overlap clip's flicker 1.018 -> 1.027x and `quality`'s small jitter 1.58 -> 1.63x).
MAX_TURN = 0.5
VELOCITY_MIX = 0.5  # weight of this frame's shift in a track's velocity (an exponential average)
COAST_KEEP = 0.7  # share of its velocity a coasting box keeps each frame (it travels <= 3.3x it)


def _followed_cleanly(tr: Track) -> bool:
    """The optical flow follows the face's picture, nothing in front of it, no detection
    missing it: its points can be carried, its box trusted between refinements."""
    return bool(tr.age and tr.flowed and not (tr.coasted or tr.covered or tr.held or tr.doubted))


def _settled(tr: Track) -> bool:
    """Followed cleanly, its box not just kept for a jump (BOX_JUMP): a detection may only
    confirm it (detect.refine_every)."""
    return _followed_cleanly(tr) and not tr.box_kept


def landmark_box(points: Landmarks68) -> Box:
    x0, y0 = points.min(axis=0)
    x1, y1 = points.max(axis=0)
    return (float(x0), float(y0), float(x1), float(y1))


def relate(box: Box, ref: Box) -> tuple[float, float, float, float]:
    """`box` expressed relative to `ref` (centre offset and size, in units of ref's size)."""
    rw, rh = max(ref[2] - ref[0], 1.0), max(ref[3] - ref[1], 1.0)
    return (
        ((box[0] + box[2]) / 2 - (ref[0] + ref[2]) / 2) / rw,
        ((box[1] + box[3]) / 2 - (ref[1] + ref[3]) / 2) / rh,
        (box[2] - box[0]) / rw,
        (box[3] - box[1]) / rh,
    )


def unrelate(rel: tuple[float, float, float, float], ref: Box) -> Box:
    rw, rh = max(ref[2] - ref[0], 1.0), max(ref[3] - ref[1], 1.0)
    cx = (ref[0] + ref[2]) / 2 + rel[0] * rw
    cy = (ref[1] + ref[3]) / 2 + rel[1] * rh
    w, h = rel[2] * rw, rel[3] * rh
    return (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)


@dataclass(eq=False)
class Track:
    """One target face followed across frames (mutable: owned by the tracker)."""

    id: int
    box: Box
    landmarks: Landmarks68
    rel: tuple[float, float, float, float]
    smoother: OneEuroFilter | PoseShapeSmoother
    score: float = 0.0
    born: int = 0
    age: int = 0
    missed: int = 0
    held: int = 0  # detections in a row that missed it but whose box the detector confirmed
    doubted: int = 0  # of those, the last ones in a row kept unconfirmed (its picture followed)
    flowed: bool = False  # its picture has been followed by optical flow (it has texture)
    velocity: tuple[float, float] = (0.0, 0.0)  # its box's shift a frame, while the flow follows it
    coasted: int = 0  # frames in a row the flow lost it and the box kept its last motion
    step: np.ndarray | None = field(default=None, repr=False)  # 2x3: how its box moved this frame
    at_submit: Box | None = field(default=None, repr=False)  # landmark box when a detection was sent
    embedding: np.ndarray | None = None
    embedded_at: int = -1
    source: int | None = None  # index of the source face this track maps to; None: not swapped
    raw: Landmarks68 = field(default_factory=lambda: np.zeros((68, 2), np.float32), repr=False)
    matched: bool = field(default=False, repr=False)
    kps5: Keypoints5 | None = field(default=None, repr=False)  # the detector's points, this frame's
    order: int = 0  # its detection's place in the detector's output, at the last detection
    appearance: AppearanceReference | None = field(default=None, repr=False)  # track.occlusion
    look: Look | None = field(default=None, repr=False)  # this frame's, for the composite stage
    covered: bool = False  # the flow lost part of its face (COVERED_SHARE): something in front
    box_kept: bool = False  # its last detection's box was taken for a jump (BOX_JUMP)
    memo: dict[str, Any] = field(default_factory=dict, repr=False)  # the composite's, per track (Face.memo)
    confirmed: int = 0  # detections in a row that only confirmed it (detect.refine_every)

    def face(self) -> Face:
        return Face(box=landmark_box(self.landmarks), landmarks=self.landmarks,
                    score=self.score, track_id=self.id, kps5=self.kps5, look=self.look, memo=self.memo)


class Tracker:
    """Keeps the tracks of one stream up to date, one frame at a time."""

    def __init__(
        self,
        detector: Detector,
        landmarker: Landmarker,
        embedder: Embedder | None,
        detect: DetectConfig,
        track: TrackConfig,
        background: bool = False,
        lag: int | None = None,
        stagger: bool = True,
    ) -> None:
        self.detector = detector
        self.landmarker = landmarker
        self.embedder = embedder
        self.detect_cfg = detect
        self.track_cfg = track
        self.tracks: list[Track] = []
        self._next_id = 0
        self._last_detect = -(10**9)
        self._force_detect = True
        # Frames between scheduled detections: detect.every, raised by a live run under load.
        self.detect_every = detect.every
        self.background = BackgroundDetector(detector) if background else None
        # With a background detector: None, its boxes are merged as soon as they are there
        # (live); N, exactly N frames after the frame they were found in (files: the same
        # output whatever the machine's speed; detect.lag).
        self.lag = lag
        if track.points == "detector" and not isinstance(detector, PointDetector):
            raise ConfigError(f"track.points 'detector' needs a detector that finds five points "
                              f"(the neural engine's SCRFD); {detector.name!r} finds none")
        # Late boxes set aside for a detection in line (a face came in or was lost meanwhile).
        self.redetections = 0
        self.boxes_kept = 0  # detections whose box was taken for a jump of the box (BOX_JUMP)
        self._prev_grey: np.ndarray | None = None  # the last frame, for the faces' optical flow
        # Frames between the predictor's placements of a face's points (track.landmarks_every;
        # a live run that falls behind raises it: stream.job.cadence).
        self.landmarks_every = track.landmarks_every
        # With landmarks_every > 1, the faces take turns (by id), each frame placing the points
        # of about 1/n of them: a live frame's cost stays even. Without (files), every face's
        # points are placed on the same frames, in one call of the predictor: its cost a call
        # is mostly the same for one face as for several (six faces: 6.3 ms at once against
        # 3 x 2.8 ms by turns), and a file needs throughput, not even frames.
        self.stagger = stagger
        self.points_carried = 0  # a face's points moved by the flow instead of placed (landmarks_every)
        self.confirmations = 0  # detections that only confirmed a followed face (detect.refine_every)
        self._settled_ids: set[int] = set()  # the tracks the pending detection only confirms
        # Detections since the last that scanned the whole frame (detect.scan_every), and
        # how many looked only near the faces followed.
        self._near_runs = 0
        self.near_detections = 0
        # Until this frame, every detection scans the whole frame: a face was lost (covered,
        # gone out of the frame), and where it comes back need not be near the faces followed.
        self._scan_until = -1
        self._seq = -1

    @property
    def tracks_started(self) -> int:
        return self._next_id

    def _new_filter(self) -> OneEuroFilter | PoseShapeSmoother:
        if self.track_cfg.smoother == "pose":
            return PoseShapeSmoother()
        return OneEuroFilter(self.track_cfg.min_cutoff, self.track_cfg.beta)

    def update(self, frame: FrameViews, seq: int, t: float) -> list[Track]:
        """Advance every track to this frame; returns the confirmed ones.

        A track that missed its last detection is still followed (a detector can miss a
        face once) but not returned until a detection confirms it: on a scene cut the old
        faces must not be swapped onto whatever is now where they were."""
        every = self.detect_every if self.tracks else min(self.detect_every, self.detect_cfg.every_empty)
        due = seq - self._last_detect >= every
        self._seq = seq
        before = {tr.id for tr in self.tracks}
        if self.background is not None:
            self._detect_in_background(frame, seq, due)
        elif due or self._force_detect:
            scheduled = not self._force_detect
            self._force_detect = False  # before: the detection itself may ask for another
            self._last_detect = seq
            self._merge_detected(frame, seq, scheduled)
        h, w = frame.shape
        grey = _grey(frame)
        followed: list[Track] = []
        for tr in self.tracks:
            tr.step = None
            if not tr.matched:  # between detections: the box moves as the face's picture moved
                followed_now = (follow_face(self._prev_grey, grey, tr.raw, dense=tr.covered)
                                if grey is not None and self._prev_grey is not None
                                and self._prev_grey.shape == grey.shape else None)
                motion, share = followed_now if followed_now is not None else (None, 1.0)
                # Part of the face hidden: the predictor's points would follow what is in front.
                tr.covered = share < COVERED_SHARE
                if share < LOST_SHARE:
                    # Most of it hidden: the fit to the rest is no longer the face's motion.
                    # It keeps its last one, slowing (as when the flow loses it), but is still
                    # followed: part of its picture is, so this is no scene cut.
                    motion = _last_motion(tr)
                if motion is not None:
                    moved = move_box(tr.box, motion)
                    # Averaged: an occluder crossing the face jolts the flow's single frames.
                    if not tr.covered:  # a covered face's fit is the less sure: not extrapolated
                        tr.velocity = _mix(tr.velocity, _centre_shift(tr.box, moved), VELOCITY_MIX)
                    tr.box, tr.flowed, tr.coasted, tr.step = moved, True, 0, motion
                elif tr.flowed and _inside(tr.box, w, h):
                    # A face followed by its picture that suddenly cannot be: something in
                    # front of it, or a scene cut. The predictor's points would follow the
                    # occluder, so the box keeps its last motion, and a detection on the next
                    # frame, and every MAX_COAST frames after while the flow stays lost, says
                    # which: the face found (its points are then followed again), the face
                    # filter confirming a face in the box (kept up to track.max_held times),
                    # or neither (the track is hidden and ends).
                    tr.step = _last_motion(tr)
                    tr.box = move_box(tr.box, tr.step)
                    self._force_detect = self._force_detect or tr.coasted % MAX_COAST == 0
                    tr.coasted += 1
                elif _inside(tr.box, w, h):
                    tr.box = unrelate(tr.rel, landmark_box(tr.raw))
                    # A face whose picture was followed and now cannot be: a scene cut, or
                    # something in front of it; a detection on the next frame says which
                    # (once: an occluder crossing the face stops the flow for a while).
                    self._force_detect = self._force_detect or tr.flowed
                    tr.flowed, tr.coasted = False, 0
                else:
                    log.debug("track %d lost at the frame's edge", tr.id)
                    self._force_detect = True
                    continue
            followed.append(tr)
        self.tracks = followed
        alive: list[Track] = []
        found = self._place_points(frame, seq)
        for k, tr in enumerate(self.tracks):
            if tr.matched:
                kept, tr.box_kept = tr.box_kept, False
                if not kept:
                    self._check_box(tr, frame, grey, found, k)
        for tr, raw in zip(self.tracks, found):
            if tr.covered and tr.step is None:  # a detection's frame: no flow, taken as still
                tr.step = np.eye(2, 3)
            if tr.age and tr.step is not None and (tr.held or tr.doubted or tr.coasted or tr.covered):
                # Something in front of the face (the detector misses it, or its picture cannot
                # be followed): the predictor's points would follow the occluder, so its last
                # points move as its picture (or its box) moved.
                raw = (tr.raw @ tr.step[:, :2].T + tr.step[:, 2]).astype(np.float32)
            if tr.age and self._jumped(tr.raw, raw):
                self._force_detect = True
                if not tr.matched:
                    continue  # lost, and no detection confirms it this frame: end it
                tr.smoother.reset()  # a detection moved it: do not smooth across the jump
            if tr.matched:
                if not tr.box_kept:  # a kept box is the face's own: its relation stays
                    tr.rel = relate(tr.box, landmark_box(raw))
                tr.matched = False
            tr.raw = raw
            tr.landmarks = tr.smoother(raw, t) if self.track_cfg.smoothing else raw
            tr.age += 1
            if not _on_frame(tr.landmarks, w, h):
                continue
            if self.track_cfg.occlusion:
                self._look_for_occluders(tr)
            alive.append(tr)
        self.tracks = alive
        if alive and grey is not None:
            if self._prev_grey is None or self._prev_grey.shape != grey.shape:
                self._prev_grey = np.empty_like(grey)
            np.copyto(self._prev_grey, grey)
        if before - {tr.id for tr in alive}:
            self._scan_until = seq + LOST_SCAN_FRAMES
        return [tr for tr in alive if tr.missed == 0]

    def _place_points(self, frame: FrameViews, seq: int) -> list[Landmarks68]:
        """Each track's points this frame: the predictor's in its box, or, for a face followed
        cleanly between the predictor's turns (track.landmarks_every), its last points moved
        as the flow moved its picture. Staggered, the faces take turns (by id), so each frame
        runs the predictor on about 1/n of them; otherwise all of them on every n-th frame."""
        every = self.landmarks_every
        found: list[Landmarks68 | None] = [None] * len(self.tracks)
        placed = []
        for k, tr in enumerate(self.tracks):
            if every > 1 and not tr.matched and tr.step is not None and _followed_cleanly(tr) \
                    and (seq + (tr.id if self.stagger else 0)) % every:
                found[k] = (tr.raw @ tr.step[:, :2].T + tr.step[:, 2]).astype(np.float32)
                self.points_carried += 1
            else:
                placed.append(k)
        if placed:
            boxes = [self.tracks[k].box for k in placed]
            for k, points in zip(placed, self.landmarker.forward_many(frame, boxes)):
                found[k] = points
        return found  # type: ignore[return-value]

    def _check_box(self, tr: Track, frame: FrameViews, grey: np.ndarray | None,
                   found: list[Landmarks68], k: int) -> None:
        """On a detection's frame, for a face followed by the optical flow: a detection's box
        that moves dlib's points (`found[k]`) more than BOX_JUMP from where the flow carried
        the face's is a jump of the box, and the points are found on the face's own box (its
        last detection's, relative to its points) at the carried points instead."""
        prev = self._prev_grey
        if (not tr.age or not tr.flowed or tr.coasted or tr.covered or self.track_cfg.points == "detector"
                or grey is None or prev is None or prev.shape != grey.shape
                or face_turn(tr.raw) > MAX_TURN):  # (a similarity moves no face's turn)
            return
        followed = follow_face(prev, grey, tr.raw)
        if followed is None or followed[0] is None or followed[1] < COVERED_SHARE:
            return
        motion = followed[0]
        carried = (tr.raw @ motion[:, :2].T + motion[:, 2]).astype(np.float32)
        eyes = float(np.linalg.norm(carried[36:42].mean(axis=0) - carried[42:48].mean(axis=0)))
        moved = float(np.linalg.norm(found[k] - carried, axis=1).mean()) / max(eyes, 1.0)
        if moved <= BOX_JUMP:
            return
        own = unrelate(tr.rel, landmark_box(carried))
        if iou(own, tr.box) < KEEP_IOU:  # not the detection's face any more: take the detection
            return
        log.debug("track %d: the detection's box moves its points by %.2f, its own box kept", tr.id, moved)
        found[k] = self.landmarker.forward_many(frame, [own])[0]
        tr.box, tr.box_kept = own, True
        self.boxes_kept += 1

    def _look_for_occluders(self, tr: Track) -> None:
        """The face's look for occluders this frame: its remembered appearance (made when it is
        first seen clean) and whether it is clean now (detected, not held or coasting behind
        something: the reference learns from clean frames only). The comparison itself is
        the composite stage's (engines.classic.occlusion.find_occluders)."""
        clean = tr.missed == 0 and not (tr.held or tr.doubted or tr.coasted or tr.covered)
        if tr.appearance is None:
            if not clean:
                tr.look = None
                return
            tr.appearance = AppearanceReference(tr.landmarks, self.track_cfg.occlusion_every, tr.id)
        tr.look = Look(tr.appearance, clean)

    def _detect_in_background(self, frame: FrameViews, seq: int, due: bool) -> None:
        bg = self.background
        assert bg is not None
        if self.lag is None:
            done = bg.poll()
        else:
            done = bg.wait() if bg.pending and seq - bg.submitted_at >= self.lag else None
        if done is not None:
            self._merge_late(done, frame, seq)
            if self._last_detect == seq:  # it detected this frame in line
                return
        if not (due or self._force_detect):
            return
        scheduled = not self._force_detect
        if not self.tracks and not bg.pending:
            # Nothing to follow meanwhile (the start, an empty scene): detect in line, so a
            # face is swapped from the frame it is found in.
            self._force_detect = False
            self._last_detect = seq
            self._merge_detected(frame, seq)
        elif bg.submit(frame.bgr, self._settle(), seq, near := self._near(scheduled)):
            self._count_scan(near)
            self._force_detect = False
            self._last_detect = seq
            for tr in self.tracks:
                tr.at_submit = landmark_box(tr.raw) if tr.age else None

    def _near(self, scheduled: bool) -> list[Box] | None:
        """The boxes this detection looks near, instead of scanning the whole frame
        (detect.scan_every), or None: it scans the frame. Only a scheduled detection (none
        asked for by a face lost or jumping) while every face is followed cleanly and none
        was missed looks near them, and at most scan_every - 1 in a row; none for
        LOST_SCAN_FRAMES after a face was lost."""
        every = self.detect_cfg.scan_every
        near = (every > 1 and scheduled and self._near_runs < every - 1 and bool(self.tracks)
                and self._seq > self._scan_until
                and self.track_cfg.points == "landmarks"
                and getattr(self.detector, "looks_near", hasattr(self.detector, "forward_near"))
                and all(_followed_cleanly(tr) and not tr.missed for tr in self.tracks))
        return [tr.box for tr in self.tracks] if near else None

    def _count_scan(self, near: list[Box] | None) -> None:
        """A detection started: one more that looked near the faces only, or a scan."""
        if near is None:
            self._near_runs = 0
        else:
            self._near_runs += 1
            self.near_detections += 1

    def _settle(self) -> list[Box]:
        """The boxes of the tracks this detection only confirms (detect.refine_every; the
        detector leaves boxes overlapping them unrefined): faces the flow follows cleanly
        whose box was refined at one of their last refine_every - 1 detections. Their ids
        are remembered for the merge."""
        every = self.detect_cfg.refine_every
        settled: list[Track] = []
        if every > 1 and self.detect_cfg.refine and self.track_cfg.points == "landmarks" \
                and getattr(self.detector, "refines_boxes", False):
            settled = [tr for tr in self.tracks if _settled(tr) and tr.confirmed < every - 1]
        self._settled_ids = {tr.id for tr in settled}
        return [tr.box for tr in settled]

    def _match(self, dets: list[tuple[Box, float]],
               placed: Callable[[Track, Box], Box]) -> tuple[list[tuple[int, int]], list[int]]:
        """Pairs (track, detection) by overlap, best first, and the detections no track took."""
        pairs = sorted(
            ((iou(tr.box, placed(tr, box)), ti, di) for ti, tr in enumerate(self.tracks)
             for di, (box, _) in enumerate(dets)),
            reverse=True,
        )
        used_t: set[int] = set()
        used_d: set[int] = set()
        matched: list[tuple[int, int]] = []
        for overlap, ti, di in pairs:
            if overlap < self.track_cfg.match_iou:
                break
            if ti in used_t or di in used_d:
                continue
            used_t.add(ti)
            used_d.add(di)
            matched.append((ti, di))
        return matched, [di for di in range(len(dets)) if di not in used_d]

    def _merge_detected(self, frame: FrameViews, seq: int, scheduled: bool = False) -> None:
        """Detect on this frame, in line, and merge (with the detector's points when the
        run aligns with them). `scheduled`: a detection due by the cadence, which may look
        only near the faces followed (`_near`)."""
        if self.track_cfg.points == "detector":
            found = self.detector.forward_points(frame)  # type: ignore[attr-defined]
            self._merge([(box, score) for box, score, _ in found], frame, seq, [k for _, _, k in found])
            return
        boxes = self._settle()
        near = self._near(scheduled)
        self._count_scan(near)
        if near is not None:
            dets = self.detector.forward_near(frame, near, boxes)  # type: ignore[attr-defined]
        else:
            dets = self.detector.forward(frame, boxes) if boxes else self.detector.forward(frame)
        self._merge(dets, frame, seq)

    def _merge(self, dets: list[tuple[Box, float]], frame: FrameViews, seq: int,
               points: list[Keypoints5] | None = None) -> None:
        """Boxes detected on this frame: matched to tracks; unmatched boxes start tracks,
        tracks missed too often end."""
        matched, new = self._match(dets, lambda tr, box: box)
        self._apply(matched, new, dets, frame, seq, lambda tr, box: box, points)

    def _merge_late(self, dets: list[tuple[Box, float]], frame: FrameViews, seq: int) -> None:
        """Boxes of a background detection, made on the frame it was sent with. For a
        followed face the box is moved as its landmarks moved since then. A box no track
        takes (a face that came in, or one whose track was lost meanwhile) says only where
        a face *was*: a track started there pastes a face on whatever is there now (the
        ghost beside a head of an RTSP run under load). So then the late boxes are set
        aside and this frame is detected in line, and every track starts where its face is."""
        def placed(tr: Track, box: Box) -> Box:
            if tr.at_submit is not None and tr.age:
                return _moved(box, tr.at_submit, landmark_box(tr.raw))
            return box

        matched, new = self._match(dets, placed)
        if new:
            self.redetections += 1
            self._force_detect = False
            self._last_detect = seq
            self._merge_detected(frame, seq)
            return
        self._apply(matched, [], dets, frame, seq, placed)

    def _apply(self, matched: list[tuple[int, int]], new: list[int], dets: list[tuple[Box, float]],
               frame: FrameViews, seq: int, placed: Callable[[Track, Box], Box],
               points: list[Keypoints5] | None = None) -> None:
        settled, self._settled_ids = self._settled_ids, set()
        for ti, di in matched:
            tr = self.tracks[ti]
            box, tr.score = dets[di]
            if tr.id in settled and _settled(tr):
                # Its box was not refined: the detection confirms the face, and its box stays
                # where the flow carries it; the next detections but one refine it again.
                tr.missed, tr.held, tr.doubted, tr.order = 0, 0, 0, di
                tr.confirmed += 1
                self.confirmations += 1
                continue
            tr.confirmed = 0
            tr.box = placed(tr, box)
            tr.matched, tr.missed, tr.held, tr.doubted = True, 0, 0, 0
            if tr.coasted:  # the detector sees it: its points are no occluder's, follow them
                tr.flowed, tr.coasted = False, 0
            tr.order, tr.kps5 = di, None if points is None else points[di]
        used_t = {ti for ti, _ in matched}
        kept: list[Track] = []
        for ti, tr in enumerate(self.tracks):
            if ti not in used_t:
                tr.kps5 = None
                if self._hold(tr, frame):
                    kept.append(tr)
                    continue
                tr.missed += 1
                if tr.missed > self.track_cfg.max_missed:
                    log.debug("track %d ended after %d missed detections", tr.id, tr.missed)
                    continue
                self._force_detect = True  # confirm it (or end it) on the next frame
            kept.append(tr)
        for di in new:
            box, score = dets[di]
            tr = Track(id=self._next_id, box=box, landmarks=np.zeros((68, 2), np.float32),
                       rel=(0.0, 0.0, 1.0, 1.0), smoother=self._new_filter(), score=score,
                       born=seq, matched=True, order=di, kps5=None if points is None else points[di])
            self._next_id += 1
            kept.append(tr)
        self.tracks = kept

    def _hold(self, tr: Track, frame: FrameViews) -> bool:
        """Keep a confirmed track that this detection missed, when the detector confirms that
        its box still holds a face (an occluded face HOG does not find)."""
        confirm = getattr(self.detector, "confirm", None)
        if confirm is None or tr.missed or not tr.age or tr.held >= self.track_cfg.max_held:
            return False
        if confirm(frame, tr.box):
            tr.held, tr.doubted = tr.held + 1, 0
            log.debug("track %d missed by the detector, kept: its box still holds a face", tr.id)
            return True
        if tr.covered and tr.doubted < self.track_cfg.max_held:
            # The optical flow follows part of the face and loses the rest: something stands in
            # front of it (a scene cut loses all of it), and the filter may read no face
            # behind a bar across the eyes. Kept as a confirmed face is.
            tr.doubted += 1
            log.debug("track %d: part of it covered, no face read in its box, kept", tr.id)
            return True
        # The filter reads no face in the box: a bar across the eyes takes away what it reads
        # a face by, and so does a scene cut. After a cut the box's picture cannot be followed
        # from the last frame; behind an occluder it can (or the filter already confirmed a
        # face behind it): then the face is kept for up to MAX_DOUBTED detections in a row,
        # each on the next frame, until the filter confirms it again.
        if tr.doubted < MAX_DOUBTED and (tr.held or self._followed(tr, frame)):
            tr.doubted += 1
            self._force_detect = True
            log.debug("track %d: no face read in its box, kept: its picture was followed", tr.id)
            return True
        return False

    def _followed(self, tr: Track, frame: FrameViews) -> bool:
        """The optical flow has followed the track's face without a break into the last frame,
        and follows it into this one (after a cut, the new picture in the box is followed)."""
        grey, prev = _grey(frame), self._prev_grey
        return (tr.flowed and not tr.coasted and grey is not None and prev is not None
                and prev.shape == grey.shape
                and face_motion(prev, grey, tr.raw) is not None)

    def close(self) -> None:
        if self.background is not None:
            self.background.close()

    @staticmethod
    def _jumped(prev: Landmarks68, new: Landmarks68) -> bool:
        a, b = landmark_box(prev), landmark_box(new)
        sa = max(a[2] - a[0], a[3] - a[1], 1.0)
        sb = max(b[2] - b[0], b[3] - b[1], 1.0)
        ratio = max(sa / sb, sb / sa)
        shift = np.hypot((a[0] + a[2] - b[0] - b[2]) / 2, (a[1] + a[3] - b[1] - b[3]) / 2) / sa
        return ratio > MAX_SCALE_JUMP or shift > MAX_SHIFT_JUMP

    def embed(self, track: Track, image: ImageBGR, seq: int) -> np.ndarray | None:
        """The track's identity embedding: computed when the track is born, re-checked
        every `track.recheck_every` frames, otherwise read from the cache."""
        if self.embedder is None:
            return None
        stale = track.embedding is None or seq - track.embedded_at >= self.track_cfg.recheck_every
        if stale:
            track.embedding = self.embedder.forward(image, track.landmarks)
            track.embedded_at = seq
        return track.embedding


def _last_motion(tr: Track) -> np.ndarray:
    """The 2x3 shift of a face the flow cannot follow (all of it lost, or most of it hidden):
    its last velocity, which then slows (COAST_KEEP a frame)."""
    step = np.array([[1.0, 0.0, tr.velocity[0]], [0.0, 1.0, tr.velocity[1]]])
    tr.velocity = _mix(tr.velocity, (0.0, 0.0), 1.0 - COAST_KEEP)
    return step


def _moved(box: Box, then: Box, now: Box) -> Box:
    """`box` (of an earlier frame) moved as a face went from `then` to `now`."""
    dx = (now[0] + now[2] - then[0] - then[2]) / 2
    dy = (now[1] + now[3] - then[1] - then[3]) / 2
    return (box[0] + dx, box[1] + dy, box[2] + dx, box[3] + dy)


def _centre_shift(a: Box, b: Box) -> tuple[float, float]:
    return ((b[0] + b[2] - a[0] - a[2]) / 2, (b[1] + b[3] - a[1] - a[3]) / 2)


def _mix(a: tuple[float, float], b: tuple[float, float], w: float) -> tuple[float, float]:
    return (a[0] + w * (b[0] - a[0]), a[1] + w * (b[1] - a[1]))


def _grey(frame: FrameViews) -> np.ndarray | None:
    """The frame's grey view (a plain 2-D array is taken as one); None if it has none."""
    if isinstance(frame, np.ndarray):
        return frame if frame.ndim == 2 else None
    return frame.gray


def _inside(box: Box, w: int, h: int) -> bool:
    return box[0] >= 0 and box[1] >= 0 and box[2] <= w and box[3] <= h


def _on_frame(points: Landmarks68, w: int, h: int) -> bool:
    """Some of the face's landmark box lies inside the frame. A face mostly outside is kept
    (insightface swaps every face its detector finds, however little of it is in the frame);
    one entirely outside has left."""
    x0, y0, x1, y1 = landmark_box(points)
    return min(x1, w) > max(x0, 0.0) and min(y1, h) > max(y0, 0.0)
