"""Demo and test media built from pictures that ship with installed packages.

The target clip pans and zooms over insightface's `t1.jpg` (six faces, 1280x886); the
source face is scikit-image's astronaut. Nothing is downloaded. Both packages come with
the `demo` extra (pip install 'facestream[demo]'); without it, a one-line DemoUnavailable.
"""
from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

from stream.errors import StreamError

DEMO_EXTRA_HINT = "install the demo extra: pip install 'facestream[demo]' (or run make demo)"


class DemoUnavailable(StreamError):
    """The pictures the demo media is made from are not installed."""


def package_file(package: str, *parts: str) -> Path:
    """A data file inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise DemoUnavailable(f"the demo pictures need the package {package!r}, which is not installed; "
                              f"{DEMO_EXTRA_HINT}")
    path = Path(list(spec.submodule_search_locations)[0], *parts)
    if not path.is_file():
        raise DemoUnavailable(f"{path} is missing from the installed package {package!r}")
    return path


def group_picture() -> np.ndarray:
    """insightface's t1.jpg: six faces, 1280x886, BGR."""
    image = cv2.imread(str(package_file("insightface", "data", "images", "t1.jpg")))
    if image is None:
        raise DemoUnavailable("insightface's t1.jpg cannot be decoded")
    return image


def astronaut() -> np.ndarray:
    """scikit-image's astronaut (one face, 512x512), BGR."""
    try:
        from skimage import data
    except ImportError as exc:
        raise DemoUnavailable(f"the demo face needs the package 'scikit-image', which is not installed; "
                              f"{DEMO_EXTRA_HINT}") from exc

    return cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR)


def pan_zoom_frames(picture: np.ndarray, n: int, size: tuple[int, int] = (1280, 720),
                    zoom: tuple[float, float] = (1.0, 1.1),
                    centre: tuple[float, float] | None = None,
                    sweep: float = 75.0) -> Iterator[np.ndarray]:
    """`n` frames of a slow pan and zoom over `picture`.

    Without `centre` the view stays centred horizontally and sweeps down by at most
    `sweep` px and back (t1.jpg's top row of faces stays in the picture); with `centre`
    the view is centred on that point and sweeps around it by `sweep` px.
    """
    w, h = size
    ph, pw = picture.shape[:2]
    for i in range(n):
        phase = 2 * math.pi * i / max(n, 1)
        z = zoom[0] + (zoom[1] - zoom[0]) * (0.5 - 0.5 * math.cos(phase))
        z = max(z, w / pw, h / ph)
        view_w, view_h = w / z, h / z
        if centre is None:
            ox = (pw - view_w) / 2
            oy = min(sweep, ph - view_h) * (0.5 - 0.5 * math.cos(phase))
        else:
            ox = centre[0] - view_w / 2 + sweep * math.sin(phase)
            oy = centre[1] - view_h / 2 + 0.5 * sweep * math.sin(2 * phase)
        m = np.array([[z, 0, -z * ox], [0, z, -z * oy]], np.float32)
        yield cv2.warpAffine(picture, m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)


def write_clip(path: str | Path, frames: Iterator[np.ndarray] | list[np.ndarray], fps: int = 30,
               audio: bool = True, crf: int = 18, preset: str = "veryfast",
               tone: Callable[[np.ndarray], np.ndarray] | None = None) -> int:
    """H.264 (+ an AAC tone) file from BGR frames; returns the frame count."""
    count = 0
    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264", rate=fps)
        vs.pix_fmt = "yuv420p"
        vs.options = {"crf": str(crf), "preset": preset}
        a_stream = out.add_stream("aac", rate=44100) if audio else None
        for frame in frames:
            if count == 0:
                vs.width, vs.height = frame.shape[1], frame.shape[0]
            vf = av.VideoFrame.from_ndarray(frame, format="bgr24")
            vf.pts = count
            vf.time_base = Fraction(1, fps)
            out.mux(vs.encode(vf))
            count += 1
        out.mux(vs.encode(None))
        if a_stream is not None and count:
            rate = 44100
            total = int(rate * count / fps)
            t = np.arange(total) / rate
            wave = tone(t) if tone else 0.2 * np.sin(2 * np.pi * 440 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 0.5 * t))
            samples = wave.astype(np.float32)
            step = 1024
            for start in range(0, total, step):
                chunk = samples[start:start + step]
                af = av.AudioFrame.from_ndarray(chunk.reshape(1, -1), format="fltp", layout="mono")
                af.sample_rate = rate
                af.pts = start
                af.time_base = Fraction(1, rate)
                out.mux(a_stream.encode(af))
            out.mux(a_stream.encode(None))
    return count


# t1.jpg's largest face, (x0, y0, x1, y1), as dlib's HOG detector boxes it.
T1_LARGEST_FACE = (452, 300, 577, 424)


def single_face_picture() -> tuple[np.ndarray, tuple[float, float]]:
    """t1.jpg with every face but the largest blurred beyond detection, and that face's centre."""
    picture = group_picture()
    x0, y0, x1, y1 = T1_LARGEST_FACE
    keep = picture[y0 - 40:y1 + 40, x0 - 40:x1 + 40].copy()
    blurred = cv2.GaussianBlur(picture, (0, 0), 25)
    blurred[y0 - 40:y1 + 40, x0 - 40:x1 + 40] = keep
    return blurred, ((x0 + x1) / 2, (y0 + y1) / 2)


def make_single_face_clip(path: str | Path, seconds: float = 10.0, fps: int = 30,
                          size: tuple[int, int] = (1280, 720)) -> int:
    """One face, about 230 px wide (a webcam's close-up), moving slowly."""
    picture, centre = single_face_picture()
    n = max(1, int(round(seconds * fps)))
    return write_clip(path, pan_zoom_frames(picture, n, size, zoom=(1.8, 2.0), centre=centre,
                                            sweep=40.0), fps=fps)


def make_demo_clip(path: str | Path, seconds: float = 10.0, fps: int = 30,
                   size: tuple[int, int] = (1280, 720)) -> int:
    """The demo target: six faces from t1.jpg, panned and zoomed, with a soft tone."""
    n = max(1, int(round(seconds * fps)))
    return write_clip(path, pan_zoom_frames(group_picture(), n, size), fps=fps)


def bench_clips(folder: str | Path, faces: str, seconds: float,
                seconds_six: float | None = None) -> list[tuple[str, str]]:
    """The benchmarks' 720p clips, written into `folder`: ("one face", path) when `faces`
    is "1" or "both", ("six faces", path) when "6" or "both" (`seconds_six` long, if given)."""
    clips = []
    if faces in ("1", "both"):
        path = str(Path(folder) / "one.mp4")
        make_single_face_clip(path, seconds)
        clips.append(("one face", path))
    if faces in ("6", "both"):
        path = str(Path(folder) / "six.mp4")
        make_demo_clip(path, seconds_six or seconds)
        clips.append(("six faces", path))
    return clips
