"""Fit the face filter's second opinion: a linear discriminant on dlib's 128-d embedding that
tells faces from the things dlib's HOG detector takes for faces (badges, prints, drawings).

    python tools/fit_face_filter.py [--out engines/dlib/face_filter_weights.py]

Training pictures come with installed packages, none from the quality clips (tools/quality
uses insightface's t1.jpg and the astronaut; they stay for measuring):
- faces: scikit-image's `lfw_subset` faces (100, 25x25 grey), scaled up (mirrored, rolled or
  re-boxed copies of them were tried and made the fit worse on the quality clips' faces);
- non-faces: `lfw_subset`'s 100 non-face patches; every box dlib's HOG detector finds (down to
  a score of -0.8, upsampled once) on scikit-image's pictures without people; and randomly drawn
  face-like shapes (ovals with dots for eyes and an arc or blob for a mouth, random colours,
  outlines, roll), the kind of sticker or print a user's camera sees.

Each sample is embedded as the pipeline does (68 landmarks in the box, then the embedding) and
Fisher's discriminant (shrunk covariance) is fitted; the weights, and the spread of the faces'
scores (the unit the filter adds HOG's score in), are written as a Python module.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

import cv2  # noqa: E402
import dlib  # type: ignore[import-untyped]  # noqa: E402
import numpy as np  # noqa: E402

from engines.dlib.embedder import DlibEmbedder  # noqa: E402
from engines.dlib.landmarker import DlibLandmarker  # noqa: E402
from engines.frame_views import FrameViews  # noqa: E402

NO_PEOPLE = ("chelsea", "coffee", "cat", "rocket", "horse", "brick", "coins", "clock", "gravel", "grass",
             "immunohistochemistry", "logo", "page", "text", "hubble_deep_field", "moon", "retina",
             "stereo_motorcycle", "colorwheel", "microaneurysms")
SHRINK = 1e-3  # added to the pooled covariance's diagonal


class Embed:
    def __init__(self) -> None:
        self.landmarker = DlibLandmarker()
        self.embedder = DlibEmbedder()
        self.detector = dlib.get_frontal_face_detector()

    def __call__(self, image: np.ndarray, box: tuple[float, float, float, float]) -> np.ndarray:
        views = FrameViews(image)
        return self.embedder.forward(image, self.landmarker.forward(views, box))


def lfw_sample(patch: np.ndarray, side: int, angle: float) -> tuple[np.ndarray, tuple[float, float, float, float]]:
    """A 25x25 lfw patch scaled to `side`, padded, rolled by `angle`; its box."""
    big = cv2.resize((patch * 255).astype(np.uint8), (side, side), interpolation=cv2.INTER_CUBIC)
    pad = side // 2
    canvas = cv2.copyMakeBorder(big, pad, pad, pad, pad, cv2.BORDER_REPLICATE)
    c = (canvas.shape[1] / 2, canvas.shape[0] / 2)
    if angle:
        canvas = cv2.warpAffine(canvas, cv2.getRotationMatrix2D(c, angle, 1.0), canvas.shape[::-1],
                                borderMode=cv2.BORDER_REPLICATE)
    return cv2.cvtColor(canvas, cv2.COLOR_GRAY2BGR), (pad, pad, pad + side, pad + side)


def drawn_face(rng: np.random.Generator) -> tuple[np.ndarray, tuple[float, float, float, float]]:
    """A random face-like drawing: an oval, two eyes, maybe brows and a nose, a mouth."""
    size = 200

    def colour(lo: int = 0, hi: int = 256) -> tuple[int, int, int]:
        return tuple(int(x) for x in rng.integers(lo, hi, 3))  # type: ignore[return-value]

    img = np.full((size, size, 3), colour(), np.uint8)
    cx, cy = 100 + int(rng.integers(-8, 9)), 100 + int(rng.integers(-8, 9))
    ax = int(rng.integers(40, 60))
    ay = int(ax * rng.uniform(0.9, 1.4))
    cv2.ellipse(img, (cx, cy), (ax, ay), 0, 0, 360, colour(), -1, cv2.LINE_AA)
    if rng.random() < 0.5:
        cv2.ellipse(img, (cx, cy), (ax, ay), 0, 0, 360, (0, 0, 0), int(rng.integers(1, 4)), cv2.LINE_AA)
    ink = colour(0, 90)
    ey = cy - int(ay * rng.uniform(0.15, 0.35))
    dx = int(ax * rng.uniform(0.3, 0.5))
    er = (max(2, int(ax * rng.uniform(0.06, 0.15))), max(2, int(ay * rng.uniform(0.06, 0.2))))
    for ex in (cx - dx, cx + dx):
        if rng.random() < 0.3:
            cv2.ellipse(img, (ex, ey), (er[0] * 2, er[1]), 0, 0, 360, (240, 240, 240), -1, cv2.LINE_AA)
        cv2.ellipse(img, (ex, ey), er, 0, 0, 360, ink, -1, cv2.LINE_AA)
        if rng.random() < 0.5:
            cv2.line(img, (ex - er[0] * 2, ey - er[1] * 3), (ex + er[0] * 2, ey - er[1] * 3), ink, 2, cv2.LINE_AA)
    if rng.random() < 0.5:
        cv2.line(img, (cx, ey + 5), (cx, cy + int(ay * 0.2)), ink, 2, cv2.LINE_AA)
    my = cy + int(ay * rng.uniform(0.3, 0.5))
    mw = int(ax * rng.uniform(0.25, 0.6))
    if rng.random() < 0.5:
        cv2.ellipse(img, (cx, my - mw // 3), (mw, mw // 2), 0, 20, 160, ink, int(rng.integers(2, 5)), cv2.LINE_AA)
    else:
        cv2.ellipse(img, (cx, my), (mw, max(2, mw // 4)), 0, 0, 360, colour(), -1, cv2.LINE_AA)
    m = cv2.getRotationMatrix2D((100, 100), rng.uniform(-30, 30), 1.0)
    rolled = cv2.warpAffine(img, m, (size, size), borderMode=cv2.BORDER_REPLICATE)
    return cv2.GaussianBlur(rolled, (0, 0), rng.uniform(0.5, 1.5)), (cx - ax, cy - ay, cx + ax, cy + ay)


def skimage_picture(name: str) -> np.ndarray | None:
    from skimage import data

    try:
        im = getattr(data, name)()
    except Exception:  # noqa: BLE001 - a picture that needs an optional download is skipped
        return None
    if isinstance(im, tuple):  # a stereo pair: its left picture
        im = im[0]
    if im.dtype == bool:
        im = im.astype(np.uint8) * 255
    if im.dtype != np.uint8:
        im = (255 * (im - im.min()) / (np.ptp(im) + 1e-9)).astype(np.uint8)
    if im.ndim == 2:
        im = cv2.cvtColor(im, cv2.COLOR_GRAY2BGR)
    elif im.shape[2] == 4:
        im = cv2.cvtColor(im, cv2.COLOR_RGBA2BGR)
    else:
        im = cv2.cvtColor(im, cv2.COLOR_RGB2BGR)
    scale = 1024 / max(im.shape[:2])
    return cv2.resize(im, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA) if scale < 1 else im


def samples(embed: Embed, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    from skimage.data import lfw_subset

    lfw = lfw_subset()
    faces = [embed(*lfw_sample(lfw[k], 120, 0)) for k in range(100)]
    others = [embed(*lfw_sample(lfw[k], 120, 0)) for k in range(100, 200)]
    for name in NO_PEOPLE:
        im = skimage_picture(name)
        if im is None:
            continue
        grey = cv2.cvtColor(im, cv2.COLOR_BGR2GRAY)
        for upsample in (0, 1):
            rects, _, _ = embed.detector.run(grey, upsample, -0.8)
            others += [embed(im, (r.left(), r.top(), r.right() + 1, r.bottom() + 1)) for r in rects]
    rng = np.random.default_rng(seed)
    for _ in range(200):
        img, box = drawn_face(rng)
        rects = embed.detector(cv2.cvtColor(img, cv2.COLOR_BGR2GRAY), 1)
        if len(rects):
            box = (rects[0].left(), rects[0].top(), rects[0].right() + 1, rects[0].bottom() + 1)
        others.append(embed(img, box))
    return np.array(faces), np.array(others)


def fisher(faces: np.ndarray, others: np.ndarray, shrink: float = SHRINK) -> tuple[np.ndarray, float]:
    """Fisher's linear discriminant: w.x + b > 0 for faces; b halfway between the class means."""
    mf, mo = faces.mean(0), others.mean(0)
    cov = np.cov(np.vstack([faces - mf, others - mo]).T) + shrink * np.eye(faces.shape[1])
    w = np.linalg.solve(cov, mf - mo)
    return w, float(-w @ (mf + mo) / 2)


