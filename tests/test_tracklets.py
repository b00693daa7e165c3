"""Tracklets and selection with scripted fake models: cadence, identity, caching, loss."""
from __future__ import annotations

import numpy as np
import pytest

from stream.analysis.one_euro import OneEuroFilter
from stream.analysis.selection import Selector
from stream.analysis.tracklets import Tracker, iou, landmark_box, relate, unrelate
from stream.config import DetectConfig, SelectConfig, TrackConfig

rng = np.random.default_rng(7)
TEMPLATE = rng.uniform(-0.5, 0.5, size=(68, 2)).astype(np.float32)
TEMPLATE[0], TEMPLATE[1] = (-0.5, -0.5), (0.5, 0.5)  # the template spans exactly [-0.5, 0.5]


class Scene:
    """The true faces of the current frame: (person, cx, cy, size)."""

    def __init__(self) -> None:
        self.faces: list[tuple[int, float, float, float]] = []

    def landmarks(self, person_index: int) -> np.ndarray:
        _, cx, cy, s = self.faces[person_index]
        return TEMPLATE * s + np.array([cx, cy], np.float32)


class FakeDetector:
    name = "fake-det"

    def __init__(self, scene: Scene) -> None:
        self.scene, self.calls = scene, 0

    def open(self) -> None: ...

    def forward(self, gray):
        self.calls += 1
        # the detector's box convention differs from the landmark box (larger, shifted)
        return [((cx - 0.6 * s, cy - 0.5 * s, cx + 0.6 * s, cy + 0.7 * s), 1.0)
                for _, cx, cy, s in self.scene.faces]


class FakeLandmarker:
    name = "fake-lm"

    def __init__(self, scene: Scene) -> None:
        self.scene, self.calls = scene, 0

    def open(self) -> None: ...

    def forward(self, gray, box):
        self.calls += 1
        bx, by = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
        bs = box[2] - box[0]
        for i, (_, cx, cy, s) in enumerate(self.scene.faces):
            if abs(cx - bx) < 0.5 * s and abs(cy - by) < 0.5 * s:
                return self.scene.landmarks(i)
        # nothing there: the predictor still answers, with a squashed shape in the box
        return TEMPLATE * np.array([bs * 2.0, bs * 0.3], np.float32) + np.array([bx, by], np.float32)

    def forward_many(self, gray, boxes):
        return [self.forward(gray, box) for box in boxes]


class FakeEmbedder:
    name = "fake-emb"
    threshold = 0.6

    def __init__(self, scene: Scene) -> None:
        self.scene, self.calls = scene, 0

    def open(self) -> None: ...

    def forward(self, image, landmarks):
        self.calls += 1
        c = landmarks.mean(axis=0)
        person = min(self.scene.faces, key=lambda f: np.hypot(f[1] - c[0], f[2] - c[1]))[0]
        v = np.zeros(8, np.float32)
        v[person] = 1.0
        return v

    def distance(self, a, b) -> float:
        return float(np.linalg.norm(a - b))


GRAY = np.zeros((720, 1280), np.uint8)


def make(scene: Scene, every: int = 5, max_missed: int = 1):
    det, lm, emb = FakeDetector(scene), FakeLandmarker(scene), FakeEmbedder(scene)
    # every_empty = every: these tests count detections on the schedule of followed faces
    tracker = Tracker(det, lm, emb, DetectConfig(every=every, every_empty=every), TrackConfig(max_missed=max_missed))
    return tracker, det, lm, emb


def test_relate_unrelate_round_trip() -> None:
    ref = (100.0, 50.0, 180.0, 150.0)
    box = (90.0, 40.0, 200.0, 170.0)
    back = unrelate(relate(box, ref), ref)
    assert np.allclose(back, box)


