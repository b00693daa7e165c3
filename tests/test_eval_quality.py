"""tools/eval_quality.py: each measure on constructed cases whose answer is known, the clip set's
ground truth against what dlib sees, and the command's errors and suite."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import dlib
import numpy as np
import pytest

from engines.geometry.measures import face_turn
from stream.media.demo_clips import astronaut, write_clip
from tests.fixtures import make_arcface
from tools.quality import metrics
from tools.quality.clips import SCENES, Scene, facelike_scene, make_clip
from tools.quality.measure import BOX_JITTER, Models, Reference, jittered
from tools.quality.truth import ClipTruth, FrameTruth, Patch, clip_box, visible

ROOT = Path(__file__).resolve().parent.parent
TOOL = [sys.executable, str(ROOT / "tools" / "eval_quality.py")]


def iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


@pytest.fixture(scope="module")
def models() -> Models:
    return Models()


@pytest.fixture(scope="module")
def short_clip(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The face-like clip's first 8 frames: one face, four face-like patterns."""
    scene: Scene = facelike_scene()
    full = scene.n_frames
    scene.seconds = 8 / 30
    whole = scene.views
    scene.views = lambda t: whole(t * 7 / (full - 1))
    return make_clip(scene, tmp_path_factory.mktemp("quality"))


@pytest.fixture(scope="module")
def short_ref(models: Models, short_clip):  # type: ignore[no-untyped-def]
    return Reference(models, cv2.imread(str(short_clip.source)), short_clip.video,
                     ClipTruth.load(short_clip.truth), sample_every=4)


def frames_of(path: Path) -> list[np.ndarray]:
    from tools.quality.measure import read_frames

    return list(read_frames(path))


