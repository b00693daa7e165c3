"""The quality clip set: short clips made from installed pictures, each with its ground truth.

Every clip is a moving view (pan, zoom, in-plane rotation) over a still canvas built from
insightface's t1.jpg and scikit-image's pictures, so where each face and each face-like
pattern is in every frame is known exactly (tools/quality/truth.py). Occluders are drawn
over the frame after the view is taken. Nothing is downloaded.

    make_clip_set(folder)  ->  folder/<name>.mp4, <name>.json, <name>_source.png
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from stream.media.demo_clips import T1_LARGEST_FACE, astronaut, group_picture, single_face_picture, write_clip
from tools.quality.head_turn import turn_head, turned_box
from tools.quality.patterns import cartoon_face, cat_print, coffee_cup, smiley
from tools.quality.truth import Box, ClipTruth, FrameTruth, Patch

FPS = 30
# Boxes in the pictures, as dlib's HOG detector (upsample 0) finds them on the stills.
ASTRONAUT_FACE: Box = (179, 83, 267, 171)
ASTRONAUT_BADGES = (Patch("round mission patch", (128, 340, 214, 428)),
                    Patch("name badge", (278, 338, 330, 376)))
T1_FACES: tuple[Box, ...] = ((65, 284, 170, 389), (261, 169, 366, 274), (452, 300, 578, 425),
                             (734, 365, 838, 470), (883, 89, 988, 193), (1125, 296, 1230, 401))


@dataclass(frozen=True)
class View:
    """One frame's view of the canvas: the canvas point at the frame centre, zoom, rotation (deg)."""

    cx: float
    cy: float
    zoom: float = 1.0
    angle: float = 0.0

    def matrix(self, size: tuple[int, int]) -> np.ndarray:
        m = cv2.getRotationMatrix2D((self.cx, self.cy), self.angle, self.zoom)
        m[0, 2] += size[0] / 2 - self.cx
        m[1, 2] += size[1] / 2 - self.cy
        return m


@dataclass(frozen=True)
class Occluder:
    kind: str
    picture: np.ndarray  # BGRA: alpha 255 where the occluder is
    path: Callable[[float], tuple[float, float]]  # t in [0, 1] -> its top-left corner in the frame


@dataclass
class Scene:
    name: str
    description: str
    canvas: np.ndarray
    faces: tuple[Box, ...]
    source: np.ndarray
    views: Callable[[float], View]
    size: tuple[int, int] = (640, 360)
    seconds: float = 2.0
    nonfaces: tuple[Patch, ...] = ()
    occluders: tuple[Occluder, ...] = field(default_factory=tuple)
    # The canvas and its face boxes at time t, where they change (a head turning, a mouth
    # talking); None: `canvas` and `faces` throughout.
    canvas_at: Callable[[float], tuple[np.ndarray, tuple[Box, ...]]] | None = None
    # The frame's brightness at time t (a gain on the whole picture, after the view).
    gain: Callable[[float], float] | None = None

    @property
    def n_frames(self) -> int:
        return int(round(self.seconds * FPS))

    def frame(self, i: int) -> tuple[np.ndarray, FrameTruth]:
        t = i / max(self.n_frames - 1, 1)
        view = self.views(t)
        m = view.matrix(self.size)
        canvas, boxes = self.canvas_at(t) if self.canvas_at is not None else (self.canvas, self.faces)
        image = cv2.warpAffine(canvas, m, self.size, flags=cv2.INTER_LINEAR,
                               borderMode=cv2.BORDER_CONSTANT, borderValue=(118, 122, 126))
        if self.gain is not None:
            cv2.convertScaleAbs(image, dst=image, alpha=self.gain(t))
        faces = tuple(_face_box(b, m, view.zoom) for b in boxes)
        nonfaces = tuple(Patch(p.kind, _hull_box(p.box, m)) for p in self.nonfaces)
        occluders = []
        for occ in self.occluders:
            x, y = occ.path(t)
            occluders.append(Patch(occ.kind, _draw(image, occ.picture, int(round(x)), int(round(y)))))
        return image, FrameTruth(faces, tuple(view.angle for _ in faces), nonfaces, tuple(occluders))


def _face_box(box: Box, m: np.ndarray, zoom: float) -> Box:
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    fx, fy = m @ np.array([cx, cy, 1.0])
    hw, hh = (box[2] - box[0]) * zoom / 2, (box[3] - box[1]) * zoom / 2
    return (float(fx - hw), float(fy - hh), float(fx + hw), float(fy + hh))


