"""HOG's boxes measured again in a crop (detect.refine): closer to the face's own box, and the
68 points on them closer to the points on that box."""
from __future__ import annotations

import numpy as np
import pytest

from engines.dlib.detector import DlibHogDetector
from engines.dlib.landmarker import DlibLandmarker
from engines.face import Box
from engines.frame_views import FrameViews
from stream.config import Config
from tools.quality.clips import overlap_scene, small_scene


def _centre(box: Box) -> np.ndarray:
    return np.array([(box[0] + box[2]) / 2, (box[1] + box[3]) / 2])


def _errors(scene, refine: bool) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
    """Mean size error (log ratio), centre error (x the truth's width) and the 68 points'
    distance from those on the truth's box (x the distance between the eyes' centres), over
    the scene's faces in a few frames. The truth's boxes are HOG's on the still pictures, moved with them."""
    cfg = Config().detect
    detector = DlibHogDetector(cfg.max_side, cfg.upsample, max_upscale=cfg.max_upscale, refine=refine)
    landmarker = DlibLandmarker()
    size, centre, points = [], [], []
    for i in range(0, scene.n_frames, 5):
        frame, truth = scene.frame(i)
        views = FrameViews(frame)
        boxes = [b for b, _ in detector.forward(views)]
        for face in truth.faces:
            width = face[2] - face[0]
            near = min(boxes, key=lambda b: float(np.linalg.norm(_centre(b) - _centre(face))))
            if np.linalg.norm(_centre(near) - _centre(face)) > 0.5 * width:
                continue
            size.append(abs(np.log((near[2] - near[0]) / width)))
            centre.append(float(np.linalg.norm(_centre(near) - _centre(face))) / width)
            own = landmarker.forward(views, face)
            iod = np.linalg.norm(own[36:42].mean(axis=0) - own[42:48].mean(axis=0))
            points.append(float(np.linalg.norm(landmarker.forward(views, near) - own, axis=1).mean() / iod))
    assert len(points) >= 20
    return float(np.mean(size)), float(np.mean(centre)), float(np.mean(points))


@pytest.mark.slow
@pytest.mark.parametrize("make", [small_scene, overlap_scene], ids=["small-42px", "overlap-100px"])
def test_refined_boxes_put_the_points_where_the_faces_own_box_does(make) -> None:  # type: ignore[no-untyped-def]
    scene = make()
    raw, refined = _errors(scene, False), _errors(scene, True)
    assert refined[0] < raw[0], f"size error {raw[0]:.3f} -> {refined[0]:.3f}"
    assert refined[2] < 0.85 * raw[2], f"points {raw[2]:.3f} -> {refined[2]:.3f}"


def test_refine_keeps_a_box_with_no_face_in_its_crop() -> None:
    detector = DlibHogDetector(refine=True)
    detector.open()
    flat = np.full((200, 300), 128, np.uint8)
    box = (100.0, 50.0, 160.0, 110.0)
    assert detector.refine_box(flat, box) == box
    # A box reaching past the frame's edge is measured on replicated pixels, not refused.
    edge = (-20.0, -10.0, 40.0, 50.0)
    assert detector.refine_box(flat, edge) == edge


def test_refine_is_on_by_default_and_can_be_turned_off() -> None:
    assert Config().detect.refine is True
    from stream.config import ConfigError, DetectConfig

    with pytest.raises(ConfigError, match="detect.refine must be true or false"):
        DetectConfig(refine="yes")  # type: ignore[arg-type]


