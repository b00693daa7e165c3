"""The dlib engine's detector swaps faces only: badges, prints and drawn faces that dlib's HOG
detector takes for faces are dropped by the face filter, real faces (40 px ones, faces rolled
30 degrees, t1.jpg's six) are kept. Frames come from the quality clip set (tools/quality),
whose ground truth says where the faces and the face-like patterns are."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from engines.dlib.detector import DlibHogDetector
from engines.dlib.face_filter import FaceFilter, plausible
from engines.frame_views import FrameViews
from engines.registry import build_engines
from stream.config import Config, load_config
from stream.errors import ConfigError
from stream.media.demo_clips import astronaut, group_picture, write_clip
from tools.quality import metrics
from tools.quality.clips import ASTRONAUT_BADGES, ASTRONAUT_FACE, facelike_scene, rotate_scene
from tools.quality.patterns import cartoon_face, smiley
from tools.quality.truth import Box

ROOT = Path(__file__).resolve().parent.parent


def iou(a: Box, b: Box) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def default_detector(**detect: object):  # type: ignore[no-untyped-def]
    """The detector `facestream swap --engine dlib` runs with the default config."""
    cfg = Config()
    for key, value in detect.items():
        setattr(cfg.detect, key, value)
    engines = build_engines("dlib", detect=cfg.detect, swap=cfg.swap, models=cfg.models)
    engines.detector.open()
    return engines.detector


@pytest.fixture(scope="module")
def detector():  # type: ignore[no-untyped-def]
    return default_detector()


@pytest.fixture(scope="module")
def detector_up1():  # type: ignore[no-untyped-def]
    return default_detector(upsample=1)


def hits(found: list[tuple[Box, float]], boxes: tuple[Box, ...], overlap: float = 0.2) -> int:
    return sum(1 for box, _ in found if any(iou(box, b) > overlap for b in boxes))


@pytest.mark.parametrize("frame_no", [30, 54])
def test_space_suit_badges_are_not_faces(detector, frame_no: int) -> None:  # type: ignore[no-untyped-def]
    scene = rotate_scene()
    image, truth = scene.frame(frame_no)
    patches = tuple(p.box for p in truth.nonfaces)
    bare = DlibHogDetector().forward(FrameViews(image))
    assert hits(bare, patches) >= 1, "HOG alone takes a badge for a face in this frame"
    found = detector.forward(FrameViews(image))
    assert hits(found, patches) == 0
    assert hits(found, truth.faces, 0.3) == 1 and len(found) == 1


@pytest.mark.parametrize("frame_no", [0, 36])
def test_printed_cartoon_face_is_not_a_face(detector, frame_no: int) -> None:  # type: ignore[no-untyped-def]
    image, truth = facelike_scene().frame(frame_no)
    cartoon = tuple(p.box for p in truth.nonfaces if p.kind == "cartoon face print")
    assert hits(DlibHogDetector().forward(FrameViews(image)), cartoon) == 1, "HOG alone finds the print"
    found = detector.forward(FrameViews(image))
    assert hits(found, tuple(p.box for p in truth.nonfaces)) == 0
    assert hits(found, truth.faces, 0.3) == 1 and len(found) == 1


def _with_patterns(image: np.ndarray, side: int) -> tuple[np.ndarray, list[Box]]:
    """`image` with a drawn smiley, a cartoon face print and the astronaut's mission patch
    pasted along its bottom edge, each about `side` px; their boxes."""
    out = image.copy()
    badge = astronaut()[340:428, 128:214]
    alpha = np.full(badge.shape[:2], 255, np.uint8)
    pictures = [smiley(side), cartoon_face(side, int(side * 1.2)),
                np.dstack([cv2.resize(badge, (side, side)), cv2.resize(alpha, (side, side))])]
    boxes = []
    h, w = out.shape[:2]
    for k, pic in enumerate(pictures):
        ph, pw = pic.shape[:2]
        x, y = int(w * (0.2 + 0.3 * k)), h - ph - 4
        a = pic[:, :, 3:] / 255.0
        out[y:y + ph, x:x + pw] = (pic[:, :, :3] * a + out[y:y + ph, x:x + pw] * (1 - a)).astype(np.uint8)
        boxes.append((float(x), float(y), float(x + pw), float(y + ph)))
    return out, boxes


def test_small_faces_kept_patterns_dropped(detector_up1) -> None:  # type: ignore[no-untyped-def]
    """t1.jpg at 0.4: six faces 37-53 px wide (found with one upsampling pass); beside them
    the patterns at the same size. Exactly the six faces come out."""
    group = group_picture()
    small = cv2.resize(group, None, fx=0.4, fy=0.4, interpolation=cv2.INTER_AREA)
    image, patterns = _with_patterns(cv2.copyMakeBorder(small, 0, 70, 0, 0, cv2.BORDER_REPLICATE), 48)
    bare = DlibHogDetector(upsample=1, max_upscale=Config().detect.max_upscale,
                           refine=Config().detect.refine).forward(FrameViews(image))
    found = detector_up1.forward(FrameViews(image))  # the same HOG (and scale), filtered
    faces = [b for b, _ in bare if not any(iou(b, p) > 0.2 for p in patterns)]
    assert len(faces) == 6
    assert hits(found, tuple(patterns)) == 0
    assert len(found) == 6 and hits(found, tuple(faces), 0.9) == 6


@pytest.mark.parametrize("angle", [-30, -15, 30])
def test_rolled_face_kept_badge_dropped(detector_up1, angle: float) -> None:  # type: ignore[no-untyped-def]
    """The astronaut rolled up to 30 degrees, with the mission patch and name badge on her suit."""
    image = astronaut()
    m = cv2.getRotationMatrix2D((256, 256), angle, 1.0)
    rolled = cv2.warpAffine(image, m, (512, 512), borderMode=cv2.BORDER_REPLICATE)
    # the badges, drawn again upright beside her so HOG sees them at every roll
    canvas, patterns = _with_patterns(cv2.copyMakeBorder(rolled, 0, 110, 0, 0, cv2.BORDER_REPLICATE), 90)
    face = cv2.transform(np.array([[[(ASTRONAUT_FACE[0] + ASTRONAUT_FACE[2]) / 2,
                                     (ASTRONAUT_FACE[1] + ASTRONAUT_FACE[3]) / 2]]]), m)[0, 0]
    assert len(DlibHogDetector(upsample=1).forward(FrameViews(canvas))) > 1, "HOG alone finds a pattern too"
    found = detector_up1.forward(FrameViews(canvas))
    assert len(found) == 1
    (x0, y0, x1, y1), _ = found[0]
    assert x0 < face[0] < x1 and y0 < face[1] < y1


@pytest.mark.slow
def test_demo_picture_keeps_its_six_faces(detector) -> None:  # type: ignore[no-untyped-def]
    found = detector.forward(FrameViews(group_picture()))
    assert len(found) == 6


def test_memory_judges_a_box_once(detector) -> None:  # type: ignore[no-untyped-def]
    """A face (and a badge) seen at every detection is embedded when it appears, not at every
    detection; a rejected box is judged again after `recheck_rejected` detections, the face
    only after `recheck`."""
    filt = FaceFilter(DlibHogDetector(), recheck=30, recheck_rejected=3)
    image, _ = rotate_scene().frame(54)
    views = FrameViews(image)
    first = filt.forward(views)
    assert len(first) == 1 and filt.rejected == 2
    judged = filt.judged
    assert judged == 3  # the face and the two badges
    for _ in range(2):
        assert filt.forward(views) == first
    assert filt.judged == judged
    assert filt.forward(views) == first  # the 4th detection: the two badges judged again
    assert filt.judged == judged + 2 and filt.rejected == 2 * 4


@pytest.mark.slow
def test_boxes_judged_together_as_one_by_one() -> None:
    """A detection's new boxes are judged as a batch (points at once, embeddings as one run):
    the same verdicts, and nearly the same scores, as each judged alone."""
    image, _ = rotate_scene().frame(54)
    views = FrameViews(image)
    filt = FaceFilter(DlibHogDetector())
    filt.open()
    found = filt.detector.forward(views)
    group = group_picture()
    found_group = filt.detector.forward(FrameViews(group))
    assert len(found) == 3 and len(found_group) == 6  # a face and two badges; six faces
    for views_, boxes in ((views, found), (FrameViews(group), found_group)):
        together = filt.are_faces(views_, boxes)
        alone = [filt.is_face(views_, box, score) for box, score in boxes]
        assert together == alone
        points = [filt.landmarker.forward(views_, box) for box, _ in boxes]
        batch = filt.embedding_scores(views_.bgr, points)
        single = [filt.embedding_scores(views_.bgr, [p])[0] for p in points]
        assert np.abs(batch - np.array(single)).max() < 1e-4
    assert sum(filt.are_faces(views, found)) == 1 and all(filt.are_faces(FrameViews(group), found_group))
    assert filt.are_faces(views, []) == []


def test_plausible_rejects_a_scrambled_layout() -> None:
    image = astronaut()
    views = FrameViews(image)
    filt = FaceFilter(DlibHogDetector())
    filt.open()
    points = filt.landmarker.forward(views, ASTRONAUT_FACE)
    assert plausible(points, ASTRONAUT_FACE)
    upside_down = points.copy()
    upside_down[:, 1] = 2 * points[:, 1].mean() - points[:, 1]
    assert not plausible(upside_down, ASTRONAUT_FACE)
    squeezed = points.copy()
    squeezed[:, 0] = points[:, 0].mean() + (points[:, 0] - points[:, 0].mean()) * 0.2
    assert not plausible(squeezed, ASTRONAUT_FACE)


def test_verify_off_keeps_hog_boxes() -> None:
    det = default_detector(verify=False)
    assert isinstance(det, DlibHogDetector)
    assert isinstance(default_detector(), FaceFilter)
    with pytest.raises(ConfigError, match="detect.verify must be true or false"):
        load_config(None, ["detect.verify=maybe"])


@pytest.mark.slow
def test_swap_leaves_the_badges_alone(tmp_path: Path) -> None:
    """End to end: `facestream swap` (dlib, default config) on 30 frames of the rotating
    astronaut, where HOG alone takes the badges for faces at each detection: the face is
    swapped in every frame, the badges in none (before: the mission patch in most frames)."""
    scene = rotate_scene()
    frames, truths = zip(*(scene.frame(i) for i in range(30, 60)))
    clip = tmp_path / "in.mp4"
    write_clip(clip, iter(frames), fps=30, audio=False, crf=18)
    source = tmp_path / "source.png"
    cv2.imwrite(str(source), scene.source)
    out = tmp_path / "out.mp4"
    res = subprocess.run([sys.executable, "-m", "stream.cli", "swap", "--engine", "dlib", "--source", str(source),
                          "--input", str(clip), "--output", str(out), "-q"], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    from tools.quality.measure import read_frames

    inp, outp = list(read_frames(clip)), list(read_frames(out))
    assert len(outp) == len(inp) == 30
    swapped_face = badge_frames = 0
    for a, b, truth in zip(inp, outp, truths):
        changed = metrics.changed_mask(a, b)
        x0, y0, x1, y1 = (int(v) for v in truth.faces[0])
        swapped_face += changed[y0:y1, x0:x1].mean() > 0.2
        for patch in truth.nonfaces:
            px0, py0, px1, py1 = (max(0, int(v)) for v in patch.box)
            badge_frames += changed[py0:py1, px0:px1].mean() > 0.05
    assert swapped_face == 30
    assert badge_frames == 0
    assert ASTRONAUT_BADGES  # the patches measured are the clip set's