@pytest.mark.parametrize("every", [1, 4, 10])
def test_detection_cadence_and_landmarks_every_frame(every: int) -> None:
    scene = Scene()
    scene.faces = [(0, 300, 300, 100), (1, 800, 300, 120)]
    tracker, det, lm, _ = make(scene, every)
    for seq in range(40):
        scene.faces = [(0, 300 + 2 * seq, 300, 100), (1, 800 - seq, 300 + seq, 120)]
        tracks = tracker.update(GRAY, seq, seq / 30)
        assert len(tracks) == 2
    assert det.calls == -(-40 // every)  # ceil: only on schedule while tracking is confident
    assert lm.calls == 80  # every face, every frame


def test_tracks_keep_their_ids_and_follow_moving_faces() -> None:
    scene = Scene()
    tracker, *_ = make(scene, every=8)
    ids = None
    for seq in range(60):
        scene.faces = [(0, 200 + 4 * seq, 300, 100), (1, 900 - 3 * seq, 400, 110)]
        tracks = tracker.update(GRAY, seq, seq / 30)
        by_x = sorted(tracks, key=lambda t: t.landmarks[:, 0].mean())
        if ids is None:
            ids = [t.id for t in by_x] if seq == 0 else ids
        if seq < 50:  # before the faces cross
            assert [t.id for t in by_x] == ids
        for tr in tracks:
            c = tr.landmarks.mean(axis=0)
            truth = min(scene.faces, key=lambda f: abs(f[1] - c[0]))
            assert abs(c[0] - truth[1]) < 0.15 * truth[3]  # smoothing lag stays small


def test_a_face_that_leaves_ends_its_track_and_a_new_face_starts_one() -> None:
    scene = Scene()
    scene.faces = [(0, 300, 300, 100), (1, 800, 300, 100)]
    tracker, det, *_ = make(scene, every=10, max_missed=0)
    for seq in range(5):
        tracker.update(GRAY, seq, seq / 30)
    first_ids = {t.id for t in tracker.tracks}
    scene.faces = [(0, 300, 300, 100)]  # person 1 leaves: its box now holds nothing
    tracks = tracker.update(GRAY, 5, 5 / 30)
    assert len(tracks) == 1  # the squashed landmarks were seen as a loss at once
    calls = det.calls
    tracker.update(GRAY, 6, 6 / 30)
    assert det.calls == calls + 1  # a lost track asks for detection on the next frame
    scene.faces = [(0, 300, 300, 100), (2, 1000, 500, 90)]
    for seq in range(7, 30):
        tracks = tracker.update(GRAY, seq, seq / 30)
    assert len(tracks) == 2
    new_ids = {t.id for t in tracks} - first_ids
    assert len(new_ids) == 1


@pytest.mark.parametrize("max_missed", [0, 1, 3])
def test_a_vanished_face_is_never_returned_after_a_missed_detection(max_missed: int) -> None:
    scene = Scene()
    scene.faces = [(0, 300, 300, 100)]
    tracker, det, *_ = make(scene, every=10, max_missed=max_missed)
    for seq in range(10):
        assert len(tracker.update(GRAY, seq, seq / 30)) == 1
    # The face is replaced by a look-alike blur: the landmarker still "finds" it where it
    # was (no jump), but the detector does not.
    frozen = scene.landmarks(0)
    tracker.landmarker.forward_many = lambda gray, boxes: [frozen] * len(boxes)  # type: ignore
    scene.faces = []
    for seq in range(10, 30):
        assert tracker.update(GRAY, seq, seq / 30) == []  # not once swapped as a ghost
    assert tracker.tracks == []  # and ended after max_missed + 1 detections
    assert det.calls == 1 + (max_missed + 1) + 1  # first, forced re-checks, then on schedule at 20


def test_landmark_jitter_is_smoothed() -> None:
    f = OneEuroFilter(min_cutoff=1.5, beta=0.0)
    noise = np.random.default_rng(1).normal(0, 2.0, size=(90, 68, 2)).astype(np.float32)
    out = np.stack([f(100 + noise[i], i / 30) for i in range(90)])
    assert out[30:].std() < 0.5 * noise[30:].std()


def test_one_euro_follows_motion() -> None:
    f = OneEuroFilter(min_cutoff=1.5, beta=0.05)
    xs = [f(np.array([10.0 * i], np.float32), i / 30)[0] for i in range(60)]
    assert abs(xs[-1] - 590) < 30


@pytest.mark.parametrize("mode, expected_people", [
    ("all", {0, 1, 2}),
    ("largest", {1}),
    ("reference", {2}),
])
def test_selection_modes(mode: str, expected_people: set[int]) -> None:
    scene = Scene()
    scene.faces = [(0, 200, 300, 100), (1, 600, 300, 160), (2, 1000, 300, 120)]
    tracker, _, _, emb = make(scene)
    ref = np.zeros(8, np.float32)
    ref[2] = 1
    sel = Selector(SelectConfig(mode=mode, reference="ref.png" if mode == "reference" else None),
                   [ref] if mode == "reference" else [], emb, max_faces=8)
    for seq in range(20):
        targets = sel.choose(tracker.update(GRAY, seq, seq / 30), tracker, None, seq)
    people = {min(scene.faces, key=lambda f: abs(f[1] - t.face.landmarks[:, 0].mean()))[0] for t in targets}
    assert people == expected_people
    if mode == "reference":
        assert emb.calls == 3  # once per track over 20 frames, not per frame
    else:
        assert emb.calls == 0  # identity is not needed: the embedder never runs


def test_mapping_sends_each_source_to_its_person_and_caches_identity() -> None:
    scene = Scene()
    scene.faces = [(0, 200, 300, 100), (1, 600, 300, 100), (3, 1000, 300, 100)]
    tracker, _, _, emb = make(scene)
    refs = []
    for person in (1, 0):  # source 0 -> person 1, source 1 -> person 0; person 3 unmapped
        v = np.zeros(8, np.float32)
        v[person] = 1
        refs.append(v)
    sel = Selector(SelectConfig(mode="mapping", mapping=[["a", "b"], ["c", "d"]]), refs, emb, 8)
    for seq in range(30):
        targets = sel.choose(tracker.update(GRAY, seq, seq / 30), tracker, None, seq)
    got = {round(float(t.face.landmarks[:, 0].mean()) / 100): t.source for t in targets}
    assert got == {6: 0, 2: 1}
    assert emb.calls == 3


def test_identity_is_rechecked_rarely() -> None:
    scene = Scene()
    scene.faces = [(0, 200, 300, 100)]
    det, lm, emb = FakeDetector(scene), FakeLandmarker(scene), FakeEmbedder(scene)
    tracker = Tracker(det, lm, emb, DetectConfig(every=5), TrackConfig(recheck_every=25))
    ref = np.zeros(8, np.float32)
    sel = Selector(SelectConfig(mode="reference", reference="r"), [ref], emb, 8)
    for seq in range(100):
        sel.choose(tracker.update(GRAY, seq, seq / 30), tracker, None, seq)
    assert emb.calls == 4  # born at 0, then re-checked at 25, 50, 75


def test_iou() -> None:
    assert iou((0, 0, 10, 10), (0, 0, 10, 10)) == 1.0
    assert iou((0, 0, 10, 10), (20, 20, 30, 30)) == 0.0
    assert landmark_box(TEMPLATE) == (-0.5, -0.5, 0.5, 0.5)


class FrameScene(Scene):
    """A scene whose frames say which frame they are (pixel 0,0 holds seq % 256), so a
    detector running late still sees the faces of the frame it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.history: dict[int, list[tuple[int, float, float, float]]] = {}

    def frame(self, seq: int):
        from engines.frame_views import FrameViews

        self.history[seq % 256] = list(self.faces)
        image = np.zeros((720, 1280, 3), np.uint8)
        image[0, 0, 0] = seq % 256
        return FrameViews(image)


class LateDetector(FakeDetector):
    """Takes `delay` seconds, and answers for the frame it was given."""

    def __init__(self, scene: FrameScene, delay: float, fail: bool = False) -> None:
        super().__init__(scene)
        self.delay, self.fail = delay, fail
        self.threads: set[str] = set()

    def forward(self, frame):
        import threading
        import time

        self.threads.add(threading.current_thread().name)
        time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("detector broke")
        self.calls += 1
        faces = self.scene.history[int(frame.bgr[0, 0, 0])]
        return [((cx - 0.6 * s, cy - 0.5 * s, cx + 0.6 * s, cy + 0.7 * s), 1.0) for _, cx, cy, s in faces]


@pytest.mark.slow
def test_background_detection_tracks_moving_faces_without_waiting_for_the_detector() -> None:
    import threading
    import time

    scene = FrameScene()
    det = LateDetector(scene, delay=0.03)
    tracker = Tracker(det, FakeLandmarker(scene), FakeEmbedder(scene), DetectConfig(every=5),
                      TrackConfig(), background=True)
    ids: list[int] | None = None
    seen = 0
    for seq in range(90):
        scene.faces = [(0, 200 + 3 * seq, 300, 100), (1, 900 - 2 * seq, 400, 110)]
        tracks = tracker.update(scene.frame(seq), seq, seq / 30)
        time.sleep(0.01)  # frames come at their pace; the detection runs meanwhile
        if len(tracks) == 2:
            seen += 1
            by_x = sorted(tracks, key=lambda t: t.landmarks[:, 0].mean())
            ids = ids or [t.id for t in by_x]
            assert [t.id for t in by_x] == ids  # the late boxes continue the same tracks
            for tr in tracks:
                c = tr.landmarks.mean(axis=0)
                truth = min(scene.faces, key=lambda f: abs(f[1] - c[0]))
                assert abs(c[0] - truth[1]) < 0.15 * truth[3]
    tracker.close()
    # The first detection (nothing to track yet) ran in line, the others in the background.
    assert det.threads == {threading.current_thread().name, "fs-detect"}
    assert seen == 90
    assert 4 <= det.calls <= 18  # on schedule, skipping due frames while one is running
    assert not any(t.name == "fs-detect" and t.is_alive() for t in threading.enumerate())


def _lagged_run(delay: float, lag: int) -> tuple[list, LateDetector]:
    """Each frame's tracks (id, landmarks) of a scene where faces move, one comes in at frame
    20 and one leaves at frame 45, tracked with detection `lag` frames behind."""
    scene = FrameScene()
    det = LateDetector(scene, delay=delay)
    tracker = Tracker(det, FakeLandmarker(scene), FakeEmbedder(scene), DetectConfig(every=6, every_empty=2),
                      TrackConfig(), background=True, lag=lag)
    out = []
    for seq in range(70):
        faces = [(0, 200 + 3 * seq, 300, 100)]
        if seq < 45:
            faces.append((1, 900 - 2 * seq, 400, 110))
        if seq >= 20:
            faces.append((2, 600, 150 + seq, 90))
        scene.faces = faces
        tracks = tracker.update(scene.frame(seq), seq, seq / 30)
        out.append(sorted((tr.id, tr.landmarks.round(3).tobytes()) for tr in tracks))
    tracker.close()
    return out, det


def test_a_files_detection_joins_a_fixed_number_of_frames_later_whatever_its_speed() -> None:
    """Files (detect.lag): the detection runs beside the tracking, and its boxes join the
    tracks exactly `lag` frames after the frame they were found in, so a slow detector (or
    a slow machine) gives the same tracks, frame for frame, as a quick one."""
    import threading

    quick, det_quick = _lagged_run(0.0, 4)
    slow, det_slow = _lagged_run(0.03, 4)  # longer than the 4 frames take here
    assert quick == slow
    assert det_slow.threads == {threading.current_thread().name, "fs-detect"}
    # Every face is found and followed: the one coming in within a detection's lag and cadence.
    ids = [{i for i, _ in frame} for frame in quick]
    assert all(len(f) == 2 for f in ids[5:20])
    assert all(len(f) == 3 for f in ids[20 + 6 + 4 + 1:45])
    assert all(len(f) == 2 for f in ids[50:])
    # Another lag is another output: the lag, not the machine, says when boxes join.
    assert _lagged_run(0.0, 1)[0] != quick


def test_a_background_detector_error_stops_the_tracker() -> None:
    import time

    scene = FrameScene()
    scene.faces = [(0, 300, 300, 100)]
    det = LateDetector(scene, 0.0)
    tracker = Tracker(det, FakeLandmarker(scene), FakeEmbedder(scene), DetectConfig(every=5), TrackConfig(),
                      background=True)
    tracker.update(scene.frame(0), 0, 0.0)  # in line: the face is found and followed
    det.fail = True  # the next detections run in the background, and fail there
    with pytest.raises(RuntimeError, match="detector broke"):
        for seq in range(1, 100):
            tracker.update(scene.frame(seq), seq, seq / 30)
            time.sleep(0.01)
    tracker.close()


class GatedDetector(FakeDetector):
    """Answers for the frame it was given, but a background detection only finishes when
    the test opens the gate: the detection lag in frames is the test's to choose (under
    load, an RTSP run saw detections land 10-25 frames after the frame they were made on)."""

    def __init__(self, scene: FrameScene) -> None:
        import threading

        super().__init__(scene)
        self.gate = threading.Semaphore(0)
        self.done = threading.Event()

    def forward(self, frame):
        import threading

        if threading.current_thread().name == "fs-detect":
            self.gate.acquire()
        self.calls += 1
        faces = self.scene.history[int(frame.bgr[0, 0, 0])]
        if threading.current_thread().name == "fs-detect":
            self.done.set()
        return [((cx - 0.6 * s, cy - 0.5 * s, cx + 0.6 * s, cy + 0.7 * s), 1.0) for _, cx, cy, s in faces]

    def open_gate(self) -> None:
        """Let every detection through from now on (before closing: no thread left waiting)."""
        for _ in range(100):
            self.gate.release()

    def finish(self) -> None:
        """Let the running background detection end, and wait until it has."""
        self.done.clear()
        self.gate.release()
        assert self.done.wait(5.0)
        import time

        time.sleep(0.02)  # the detection thread hands its result over


def _ghosts(tracks, scene: Scene) -> list:
    """Returned tracks that sit on no face of the frame (a swap pasted beside a head)."""
    out = []
    for tr in tracks:
        c = tr.landmarks.mean(axis=0)
        if not any(abs(c[0] - cx) < 0.5 * s and abs(c[1] - cy) < 0.5 * s for _, cx, cy, s in scene.faces):
            out.append(tr)
    return out


def test_a_late_detection_never_starts_a_ghost_where_a_lost_face_was() -> None:
    """The ghost face of an RTSP run under load: a background detection is sent, the face
    then jumps (a quick head move) and its track is lost; the detection lands frames
    later with the box of where the face *was*. Turned into a track, that box pasted a
    face on the empty wall beside the head until the next detections missed it."""
    scene = FrameScene()
    det = GatedDetector(scene)
    tracker = Tracker(det, FakeLandmarker(scene), FakeEmbedder(scene), DetectConfig(every=5),
                      TrackConfig(), background=True)
    x = 300.0
    ghosts = 0
    found_again_at = None
    for seq in range(60):
        if seq == 6:
            x += 160  # the head moves further than the landmarker can follow in one frame
        scene.faces = [(0, x, 300, 100)]
        tracks = tracker.update(scene.frame(seq), seq, seq / 30)
        ghosts += len(_ghosts(tracks, scene))
        if seq > 6 and tracks and found_again_at is None:
            found_again_at = seq
        if seq in (12, 30, 45) and tracker.background.pending:
            det.finish()  # the detection sent at frame 5 lands at frame 12
    det.open_gate()
    tracker.close()
    assert ghosts == 0, f"{ghosts} frame(s) swapped a face where there was none"
    assert found_again_at is not None and found_again_at <= 13  # found on the frame the late boxes land


def test_a_late_detection_of_a_new_moving_face_starts_its_track_where_it_is_now() -> None:
    """A second person walks in while the first is followed: their box in a late detection
    is where they were when it was sent; their track starts where they are."""
    scene = FrameScene()
    det = GatedDetector(scene)
    tracker = Tracker(det, FakeLandmarker(scene), FakeEmbedder(scene), DetectConfig(every=5),
                      TrackConfig(), background=True)
    ghosts = 0
    both_at = None
    for seq in range(40):
        walker = [(1, 600 + 30 * (seq - 3), 300, 100)] if seq >= 3 else []
        scene.faces = [(0, 200, 300, 100), *walker]
        tracks = tracker.update(scene.frame(seq), seq, seq / 30)
        ghosts += len(_ghosts(tracks, scene))
        if len(tracks) == 2 and both_at is None:
            both_at = seq
        if seq in (14, 25, 35) and tracker.background.pending:
            det.finish()
    det.open_gate()
    tracker.close()
    assert ghosts == 0, f"{ghosts} frame(s) swapped a face where there was none"
    assert both_at is not None and both_at <= 15


def test_with_no_face_followed_detection_runs_every_empty_frames() -> None:
    scene = Scene()
    det, lm, emb = FakeDetector(scene), FakeLandmarker(scene), FakeEmbedder(scene)
    tracker = Tracker(det, lm, emb, DetectConfig(every=12, every_empty=2), TrackConfig())
    for seq in range(20):  # an empty scene: a face coming in is looked for every other frame
        tracker.update(GRAY, seq, seq / 30)
    assert det.calls == 10
    scene.faces = [(0, 300, 300, 100)]
    for seq in range(20, 22):
        tracks = tracker.update(GRAY, seq, seq / 30)
    assert len(tracks) == 1
    calls = det.calls
    for seq in range(22, 46):  # a face followed: back on detect.every
        tracker.update(GRAY, seq, seq / 30)
    assert det.calls == calls + 2


class ConfirmingDetector(FakeDetector):
    """Misses the faces in `hidden` (occluded), but confirms any box holding a true face."""

    def __init__(self, scene: Scene) -> None:
        super().__init__(scene)
        self.hidden: set[int] = set()
        self.confirms = 0

    def forward(self, gray):
        return [d for d, f in zip(super().forward(gray), self.scene.faces) if f[0] not in self.hidden]

    def confirm(self, frame, box) -> bool:
        self.confirms += 1
        bx, by = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
        return any(abs(cx - bx) < 0.5 * s and abs(cy - by) < 0.5 * s for _, cx, cy, s in self.scene.faces)


@pytest.mark.parametrize("max_held", [0, 2])
def test_a_face_the_detector_misses_but_confirms_is_held_for_max_held_detections(max_held: int) -> None:
    scene = Scene()
    scene.faces = [(0, 300, 300, 100)]
    det, lm, emb = ConfirmingDetector(scene), FakeLandmarker(scene), FakeEmbedder(scene)
    tracker = Tracker(det, lm, emb, DetectConfig(every=5), TrackConfig(max_missed=0, max_held=max_held))
    assert len(tracker.update(GRAY, 0, 0.0)) == 1
    det.hidden = {0}  # occluded: HOG misses it from now on, the face is still there
    shown = [len(tracker.update(GRAY, seq, seq / 30)) for seq in range(1, 30)]
    # Detections at 5, 10, 15, ...: the first max_held misses are confirmed, the next ends it.
    held_until = 5 * (max_held + 1) - 1
    assert shown == [1] * held_until + [0] * (29 - held_until)
    assert det.confirms == max_held  # one face check per held detection, none past the cap


def test_a_held_face_that_is_gone_ends_at_the_next_detection() -> None:
    scene = Scene()
    scene.faces = [(0, 300, 300, 100)]
    det, lm, emb = ConfirmingDetector(scene), FakeLandmarker(scene), FakeEmbedder(scene)
    tracker = Tracker(det, lm, emb, DetectConfig(every=5), TrackConfig(max_missed=0, max_held=5))
    tracker.update(GRAY, 0, 0.0)
    frozen = scene.landmarks(0)
    tracker.landmarker.forward_many = lambda gray, boxes: [frozen] * len(boxes)  # type: ignore
    scene.faces = []  # a scene cut the landmarks do not notice; the detector's check does
    assert [len(tracker.update(GRAY, seq, seq / 30)) for seq in range(1, 8)] == [1, 1, 1, 1, 0, 0, 0]
    assert det.confirms == 1