def test_looking_near_a_box_finds_the_face_there_and_nothing_where_none_is() -> None:
    # detect.scan_every: a detection that only looks near the followed faces' boxes.
    from stream.media.demo_clips import group_picture

    picture = group_picture()
    views = FrameViews(picture)
    detector = DlibHogDetector(refine=True)
    boxes = [b for b, _ in detector.forward(views)]
    assert len(boxes) >= 2
    face = boxes[0]
    w = face[2] - face[0]
    moved = (face[0] + 0.1 * w, face[1], face[2] + 0.1 * w, face[3])  # where the flow left it
    found = detector.forward_near(views, [moved])  # not settled: found and refined
    assert len(found) == 1 and np.linalg.norm(_centre(found[0][0]) - _centre(face)) < 0.1 * w
    kept = detector.forward_near(views, [moved], settled=[moved])  # settled: confirmed, box kept
    assert [b for b, _ in kept] == [moved]
    flat = FrameViews(np.full_like(picture, 128))
    assert detector.forward_near(flat, [moved], settled=[moved]) == []
    assert detector.forward_near(flat, [moved]) == []


def _six_faces() -> tuple[np.ndarray, list[Box]]:
    """The demo picture's grey and HOG's six boxes on it, unrefined."""
    from stream.media.demo_clips import group_picture

    views = FrameViews(group_picture())
    boxes = [b for b, _ in DlibHogDetector(refine=False).forward(views)]
    assert len(boxes) == 6
    return views.gray, boxes


def test_a_detections_boxes_refined_on_two_threads_as_on_one() -> None:
    # Half of a detection's boxes are refined on a second copy of the detector on a helper
    # thread: each box comes out exactly as one detector, one box after another, makes it.
    gray, boxes = _six_faces()
    two = DlibHogDetector(refine=True)
    two.open()
    one = DlibHogDetector(refine=True)
    one.open()
    one._second = None  # one detector, in this thread only
    threads: list[str] = []
    real = DlibHogDetector._scan_near

    def recording(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        import threading

        threads.append(threading.current_thread().name)
        return real(self, *args, **kwargs)

    DlibHogDetector._scan_near = recording  # type: ignore[method-assign]
    try:
        assert two.refine_boxes(gray, boxes) == [one.refine_box(gray, box) for box in boxes]
        assert threads.count("fs-refine") == 3  # the helper took every other box
        near_two = two.forward_near(FrameViews(np.dstack([gray] * 3)), boxes, settled=boxes[:2])
        near_one = one.forward_near(FrameViews(np.dstack([gray] * 3)), boxes, settled=boxes[:2])
    finally:
        DlibHogDetector._scan_near = real  # type: ignore[method-assign]
    assert near_two == near_one and len(near_two) == 6


def test_a_failure_on_the_helper_thread_is_raised_to_the_caller() -> None:
    gray, boxes = _six_faces()
    detector = DlibHogDetector(refine=True)
    detector.open()

    class Broken:
        def run(self, *args):  # type: ignore[no-untyped-def]
            raise RuntimeError("scanner failed")

    detector._second = Broken()
    with pytest.raises(RuntimeError, match="scanner failed"):
        detector.refine_boxes(gray, boxes)
    # One box needs no helper: it is refined in the caller's thread alone.
    assert detector.refine_boxes(gray, boxes[:1]) != boxes[:1]


def test_a_background_detections_boxes_are_refined_in_its_own_thread_only() -> None:
    # Beside the stages (the background detector's thread) a helper thread would compete
    # for the cores they keep busy: there every box is refined in the calling thread.
    import threading

    from engines.protocols import detect_in_background

    gray, boxes = _six_faces()
    detector = DlibHogDetector(refine=True)
    detector.open()
    seen: list[str] = []
    real = DlibHogDetector._scan_near

    def recording(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(threading.current_thread().name)
        return real(self, *args, **kwargs)

    def background() -> None:
        detect_in_background()
        out.extend(detector.refine_boxes(gray, boxes))

    out: list[Box] = []
    DlibHogDetector._scan_near = recording  # type: ignore[method-assign]
    try:
        thread = threading.Thread(target=background, name="fs-detect")
        thread.start()
        thread.join()
        in_line = detector.refine_boxes(gray, boxes)
    finally:
        DlibHogDetector._scan_near = real  # type: ignore[method-assign]
    assert seen[:6] == ["fs-detect"] * 6 and out == in_line
    assert "fs-refine" in seen[6:]  # in line, the helper took its share
