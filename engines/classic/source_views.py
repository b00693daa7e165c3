"""Several views of one source person for the classical swapper, and the choice of the view
each target face is warped from.

A piecewise-affine warp carries only what its source shows: a frontal photo warped onto a
face turned 40 degrees stretches the near cheek and squeezes the far one. With views of the
person turned left and right, each face is warped from the view whose pose (signed yaw,
pitch) and expression (mouth opening) are nearest its own (engines.geometry.head_pose).

The choice is made per tracked face with hysteresis, so that a face near the middle between
two views does not flicker from one to the other: the face keeps its view until another is
better by `SWITCH_MARGIN` on `SWITCH_FRAMES` frames in a row. A face without a track (a
picture's) simply gets its nearest view.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from engines.geometry.head_pose import HeadPose

F = TypeVar("F")  # a prepared view (the classical swapper's SourceFace)

# Distance between two poses: yaw's [-1, 1] counts once; pitch (the nose's place between eyes
# and mouth, a narrower range: about 0.5-0.7 over the faces here) twice; the mouth's opening
# (0 shut, about 0.3 wide open) once. Set by judgement, not fitted.
PITCH_WEIGHT = 2.0
MOUTH_WEIGHT = 1.0
# Another view must be nearer by this much (yaw reads about 0.01 a degree on the astronaut
# turned +-25 degrees by tools/quality/head_turn.py: some 8 degrees) ...
SWITCH_MARGIN = 0.08
# ... on this many frames in a row before a followed face changes to it.
SWITCH_FRAMES = 5
MEMO_KEY = "source_view"  # the track's memo entry (engines.face.Face.memo)

log = logging.getLogger(__name__)


def pose_distance(a: HeadPose, b: HeadPose) -> float:
    """How far apart two poses are (0: the same)."""
    return abs(a.yaw - b.yaw) + PITCH_WEIGHT * abs(a.pitch - b.pitch) + MOUTH_WEIGHT * abs(a.mouth - b.mouth)


@dataclass(frozen=True, eq=False)
class SourceViews(Generic[F]):
    """One person's source from several photos: each view prepared (`faces`, the classical
    swapper's SourceFace) with its pose."""

    faces: tuple[F, ...]
    poses: tuple[HeadPose, ...]

    def __post_init__(self) -> None:
        if not self.faces or len(self.faces) != len(self.poses):
            raise ValueError(f"{len(self.faces)} source views but {len(self.poses)} poses")

    def distances(self, pose: HeadPose) -> list[float]:
        return [pose_distance(pose, p) for p in self.poses]

    def nearest(self, pose: HeadPose) -> int:
        d = self.distances(pose)
        return int(min(range(len(d)), key=d.__getitem__))


@dataclass
class ViewState:
    """A followed face's view: the one in use, and the one that has been better lately and
    for how many frames in a row."""

    current: int
    candidate: int = -1
    frames: int = 0
    of: object = None  # the SourceViews chosen among (a face given another source starts afresh)


def choose_view(views: SourceViews[Any], pose: HeadPose, state: ViewState | None) -> ViewState:
    """The view for a face of pose `pose`, given its track's `state` (None: a new face, which
    takes its nearest view). Updates and returns the state."""
    d = views.distances(pose)
    best = int(min(range(len(d)), key=d.__getitem__))
    if state is None or state.of is not views:
        return ViewState(best, of=views)
    if best == state.current or d[state.current] - d[best] <= SWITCH_MARGIN:
        state.candidate, state.frames = -1, 0
        return state
    if best == state.candidate:
        state.frames += 1
    else:
        state.candidate, state.frames = best, 1
    if state.frames >= SWITCH_FRAMES:
        log.debug("source view %d -> %d (pose distance %.3f -> %.3f)", state.current, best, d[state.current], d[best])
        state.current, state.candidate, state.frames = best, -1, 0
    return state


def view_for(views: SourceViews[F], pose: HeadPose, memo: dict[str, Any] | None) -> F:
    """The view a face of pose `pose` is warped from; `memo` is its track's store (where the
    choice is kept from frame to frame), None for a face without a track."""
    if memo is None:
        return views.faces[views.nearest(pose)]
    state = choose_view(views, pose, memo.get(MEMO_KEY))
    memo[MEMO_KEY] = state
    return views.faces[state.current]
