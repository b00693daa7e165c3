"""A source person from one `--source`: a photo, a folder of photos, or a short video, each
picture one view of the same person.

- a photo: its largest face, one view (exactly as a single photo always was);
- a folder: its pictures (by suffix, sorted by name; other files are ignored), the largest
  face of each; pictures without a face are left out with a note;
- a video: up to `VIDEO_VIEWS` frames spread evenly over it, those with a face.

Several views are checked for one identity (stream.analysis.identity_outliers, with the
engine's own embedder and threshold): views of another person are left out with a warning
that names them; when no majority agrees, the source is refused in one line.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import av
import cv2
import numpy as np

from engines.errors import NoFaceError
from engines.face import ImageBGR
from engines.protocols import Embedder
from stream.analysis.identity_outliers import InconsistentViews, agreeing_views
from stream.errors import SourceError
from stream.job.photo_face import PhotoFace
from stream.media.image_io import IMAGE_SUFFIXES, is_image_path, read_image
from stream.sources.file import display_rotation

log = logging.getLogger(__name__)

VIDEO_VIEWS = 12  # frames taken from a source video, spread over it
MAX_FOLDER_VIEWS = 64  # pictures read from a source folder at most (the first by name)
# A frame's display rotation (counter-clockwise) -> the turn that makes it upright (a phone's video).
_UPRIGHT = {90: cv2.ROTATE_90_COUNTERCLOCKWISE, 180: cv2.ROTATE_180, 270: cv2.ROTATE_90_CLOCKWISE}

# The job's face finder: the largest face of a picture (path for messages, what, the picture).
FindFace = Callable[[str, str, ImageBGR], PhotoFace]


@dataclass(frozen=True)
class SourceSet:
    """One source person: `views` (at least one; the first is the set's face where one is
    shown, e.g. on the server's page), and the labels of the views left out as another person."""

    path: str
    kind: str  # photo | folder | video
    views: tuple[PhotoFace, ...]
    dropped: tuple[str, ...] = ()

    @property
    def face(self) -> PhotoFace:
        return self.views[0]


def source_kind(path: str) -> str:
    """photo, folder or video, by what `path` is; SourceError when it is none of them."""
    p = Path(path)
    if p.is_dir():
        return "folder"
    if not p.exists():
        raise SourceError(f"source {path!r}: no such file or folder")
    return "photo" if is_image_path(p) else "video"


def folder_pictures(path: str) -> list[Path]:
    """The pictures of a folder, by suffix, sorted by name (at most MAX_FOLDER_VIEWS)."""
    pictures = sorted(p for p in Path(path).iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    return pictures[:MAX_FOLDER_VIEWS]


def video_frames(path: str, count: int = VIDEO_VIEWS) -> Iterator[tuple[float, ImageBGR]]:
    """Up to `count` frames of a video spread evenly over it (the first frame at or after the
    middle of each of `count` equal spans; the first `count` frames when the container gives no
    duration), with their times in seconds, upright (a display matrix is applied); SourceError
    when it cannot be decoded."""
    try:
        with av.open(path, "r") as container:
            if not container.streams.video:
                raise SourceError(f"source video {path!r}: no video stream")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            duration = 0.0
            if stream.duration is not None and stream.time_base is not None:
                duration = float(stream.duration * stream.time_base)
            elif container.duration is not None:
                duration = container.duration / av.time_base
            start = float(stream.start_time * stream.time_base) \
                if stream.start_time is not None and stream.time_base is not None else 0.0
            targets = [start + (k + 0.5) * duration / count for k in range(count)] if duration > 0 else []
            taken = 0
            for frame in container.decode(stream):
                t = float(frame.time) if frame.time is not None else 0.0
                if targets:
                    if t + 1e-6 < targets[taken]:
                        continue
                    while taken < len(targets) and targets[taken] <= t + 1e-6:
                        taken += 1  # a frame that covers several targets is one view
                else:
                    taken += 1
                image = frame.to_ndarray(format="bgr24")
                turn = _UPRIGHT.get(display_rotation(frame))
                yield t - start, np.ascontiguousarray(image if turn is None else cv2.rotate(image, turn))
                if taken >= (len(targets) or count):
                    return
    except av.error.FFmpegError as exc:
        raise SourceError(f"source {path!r}: not a picture, a folder or a video that can be read ({exc})") from exc


def _found(find: FindFace, label: str, what: str, image: ImageBGR) -> PhotoFace | None:
    try:
        return find(label, what, image)
    except NoFaceError:
        return None


def load_views(path: str, kind: str, find: FindFace, notes: list[str]) -> list[PhotoFace]:
    """The views of one source with a face (unchecked for identity); NoFaceError naming the
    source when none has one."""
    if kind == "photo":
        return [find(path, "source photo", read_image(path))]
    if kind == "folder":
        pictures = folder_pictures(path)
        if not pictures:
            raise SourceError(f"source folder {path!r}: no pictures in it ({', '.join(sorted(IMAGE_SUFFIXES))})")
        views, faceless = [], []
        for picture in pictures:
            face = _found(find, str(picture), "source photo", read_image(picture))
            if face is None:
                faceless.append(picture.name)
            else:
                views.append(face)
        if not views:
            raise NoFaceError(f"source folder {path!r}: no face found in any of its {len(pictures)} pictures")
        if faceless:
            notes.append(f"source folder {path!r}: no face in {', '.join(faceless)}; using the other {len(views)}")
        return views
    views, looked = [], 0
    for t, image in video_frames(path):
        looked += 1
        face = _found(find, f"{path}@{t:.2f}s", "source video frame", image)
        if face is not None:
            views.append(face)
    if looked == 0:
        raise SourceError(f"source video {path!r}: no frames could be decoded")
    if not views:
        raise NoFaceError(f"source video {path!r}: no face found in any of the {looked} frames looked at")
    return views


def one_person(views: list[PhotoFace], embedder: Embedder, what: str,
               label: Callable[[PhotoFace], str]) -> tuple[list[PhotoFace], list[tuple[str, float]]]:
    """The views of one person among `views` (several), and those left out (their `label`
    and identity distance from the others); SourceError naming `what` when no majority of
    them agrees (stream.analysis.identity_outliers, the engine's embedder and threshold)."""
    embeddings = [embedder.forward(v.image, v.landmarks) for v in views]
    try:
        agreement = agreeing_views(embeddings, embedder.distance, embedder.threshold)
    except InconsistentViews as exc:
        raise SourceError(f"{what}: {exc}: give photos of one person") from exc
    return [views[i] for i in agreement.kept], [(label(views[i]), dist) for i, dist in agreement.dropped]


def said_left_out(dropped: list[tuple[str, float]], threshold: float, kept: int) -> str:
    """The warning for views left out as another person."""
    names = ", ".join(f"{name} ({dist:.2f})" for name, dist in dropped)
    return (f"left out {names}: another person, by the identity distance from the others (the same "
            f"person is under {threshold:g}); using the other {kept}")


def load_source_set(path: str, find: FindFace, embedder: Embedder, notes: list[str]) -> SourceSet:
    """The source person at `path` (a photo, a folder or a video). Views of someone else are
    left out with a warning naming them; SourceError when no majority of the views agrees."""
    kind = source_kind(path)
    views = load_views(path, kind, find, notes)
    if len(views) == 1:
        return SourceSet(path, kind, tuple(views))
    kept, dropped = one_person(views, embedder, f"source {kind} {path!r}", lambda v: _label(v, kind))
    if dropped:
        log.warning("source %s %r: %s", kind, path, said_left_out(dropped, embedder.threshold, len(kept)))
    notes.append(f"source {kind} {path!r}: {len(kept)} views of one person")
    return SourceSet(path, kind, tuple(kept), tuple(name for name, _ in dropped))


def _label(view: PhotoFace, kind: str) -> str:
    """A view as a user would find it: a folder's file name, a video's frame time."""
    if kind == "folder":
        return Path(view.path).name
    return view.path.rpartition("@")[2] if kind == "video" else view.path