def write_module(path: Path, w: np.ndarray, b: float, scale: float, n_faces: int, n_others: int,
                 errors: tuple[int, int]) -> None:
    rows = ",\n".join("    " + ", ".join(f"{v:.6f}" for v in w[i:i + 6]) for i in range(0, len(w), 6))
    path.write_text(
        '"""Weights of the face filter\'s discriminant on dlib\'s 128-d embedding (engines/dlib/face_filter.py).\n\n'
        "Written by tools/fit_face_filter.py (do not edit): Fisher's discriminant fitted on "
        f"{n_faces} faces and {n_others}\nnon-faces from installed pictures; training errors: "
        f"{errors[0]} faces, {errors[1]} non-faces.\n" + '"""\n\n'
        f"WEIGHTS = (\n{rows},\n)\nBIAS = {b:.6f}\nSCALE = {scale:.6f}  # spread (std) of the training faces' scores\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(ROOT / "engines" / "dlib" / "face_filter_weights.py"))
    p.add_argument("--samples", metavar="NPZ", help="embeddings: read from here if it exists, else saved here")
    args = p.parse_args(argv)
    if args.samples and Path(args.samples).is_file():
        saved = np.load(args.samples)
        faces, others = saved["faces"], saved["others"]
    else:
        faces, others = samples(Embed())
        if args.samples:
            np.savez(args.samples, faces=faces, others=others)
    w, b = fisher(faces, others)
    errors = (int((faces @ w + b <= 0).sum()), int((others @ w + b > 0).sum()))
    write_module(Path(args.out), w, b, float(np.std(faces @ w + b)), len(faces), len(others), errors)
    print(f"{len(faces)} faces, {len(others)} non-faces; training errors {errors[0]} faces, "
          f"{errors[1]} non-faces; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