def _hull_box(box: Box, m: np.ndarray) -> Box:
    x0, y0, x1, y1 = box
    pts = np.array([[x0, y0, 1], [x1, y0, 1], [x0, y1, 1], [x1, y1, 1]], float) @ m.T
    return (float(pts[:, 0].min()), float(pts[:, 1].min()), float(pts[:, 0].max()), float(pts[:, 1].max()))


def _draw(frame: np.ndarray, picture: np.ndarray, x: int, y: int) -> Box:
    """Alpha-composite a BGRA picture onto `frame` at (x, y); returns its box in the frame."""
    h, w = picture.shape[:2]
    fx0, fy0 = max(0, x), max(0, y)
    fx1, fy1 = min(frame.shape[1], x + w), min(frame.shape[0], y + h)
    if fx1 > fx0 and fy1 > fy0:
        part = picture[fy0 - y:fy1 - y, fx0 - x:fx1 - x].astype(np.float32)
        alpha = part[:, :, 3:] / 255.0
        roi = frame[fy0:fy1, fx0:fx1]
        roi[:] = np.clip(part[:, :, :3] * alpha + roi * (1 - alpha) + 0.5, 0, 255).astype(np.uint8)
    return (float(x), float(y), float(x + w), float(y + h))


def _stamp(canvas: np.ndarray, picture: np.ndarray, centre: tuple[int, int], kind: str) -> Patch:
    h, w = picture.shape[:2]
    return Patch(kind, _draw(canvas, picture, centre[0] - w // 2, centre[1] - h // 2))


def _wave(t: float, cycles: float = 1.0) -> float:
    return math.sin(2 * math.pi * cycles * t)


# --- sources ---------------------------------------------------------------------------

def t1_source() -> np.ndarray:
    """t1.jpg's largest face with its surroundings, as a photo."""
    x0, y0, x1, y1 = T1_LARGEST_FACE
    return group_picture()[y0 - 90:y1 + 110, x0 - 80:x1 + 80].copy()


def grey_source() -> np.ndarray:
    return cv2.cvtColor(cv2.cvtColor(astronaut(), cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR)


def low_chroma_source(keep: float = 0.25) -> np.ndarray:
    """The astronaut with a quarter of its chroma (Lab a, b pulled towards neutral)."""
    lab = cv2.cvtColor(astronaut(), cv2.COLOR_BGR2LAB).astype(np.float32)
    lab[:, :, 1:] = 128 + (lab[:, :, 1:] - 128) * keep
    return cv2.cvtColor(np.clip(lab + 0.5, 0, 255).astype(np.uint8), cv2.COLOR_LAB2BGR)


# --- the scenes ------------------------------------------------------------------------

def rotate_scene() -> Scene:
    return Scene(
        "rotate", "one face rolling to +-30 deg; two badges on the suit", astronaut(), (ASTRONAUT_FACE,),
        t1_source(), lambda t: View(230 + 10 * _wave(t), 260, 1.1, 30 * _wave(t)), size=(640, 480),
        nonfaces=ASTRONAUT_BADGES)


def grey_source_scene() -> Scene:
    picture, (cx, cy) = single_face_picture()
    return Scene(
        "grey-source", "one face (t1's largest), grey source photo", picture, (T1_LARGEST_FACE,),
        grey_source(), lambda t: View(cx + 30 * _wave(t), cy + 10 * _wave(t, 2), 1.3, 10 * _wave(t)))


def low_chroma_scene() -> Scene:
    return Scene(
        "low-chroma", "three faces at native size, low-chroma source", group_picture(), T1_FACES[:3],
        low_chroma_source(), lambda t: View(320 + 15 * _wave(t), 330 + 8 * _wave(t, 2), 1.0 + 0.04 * _wave(t)))


def facelike_scene() -> Scene:
    picture, (cx, cy) = single_face_picture()
    canvas = picture.copy()
    badge = astronaut()[340:428, 128:214]
    badge_bgra = np.dstack([badge, _disc_alpha(badge.shape[:2])])
    nonfaces = (
        _stamp(canvas, smiley(96), (int(cx) - 205, int(cy) - 70), "drawn smiley"),
        _stamp(canvas, cartoon_face(104, 128), (int(cx) - 200, int(cy) + 95), "cartoon face print"),
        _stamp(canvas, cat_print(118), (int(cx) + 195, int(cy) - 80), "cat face print"),
        _stamp(canvas, badge_bgra, (int(cx) + 200, int(cy) + 95), "round badge"),
    )
    return Scene(
        "face-like", "one face among a smiley, a cartoon face, a cat print and a round badge", canvas,
        (T1_LARGEST_FACE,), astronaut(),
        lambda t: View(cx + 25 * _wave(t), cy + 8 * _wave(t, 2), 1.0 + 0.06 * _wave(t), 6 * _wave(t)),
        nonfaces=nonfaces)


def occluder_scene() -> Scene:
    picture, (cx, cy) = single_face_picture()
    zoom = 1.3
    cup = coffee_cup(150)
    bar = np.zeros((260, 34, 4), np.uint8)
    bar[:, :] = (40, 40, 46, 255)
    return Scene(
        "occluder", "one face crossed by a cup (lower face) and a bar", picture, (T1_LARGEST_FACE,), astronaut(),
        lambda t: View(cx, cy, zoom, 0.0),
        occluders=(Occluder("cup", cup, lambda t: (40 + 400 * t, 195)),
                   Occluder("bar", bar, lambda t: (560 - 420 * t, 40))))


def small_scene() -> Scene:
    return Scene(
        "small", "six faces about 40-50 px wide", group_picture(), T1_FACES, astronaut(),
        lambda t: View(640 + 40 * _wave(t), 443 + 10 * _wave(t, 2), 0.4))


def overlap_scene() -> Scene:
    canvas, faces = crowd_canvas()
    h, w = canvas.shape[:2]
    return Scene(
        "overlap", "six faces whose boxes and paste regions overlap", canvas, faces, astronaut(),
        lambda t: View(w / 2 + 12 * _wave(t), h / 2 + 6 * _wave(t, 2), 0.95 + 0.04 * _wave(t)))


def leave_return_scene() -> Scene:
    picture, (cx, cy) = single_face_picture()
    # The face centre travels from the frame centre out past the left edge and back.
    return Scene(
        "leave-return", "one face leaving the frame on the left and coming back", picture,
        (T1_LARGEST_FACE,), astronaut(),
        lambda t: View(cx + 440 * math.sin(math.pi * t), cy, 1.2), seconds=2.4)


def turning_talk_scene() -> Scene:
    """The astronaut talking and turning her head from side to side (+-30 degrees, a yaw-like
    warp: tools/quality/head_turn.py), her jaw dropping and closing as in speech (a warp of
    the lower face), the view drifting; t1's largest face as the source."""
    x0, y0, x1, y1 = ASTRONAUT_FACE
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2 + 10
    picture = astronaut()

    def canvas_at(t: float) -> tuple[np.ndarray, tuple[Box, ...]]:
        yaw = 30.0 * math.sin(2 * math.pi * t)
        opening = 0.5 * (1 - math.cos(2 * math.pi * 5 * t))  # five syllables: 0 shut .. 1 open
        talking = open_jaw(picture, ASTRONAUT_FACE, 0.09 * opening)
        return turn_head(talking, ASTRONAUT_FACE, yaw), (turned_box(ASTRONAUT_FACE, yaw),)

    return Scene(
        "turning-talk", "one face talking and turning +-30 deg", picture, (ASTRONAUT_FACE,), t1_source(),
        lambda t: View(cx + 8 * _wave(t, 0.5), cy + 5 * _wave(t, 1.5), 1.6, 0.0),
        size=(640, 480), seconds=3.0, canvas_at=canvas_at)


def open_jaw(picture: np.ndarray, box: Box, drop: float) -> np.ndarray:
    """`picture` with the jaw of the face in `box` dropped by `drop` face heights: the rows
    from the mouth's line down to the chin pulled down, fading out to the sides and below, so
    the lips part and the chin lowers as in speech."""
    if drop <= 0:
        return picture.copy()
    h, w = picture.shape[:2]
    x0, y0, x1, y1 = box
    bw, bh = x1 - x0, y1 - y0
    mouth_y, chin_y = y0 + 0.78 * bh, y1 + 0.15 * bh
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    across = np.clip(1 - np.abs(xs - (x0 + x1) / 2) / (0.45 * bw), 0, 1)
    below = np.clip((ys - mouth_y) / (0.06 * bh), 0, 1) * np.clip((chin_y + 0.3 * bh - ys) / (0.3 * bh), 0, 1)
    shift = drop * bh * across * below
    return cv2.remap(picture, xs, ys - shift, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def panned_group_scene() -> Scene:
    """t1's six faces at 1280x720, the view panning so that the left face leaves the frame and
    comes back, the light ramping from dim to bright, a board covering one face for a while."""
    board = np.zeros((190, 150, 4), np.uint8)
    board[:, :] = (70, 86, 98, 255)
    x0, y0, x1, y1 = T1_FACES[3]

    def pan(t: float) -> float:  # the view's centre on the canvas, x
        return 640 + 250 * math.sin(math.pi * t)

    def board_at(t: float) -> tuple[float, float]:  # in front of the fourth face from 30% to 70%
        if not 0.3 <= t <= 0.7:
            return (-400.0, -400.0)
        return ((x0 + x1) / 2 - pan(t) + 640 - 75, (y0 + y1) / 2 - 443 + 360 - 95)

    return Scene(
        "panned-group", "six faces panned (the left one leaves and returns), light ramping, one covered a while",
        group_picture(), T1_FACES, astronaut(),
        lambda t: View(pan(t), 443, 1.0), size=(1280, 720), seconds=2.4,
        occluders=(Occluder("board", board, board_at),), gain=lambda t: 0.6 + 0.6 * t)


def crowd_canvas() -> tuple[np.ndarray, tuple[Box, ...]]:
    """t1's six faces cut out with a soft oval and laid in two staggered rows, each overlapping
    the one before (later ones in front); returns the canvas and the face boxes on it."""
    group = group_picture()
    canvas = cv2.resize(cv2.GaussianBlur(group, (0, 0), 12)[150:600, 100:900], (720, 420))
    faces = []
    for k, (x0, y0, x1, y1) in enumerate(T1_FACES):
        side = max(x1 - x0, y1 - y0)
        m = int(side * 0.3)
        crop = group[y0 - m:y1 + m, x0 - m:x1 + m]
        alpha = _disc_alpha(crop.shape[:2], soft=0.25)
        px, py = 40 + 100 * k, 60 if k % 2 == 0 else 150
        _draw(canvas, np.dstack([crop, alpha]), px, py)
        faces.append((float(px + m), float(py + m), float(px + m + x1 - x0), float(py + m + y1 - y0)))
    return canvas, tuple(faces)


def _disc_alpha(shape: tuple[int, int], soft: float = 0.08) -> np.ndarray:
    h, w = shape
    yy, xx = np.mgrid[0:h, 0:w]
    r = np.hypot((xx - (w - 1) / 2) / (w / 2), (yy - (h - 1) / 2) / (h / 2))
    return np.clip((1 - r) / soft, 0, 1).__mul__(255).astype(np.uint8)


SCENES: dict[str, Callable[[], Scene]] = {
    "rotate": rotate_scene,
    "grey-source": grey_source_scene,
    "low-chroma": low_chroma_scene,
    "face-like": facelike_scene,
    "occluder": occluder_scene,
    "small": small_scene,
    "overlap": overlap_scene,
    "leave-return": leave_return_scene,
    "turning-talk": turning_talk_scene,
    "panned-group": panned_group_scene,
}


@dataclass(frozen=True)
class ClipFiles:
    name: str
    video: Path
    truth: Path
    source: Path


def make_clip(scene: Scene, folder: str | Path) -> ClipFiles:
    """Write the scene's clip, its ground truth and its source photo into `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = ClipFiles(scene.name, folder / f"{scene.name}.mp4", folder / f"{scene.name}.json",
                      folder / f"{scene.name}_source.png")
    truths: list[FrameTruth] = []

    def frames():  # type: ignore[no-untyped-def]
        for i in range(scene.n_frames):
            image, truth = scene.frame(i)
            truths.append(truth)
            yield image

    write_clip(files.video, frames(), fps=FPS, audio=False, crf=18)
    cv2.imwrite(str(files.source), scene.source)
    ClipTruth(scene.name, scene.description, FPS, scene.size, files.source.name, tuple(truths)).save(files.truth)
    return files


def make_clip_set(folder: str | Path, names: list[str] | None = None) -> list[ClipFiles]:
    """The clip set (or the named clips) in `folder`; ValueError for an unknown name."""
    wanted = names or list(SCENES)
    unknown = [n for n in wanted if n not in SCENES]
    if unknown:
        raise ValueError(f"unknown clip {unknown[0]!r}; known: {', '.join(SCENES)}")
    return [make_clip(SCENES[n](), folder) for n in wanted]