def test_an_untouched_output_measures_as_untouched(short_clip, short_ref, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    copy = tmp_path / "same.mp4"
    shutil.copy(short_clip.video, copy)
    r = short_ref.compare(copy, "none")
    assert r.frames == 8 and r.faces == 2  # frames 0 and 4, one face each
    assert r.landmark_shift == 0.0
    assert r.flicker == 1.0 and r.jitter == 1.0
    assert r.nonface_swaps == 0 and r.patch_hits == {}
    assert r.swapped == 0.0 and r.closer == 0.0
    assert r.dist_after == pytest.approx(r.dist_before)
    assert r.seam is None


@pytest.mark.slow
def test_each_face_gets_its_own_figures(short_clip, short_ref, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    frames = frames_of(short_clip.video)
    truth = ClipTruth.load(short_clip.truth)
    for i in (0, 4):  # the sampled frames: the face's box blurred away
        x0, y0, x1, y1 = clip_box(truth.frames[i].faces[0], truth.size)
        frames[i][y0:y1, x0:x1] = cv2.GaussianBlur(frames[i][y0:y1, x0:x1], (0, 0), 6)
    out = tmp_path / "blurred.mp4"
    write_clip(out, frames, audio=False, crf=18)
    r = short_ref.compare(out, "blurred")
    (face,) = r.per_face
    assert face.face == 0 and face.samples == 2
    assert face.dist_before == pytest.approx(r.dist_before)
    assert face.dist_after == pytest.approx(r.dist_after) and face.dist_after != pytest.approx(face.dist_before)
    assert face.landmark_shift == pytest.approx(r.landmark_shift) and face.landmark_shift > 0
    assert face.shift_noise == pytest.approx(r.shift_noise) and face.shift_noise > 0
    assert face.turn < 0.3  # the clip's face looks at the camera
    x0, _, x1, _ = truth.frames[0].faces[0]
    assert face.width == pytest.approx(x1 - x0, rel=0.2)

    res = subprocess.run(TOOL + ["--source", str(short_clip.source), "--input", str(short_clip.video),
                                 "--output", str(out), "--truth", str(short_clip.truth), "--label", "blurred",
                                 "--sample-every", "4", "--per-face"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    start = lines.index("") + 1
    assert lines[start].split() == ["clip", "config", "face", "samples", "before", "after", "shift", "noise", "turn",
                                    "width", "misses"]
    row = lines[start + 2].split()
    assert row[:4] == [short_clip.video.stem, "blurred", "0", "2"]
    assert float(row[7]) == pytest.approx(face.shift_noise, abs=0.001)
    assert float(row[5]) == pytest.approx(face.dist_after, abs=0.001)
    misses = [name for name, missed in (("identity", face.dist_after >= 0.6), ("shift", face.landmark_shift > 0.05))
              if missed]
    assert row[-1] == (",".join(misses) or "-")


def test_shift_noise_is_the_inputs_own_landmarks_under_moved_boxes(models: Models, short_clip) -> None:  # type: ignore[no-untyped-def]
    box = (100.0, 50.0, 140.0, 100.0)
    moved = jittered(box, 0.05)
    assert moved == [(98.0, 50.0, 138.0, 100.0), (102.0, 50.0, 142.0, 100.0), (100.0, 47.5, 140.0, 97.5),
                     (100.0, 52.5, 140.0, 102.5), (99.0, 48.75, 141.0, 101.25), (101.0, 51.25, 139.0, 98.75)]
    truth = ClipTruth.load(short_clip.truth)
    frame = frames_of(short_clip.video)[0]
    ref = Reference(models, cv2.imread(str(short_clip.source)), short_clip.video, truth, sample_every=8)
    face = truth.frames[0].faces[0]
    lm = models.landmarks(frame, face)
    expected = np.mean([metrics.landmark_shift(lm, models.landmarks(frame, b)) for b in jittered(face, BOX_JITTER)])
    assert ref.samples[(0, 0)].box_noise == pytest.approx(expected)
    assert 0 < expected < 0.1  # a frontal face: its points barely move with the box


def test_turn_reads_how_far_a_face_is_turned() -> None:
    lm = np.zeros((68, 2), np.float32)
    lm[36], lm[45] = (80, 100), (120, 100)  # the eyes' outer corners: a level axis
    lm[0], lm[16], lm[30] = (60, 110), (140, 110), (100, 130)
    assert face_turn(lm) == pytest.approx(0.0)
    lm[30] = (80, 130)  # the nose tip a quarter of the way across: the left half is a third of the right
    assert face_turn(lm) == pytest.approx(1 - 20 / 60)
    lm[30] = (55, 130)  # the nose past the far jaw end: in profile
    assert face_turn(lm) == 1.0
    assert face_turn(np.zeros((68, 2), np.float32)) == 0.0


def test_a_face_pasted_on_a_non_face_is_counted(short_clip, short_ref, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    truth = ClipTruth.load(short_clip.truth)
    face = cv2.imread(str(short_clip.source))[83:171, 179:267]  # the astronaut's face
    frames = frames_of(short_clip.video)
    for i in (2, 3, 4, 5, 6):
        cartoon = next(p for p in truth.frames[i].nonfaces if p.kind == "cartoon face print")
        x0, y0, x1, y1 = clip_box(cartoon.box, truth.size)
        frames[i][y0:y1, x0:x1] = cv2.resize(face, (x1 - x0, y1 - y0))
    out = tmp_path / "badge.mp4"
    write_clip(out, frames, audio=False, crf=18)
    r = short_ref.compare(out, "pasted")
    assert r.nonface_swaps == 5
    assert r.patch_hits == {"cartoon face print": 5}
    assert r.swapped == 0.0  # the real face was left alone


def test_the_source_face_in_place_of_the_target_moves_closer(models: Models, tmp_path: Path) -> None:
    """An output showing the source person where the target was: distance well under 0.6."""
    source = astronaut()
    src_box = (179, 83, 267, 171)
    target = SCENES["grey-source"]()
    frames_in, frames_out, truths = [], [], []
    for i in (0, 10, 20):
        frame, ft = target.frame(i)
        (fx0, fy0, fx1, fy1), = ft.faces
        s = (fx1 - fx0) / (src_box[2] - src_box[0])
        m = np.float32([[s, 0, fx0 - s * src_box[0]], [0, s, fy0 - s * src_box[1]]])
        frames_in.append(frame)
        frames_out.append(cv2.warpAffine(source, m, (frame.shape[1], frame.shape[0])))
        truths.append(ft)
    write_clip(tmp_path / "in.mp4", frames_in, audio=False, crf=18)
    write_clip(tmp_path / "out.mp4", frames_out, audio=False, crf=18)
    truth = ClipTruth("t", "", 30, target.size, "s.png", tuple(truths))
    r = Reference(models, source, tmp_path / "in.mp4", truth, sample_every=1).compare(tmp_path / "out.mp4")
    assert r.faces == 3
    assert r.dist_before is not None and r.dist_before > 0.6
    assert r.dist_after is not None and r.dist_after < 0.45
    assert r.closer == 1.0 and r.under == 1.0 and r.swapped == 1.0


def test_flicker_inside_the_face_box_raises_the_ratio(short_clip, short_ref, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    truth = ClipTruth.load(short_clip.truth)
    frames = frames_of(short_clip.video)
    for i, frame in enumerate(frames):
        x0, y0, x1, y1 = clip_box(truth.frames[i].faces[0], truth.size)
        roi = frame[y0:y1, x0:x1].astype(np.int16)
        frame[y0:y1, x0:x1] = np.clip(roi + (8 if i % 2 else -8), 0, 255).astype(np.uint8)
    out = tmp_path / "flicker.mp4"
    write_clip(out, frames, audio=False, crf=18)
    r = short_ref.compare(out)
    assert r.flicker is not None and r.flicker > 1.5


def _moving_face_clips(tmp_path: Path, jitter_px: float) -> tuple[Path, Path, ClipTruth]:
    """The astronaut panning (sub-pixel steps, a slight zoom) and an output where her face is
    replaced by a mirrored one that moves with it, each frame of the output shifted at random
    by up to `jitter_px` pixels."""
    source = astronaut()
    fx0, fy0, fx1, fy1 = 179, 83, 267, 171
    mirrored = source.copy()
    mirrored[fy0:fy1, fx0:fx1] = source[fy0:fy1, fx0:fx1][:, ::-1]
    mask = np.zeros(source.shape[:2], np.float32)
    mask[fy0 + 8:fy1 - 8, fx0 + 8:fx1 - 8] = 1.0
    mask = cv2.GaussianBlur(mask, (0, 0), 4)[..., None]  # a feathered paste, as a swap's
    swapped = (mask * mirrored + (1 - mask) * source).astype(np.uint8)
    rng = np.random.default_rng(3)
    frames_in, frames_out, truths = [], [], []
    for i in range(12):
        s = 1.0 + 0.004 * i
        tx, ty = -110 + 0.7 * i, -40 + 0.45 * i
        m = np.float32([[s, 0, tx], [0, s, ty]])
        frames_in.append(cv2.warpAffine(source, m, (320, 240), flags=cv2.INTER_LINEAR))
        moved = m.copy()
        moved[:, 2] += rng.uniform(-jitter_px, jitter_px, 2)
        frames_out.append(cv2.warpAffine(swapped, moved, (320, 240), flags=cv2.INTER_LINEAR))
        box = (fx0 * s + tx, fy0 * s + ty, fx1 * s + tx, fy1 * s + ty)
        truths.append(FrameTruth((box,)))
    write_clip(tmp_path / "in.mp4", frames_in, audio=False, crf=18)
    write_clip(tmp_path / "out.mp4", frames_out, audio=False, crf=18)
    return tmp_path / "in.mp4", tmp_path / "out.mp4", ClipTruth("t", "", 30, (320, 240), "s.png", tuple(truths))


@pytest.mark.parametrize("jitter_px", [0.0, 1.0])
def test_jitter_is_change_the_input_motion_does_not_explain(models: Models, tmp_path: Path,
                                                           jitter_px: float) -> None:
    """A swapped face that follows the input's motion measures ~1.0; the same face shifted at
    random each frame measures well above it."""
    inp, out, truth = _moving_face_clips(tmp_path, jitter_px)
    r = Reference(models, astronaut(), inp, truth, sample_every=6).compare(out)
    assert r.jitter is not None
    if jitter_px == 0.0:
        assert 0.85 < r.jitter < 1.2
    else:
        assert r.jitter > 2.0  # a pixel of jitter (flicker barely moves: ~1.0)


def test_jitter_motion_is_found_from_the_input() -> None:
    image = astronaut()
    m = np.float64([[0.99, -0.02, -101.3], [0.02, 0.99, -37.6]])
    prev = cv2.warpAffine(image, np.float64([[1, 0, -100], [0, 1, -40]]), (320, 240))
    cur = cv2.warpAffine(image, m, (320, 240))
    step = metrics.face_motion(prev, cur, (79.0, 43.0, 167.0, 131.0))
    assert step is not None
    # prev's (x, y) is the image's (x + 100, y + 40); cur shows it at m @ (x + 100, y + 40).
    expected = m @ np.float64([[1, 0, 100], [0, 1, 40], [0, 0, 1]])
    assert np.abs(step - expected)[:, :2].max() < 0.01 and np.abs(step - expected)[:, 2].max() < 0.5
    assert metrics.face_motion(np.zeros_like(prev), np.zeros_like(cur), (79.0, 43.0, 167.0, 131.0)) is None


def test_landmark_shift_is_in_interocular_units() -> None:
    # 300-W's inter-ocular distance: the eyes' outer corners, not their centres.
    lm = np.zeros((68, 2), np.float32)
    lm[36:42] = (100, 100)
    lm[42:48] = (140, 100)  # eye centres 40 px apart
    lm[36], lm[45] = (88, 100), (152, 100)  # outer corners 64 px apart
    assert metrics.landmark_shift(lm, lm) == 0.0
    assert metrics.landmark_shift(lm, lm + np.float32([6, 8])) == pytest.approx(10 / 64)


def _paste(base: np.ndarray, face: np.ndarray, box: tuple[int, int, int, int], feather: int) -> np.ndarray:
    x0, y0, x1, y1 = box
    mask = np.zeros(base.shape[:2], np.float32)
    cv2.ellipse(mask, ((x0 + x1) // 2, (y0 + y1) // 2), ((x1 - x0) // 2, (y1 - y0) // 2), 0, 0, 360, 1.0, -1)
    if feather:
        mask = cv2.GaussianBlur(mask, (0, 0), feather)
    alpha = mask[:, :, None]
    return np.clip(face * alpha + base * (1 - alpha) + 0.5, 0, 255).astype(np.uint8)


def test_a_hard_seam_measures_stronger_than_a_feathered_one() -> None:
    scene = SCENES["grey-source"]()
    frame, ft = scene.frame(0)
    box = tuple(int(v) for v in ft.faces[0])
    # The source face, darker than the target's skin: a paste with a visible edge.
    src = cv2.resize(astronaut()[83:171, 179:267], (box[2] - box[0], box[3] - box[1]))
    face = frame.copy()
    face[box[1]:box[3], box[0]:box[2]] = (src * 0.7).astype(np.uint8)
    hard = metrics.seam_strength(frame, _paste(frame, face, box, 0), ft.faces[0])
    soft = metrics.seam_strength(frame, _paste(frame, face, box, 8), ft.faces[0])
    assert hard is not None and soft is not None
    assert hard[0] / hard[1] > 1.5 * (soft[0] / soft[1])
    assert metrics.seam_strength(frame, frame, ft.faces[0]) is None  # nothing swapped: no seam


@pytest.mark.parametrize("name", ["rotate", "grey-source", "low-chroma", "overlap", "turning-talk", "panned-group"])
def test_the_clip_set_ground_truth_is_where_dlib_sees_the_faces(name: str) -> None:
    scene = SCENES[name]()
    detector = dlib.get_frontal_face_detector()
    frame, ft = scene.frame(0)
    found = [(r.left(), r.top(), r.right() + 1, r.bottom() + 1)
             for r in detector(cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY), 0)]
    matched = [max((iou(face, f) for f in found), default=0.0) for face in ft.faces]
    assert len(ft.faces) >= 1
    assert sum(m > 0.5 for m in matched) >= len(ft.faces) - 1, (matched, found)


def test_the_clip_set_covers_what_the_issue_asks_for() -> None:
    rotate = SCENES["rotate"]()
    angles = [abs(rotate.frame(i)[1].angles[0]) for i in range(rotate.n_frames)]
    assert max(angles) == pytest.approx(30, abs=0.5)
    small = SCENES["small"]()
    widths = [b[2] - b[0] for b in small.frame(0)[1].faces]
    assert len(widths) == 6 and 38 <= min(widths) and max(widths) <= 55
    overlap = SCENES["overlap"]()
    faces = overlap.frame(0)[1].faces
    assert sum(iou(a, b) > 0 for i, a in enumerate(faces) for b in faces[i + 1:]) >= 3
    leave = SCENES["leave-return"]()
    shares = [visible(leave.frame(i)[1].faces[0], leave.size) for i in range(leave.n_frames)]
    assert shares[0] == 1.0 and shares[-1] == 1.0 and min(shares) == 0.0
    kinds = {p.kind for p in SCENES["face-like"]().frame(0)[1].nonfaces}
    assert {"drawn smiley", "cartoon face print", "cat face print", "round badge"} <= kinds
    occ = SCENES["occluder"]()
    assert any(iou(o.box, occ.frame(i)[1].faces[0]) > 0 for i in range(occ.n_frames) for o in occ.frame(i)[1].occluders)
    grey = SCENES["grey-source"]().source
    assert np.array_equal(grey[:, :, 0], grey[:, :, 1]) and np.array_equal(grey[:, :, 1], grey[:, :, 2])


def test_the_new_clips_turn_talk_pan_and_change_the_light() -> None:
    """turning-talk: the head turns both ways and the jaw moves; panned-group: six faces, the
    first leaving the frame and coming back, the light ramping up, a board in front of the
    fourth face for a while."""
    talk = SCENES["turning-talk"]()
    n = talk.n_frames
    centres = [(lambda b: (b[0] + b[2]) / 2)(talk.frame(i)[1].faces[0]) for i in (0, n // 4, 3 * n // 4)]
    assert centres[1] - centres[0] > 5 and centres[0] - centres[2] > 5  # turned one way, then the other
    assert talk.canvas_at is not None
    still, (box,) = talk.canvas_at(0.0)  # facing the camera, the mouth shut
    spoken, (same,) = talk.canvas_at(0.5)  # facing the camera again, the jaw open
    assert box == pytest.approx(same, abs=1e-6)
    x0, y0, x1, y1 = (int(v) for v in box)
    lower = slice(y0 + (y1 - y0) * 3 // 4, y1), slice(x0, x1)
    upper = slice(y0, y0 + (y1 - y0) // 2), slice(x0, x1)
    change = [float(np.abs(spoken[r].astype(int) - still[r].astype(int)).mean()) for r in (lower, upper)]
    assert change[0] > 3 and change[1] == 0.0
    group = SCENES["panned-group"]()
    frames = [group.frame(i) for i in range(0, group.n_frames, 6)]
    assert all(len(truth.faces) == 6 for _, truth in frames)
    shares = [visible(truth.faces[0], group.size) for _, truth in frames]
    assert shares[0] == 1.0 and shares[-1] == 1.0 and min(shares) == 0.0
    brightness = [float(image.mean()) for image, _ in frames]
    assert brightness[-1] > 1.5 * brightness[0]
    covered = [any(iou(o.box, truth.faces[3]) > 0.3 for o in truth.occluders) for _, truth in frames]
    assert 0 < sum(covered) < len(frames)


def test_ground_truth_round_trips_through_json(tmp_path: Path) -> None:
    truth = ClipTruth("c", "d", 30, (640, 360), "s.png", (
        FrameTruth(((1.0, 2.0, 3.0, 4.0),), (12.5,), (Patch("badge", (5.0, 6.0, 7.0, 8.0)),), ()),))
    truth.save(tmp_path / "t.json")
    assert ClipTruth.load(tmp_path / "t.json") == truth


def test_arcface_distances_are_added_when_its_file_is_found(models: Models, short_clip, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    arc = make_arcface(tmp_path / "w600k_r50.onnx", seed=3)
    with_arc = Models(arc)
    ref = Reference(with_arc, cv2.imread(str(short_clip.source)), short_clip.video,
                    ClipTruth.load(short_clip.truth), sample_every=4)
    r = ref.compare(short_clip.video)
    assert r.arc_before is not None and r.arc_after == pytest.approx(r.arc_before)
    assert r.arc_closer == 0.0


@pytest.mark.slow
def test_bad_input_is_one_line(tmp_path: Path, short_clip) -> None:  # type: ignore[no-untyped-def]
    res = subprocess.run(TOOL + ["--source", str(tmp_path / "none.png"), "--input", str(short_clip.video),
                                 "--output", str(short_clip.video)], capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr.strip() == f"eval_quality: --source {tmp_path / 'none.png'}: no such file"
    other = tmp_path / "short.mp4"
    write_clip(other, frames_of(short_clip.video)[:5], audio=False)
    res = subprocess.run(TOOL + ["--source", str(short_clip.source), "--input", str(short_clip.video),
                                 "--output", str(other)], capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip() == f"eval_quality: {other}: 5 frames, the input has 8"


@pytest.mark.slow
def test_the_suite_swaps_with_facestream_and_prints_the_table(tmp_path: Path) -> None:
    res = subprocess.run(TOOL + ["--suite", "--clips", "leave-return", "--configs", "fast",
                                 "--workdir", str(tmp_path), "--sample-every", "6",
                                 "--json", str(tmp_path / "f.json")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    header, rule, row = res.stdout.splitlines()[:3]
    assert header.split()[:4] == ["clip", "config", "faces", "before"]
    assert row.split()[:2] == ["leave-return", "fast"]
    (fig,) = json.loads((tmp_path / "f.json").read_text())
    assert (tmp_path / "leave-return.fast.mp4").is_file()
    assert fig["frames"] == 72 and fig["faces"] >= 3 and fig["swapped"] > 0.5
    assert fig["dist_after"] < fig["dist_before"]


def test_a_swap_spilling_past_its_face_is_not_a_non_face_swap() -> None:
    changed = np.zeros((360, 640), bool)
    face = (200.0, 100.0, 300.0, 200.0)
    changed[110:190, 180:390] = True  # the face's swap, reaching well past its grown box
    changed[250:300, 500:560] = True  # a swap on something else
    assert metrics.stray_swaps(changed, [face]) == [(500.0, 250.0, 560.0, 300.0)]


def test_overpaint_is_the_changed_share_of_an_occluder_in_front_of_a_face() -> None:
    changed = np.zeros((360, 640), bool)
    face = (200.0, 100.0, 300.0, 200.0)
    cup = (180.0, 150.0, 260.0, 230.0)  # its part in front of the face: x 200-260, y 150-200
    assert metrics.occluder_overpaint(changed, [face], cup) == 0.0
    changed[150:200, 200:230] = True
    assert metrics.occluder_overpaint(changed, [face], cup) == pytest.approx(0.5)
    assert metrics.occluder_overpaint(changed, [face], (400.0, 0.0, 450.0, 50.0)) is None  # not in front


@pytest.mark.slow
def test_the_suite_passes_each_set_to_facestream_swap(tmp_path: Path) -> None:
    from tools.eval_quality import parse_args, swap_args

    args = parse_args(["--suite", "--engine", "dlib", "--set", "detect.refine=false", "--set", "swap.shading=0"])
    assert swap_args(args) == ("--engine", "dlib", "--set", "detect.refine=false", "--set", "swap.shading=0")
    assert swap_args(parse_args(["--suite"])) == ()
    # A value facestream refuses stops the suite with facestream's own one-line reason.
    res = subprocess.run(TOOL + ["--suite", "--clips", "leave-return", "--configs", "fast",
                                 "--workdir", str(tmp_path), "--set", "swap.shading=2"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        "eval_quality: facestream swap --config fast on leave-return.mp4 failed: "
        "facestream: error: swap.shading must be in [0, 1], got 2")


def test_cadences_parse_with_every_frame_first() -> None:
    from tools.eval_quality import parse_args
    from tools.quality.cadence import label, parse_cadences, split_label

    assert parse_cadences("8,4") == (1, 4, 8)
    assert parse_cadences("1") == (1,)
    with pytest.raises(ValueError, match="'0'"):
        parse_cadences("4,0")
    assert label("default", 4) == "default@4" and split_label("default@4") == ("default", 4)
    assert split_label("default") is None
    assert parse_args(["--suite", "--swap-every", "4"]).cadences == (1, 4)
    for argv in (["--suite", "--stand-in"], ["--swap-every", "4", "--make-clips", "x"],
                 ["--suite", "--swap-every", "4", "--stand-in", "--engine", "dlib"], ["--suite", "--swap-every", "x"]):
        with pytest.raises(SystemExit):
            parse_args(argv)


def test_face_psnr_reads_the_face_regions_only() -> None:
    from tools.quality.cadence import FACE_GROW, FacePsnr, face_mask
    from tools.quality.truth import grow

    box = (100.0, 100.0, 150.0, 150.0)
    truth = FrameTruth(faces=(box,))
    ref = np.full((360, 640, 3), 100, np.uint8)
    other = ref.copy()
    other[300:350, 500:550] = 0  # away from the face
    figures = FacePsnr()
    mask = face_mask(truth, ref.shape)
    figures.add(ref, other, mask)
    assert figures.psnr == np.inf and figures.carried_psnr is None
    x0, y0, x1, y1 = clip_box(grow(box, FACE_GROW), (640, 360))
    assert mask.sum() == (x1 - x0) * (y1 - y0) and (x1 - x0) > 50
    other[y0:y1, x0:x1] = 110  # every face pixel 10 levels off: MSE 100
    figures.add(ref, other, mask, carried=True)
    assert figures.worst == pytest.approx(10 * np.log10(255 ** 2 / 100)) and figures.worst_frame == 1
    assert figures.carried_psnr == pytest.approx(figures.worst)
    assert figures.psnr == pytest.approx(10 * np.log10(255 ** 2 / 50))  # half the pixels off


def test_a_cadence_row_names_the_goals_it_misses() -> None:
    from tools.quality.cadence import FacePsnr, compare
    from tools.quality.measure import QualityReport

    every = QualityReport("c", "default@1", 60, 12, dist_after=0.55, landmark_shift=0.030, flicker=1.00, jitter=1.2)
    close = QualityReport("c", "default@4", 60, 12, dist_after=0.565, landmark_shift=0.038, flicker=1.10, jitter=1.5)
    far = QualityReport("c", "default@8", 60, 12, dist_after=0.575, landmark_shift=0.045, flicker=1.20, jitter=1.8)
    row = compare(every, close, "default", 4, FacePsnr())
    assert row.misses == [] and row.dist_delta == pytest.approx(0.015) and row.shift_delta == pytest.approx(0.008)
    assert row.flicker_vs_every == pytest.approx(1.1) and row.jitter_vs_every == pytest.approx(1.25)
    assert compare(every, far, "default", 8, FacePsnr()).misses == ["identity", "shift", "flicker"]


@pytest.mark.slow
def test_the_suite_at_a_cadence_swaps_each_n_against_every_frame(short_clip, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                                                 tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from tools import eval_quality
    from tools.quality import suite

    asked = []

    def swap(clip, output: Path, config: str, extra: tuple[str, ...] = ()) -> None:  # type: ignore[no-untyped-def]
        asked.append((output.name, config, extra))
        shutil.copy(clip.video, output)  # an untouched output at every cadence

    monkeypatch.setattr(suite, "make_clip_set", lambda folder, names: [short_clip])
    monkeypatch.setattr(suite, "run_swap", swap)
    assert eval_quality.main(["--suite", "--configs", "default", "--swap-every", "4", "--sample-every", "4",
                              "--workdir", str(short_clip.video.parent), "--json", str(tmp_path / "f.json")]) == 0
    name = short_clip.name
    lossless = ("--set", "encode.crf=0")  # the encoder's loss kept out of the PSNR
    assert asked == [(f"{name}.default@1.mp4", "default", lossless + ("--swap-every", "1")),
                     (f"{name}.default@4.mp4", "default", lossless + ("--swap-every", "4"))]
    out = capsys.readouterr().out
    assert f"{name}  default@4" in out
    figures = json.loads((tmp_path / "f.json").read_text())
    assert [o["config"] for o in figures["outputs"]] == ["default@1", "default@4"]
    (row,) = figures["cadence"]
    assert row["clip"] == name and row["every"] == 4 and row["psnr"] == np.inf
    assert row["dist_delta"] == 0.0 and row["shift_delta"] == 0.0 and row["misses"] == []
    assert figures["curve"] == [{"config": "default", "every": 4, "psnr": np.inf, "dist_delta": 0.0,
                                 "shift_delta": 0.0, "flicker": 1.0, "flicker_vs_every": 1.0, "jitter_vs_every": 1.0}]


@pytest.mark.slow
def test_the_neural_stand_in_swaps_at_its_cadence_and_carries_between(models: Models, short_clip,  # type: ignore[no-untyped-def]
                                                                      tmp_path: Path) -> None:
    from tools.quality.standin import clip_rows, standin_swapper

    swapper = standin_swapper(tmp_path)
    (row,) = clip_rows(models, swapper, short_clip, (1, 4))
    assert row.every == 4 and (row.swaps, row.carried) == (2, 6)  # one face, swapped on frames 0 and 4
    # The carried frames differ from every frame's swap; the swapped ones hardly do.
    assert row.carried_psnr is not None and 15 < row.carried_psnr < row.psnr < np.inf
