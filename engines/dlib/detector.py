"""dlib's HOG frontal-face detector, run on the grey frame scaled to a working size."""
from __future__ import annotations

import threading
from collections.abc import Sequence

import cv2
import dlib
import numpy as np

from engines.dlib.models import own_hog_detector, shared_model
from engines.face import Box, iou
from engines.frame_views import FrameViews
from engines.protocols import beside_helper, detecting_in_background

WINDOW = 80  # px: the smallest face HOG's frontal filters find, at the scale they scan
# Refining a box: HOG's boxes come in steps of its pyramid (6/5 apart) and of its 8 px cells
# at the scale it scanned, so a 42 px face found in a 1.6x upscaled frame gets a 46 or a 55 px
# box, its centre up to 0.15 of its width off. The 68-point predictor, given that box, puts a
# turned face's points up to 0.17 of the distance between the eyes' centres from where it
# puts them on the face's own box. The face is scanned again in a crop around the box, the
# face scaled to REFINE_SIZE x each of REFINE_SCALES (between the pyramid's steps), and the
# boxes found are averaged (quality suite, points on the detector's box against the still's:
# small faces 0.054 -> 0.028, overlapping 0.028 -> 0.021 of the eye centres' distance; about
# 6 ms a face).
REFINE_SIZE = 90.0  # px: the face's width in the crop scanned
REFINE_SCALES = (1.0, 1.1, 1.2)
REFINE_PAD = 0.3  # the crop's margin around the box, as a fraction of its size
REFINE_MATCH = 0.3  # a box found counts when its centre is this close (x the box's width)


SETTLED_IOU = 0.5  # a box overlapping a settled box this much is that face's: not refined


def _overlaps(box: Box, others: Sequence[Box]) -> bool:
    return any(iou(box, o) >= SETTLED_IOU for o in others)


class DlibHogDetector:
    """Finds frontal faces of at least ~80 px in the frame as it scans it.

    The frame is scaled so its longer side is `max_side`: HOG cost grows with the pixel
    count, so larger frames are downscaled (faces much larger than the 80 px window need no
    full resolution), and smaller ones are upscaled, by at most `max_upscale`, so a small
    frame's small faces are found at about the cost of a larger frame (a 640x360 frame at
    `max_side` 1024 finds faces from 50 px, not 80). `upsample` passes find smaller faces
    still, at 4x the cost each. With `refine`, each box found is measured again in a crop
    around it (REFINE_SIZE): a box in the pyramid's and the cells' steps moves the 68-point
    predictor's points on turned and small faces.
    """

    name = "dlib-hog"

    def __init__(self, max_side: int = 1024, upsample: int = 0, threshold: float = 0.0,
                 max_upscale: float = 1.0, refine: bool = False, shared: bool = False) -> None:
        if max_upscale < 1.0:
            raise ValueError(f"max_upscale must be >= 1, got {max_upscale}")
        self.max_side = max_side
        self.upsample = upsample
        self.threshold = threshold
        self.max_upscale = max_upscale
        self.refine = refine
        self.shared = shared
        self.calls = 0
        self._detector: dlib.fhog_object_detector | None = None
        self._lock = threading.Lock()
        # A second copy of a stream's own detector: an in-line detection's crops (refinements,
        # the faces looked for near their boxes) are scanned half on it, on a thread of their
        # own (dlib lets the GIL go while it scans), half on the first (`_scan_crops`).
        self._second: dlib.fhog_object_detector | None = None
        self._second_lock = threading.Lock()
        self._scaled: np.ndarray | None = None  # reused working-size buffer

    def open(self) -> None:
        if self._detector is None:
            if self.shared:
                # One a process, shared by every shared HOG detector under its lock
                # (engines.dlib.models): the photos' detector, used when a job opens.
                self._detector, self._lock = shared_model("hog")
            else:
                # A stream's own: its detections (in line and in the background) never wait
                # for another's. One shared by the stream and the photos made a live run's
                # first second deliver 2-9 frames instead of 20-30 (tests/test_live*.py).
                # A copy of the shared one: building it takes 0.65 s, copying it 3 ms.
                self._detector = own_hog_detector()
                self._second = own_hog_detector()

    def scale_for(self, width: int, height: int) -> float:
        """The factor the frame is scaled by before HOG scans it."""
        return min(self.max_upscale, self.max_side / max(width, height))

    def min_face(self, width: int, height: int) -> float:
        """About the smallest face (px, in the frame) found in a frame of this size."""
        return WINDOW / (self.scale_for(width, height) * 2 ** self.upsample)

    @property
    def refines_boxes(self) -> bool:
        """Its boxes are refined (`forward` then takes `settled` boxes to leave as found)."""
        return self.refine

    def forward(self, frame: FrameViews, settled: Sequence[Box] = ()) -> list[tuple[Box, float]]:
        """Face boxes and HOG's scores. With `refine`, each box is measured again, except a
        box overlapping one of `settled` (SETTLED_IOU): the tracker's boxes of faces it
        follows cleanly, which this detection only confirms."""
        if self._detector is None:
            self.open()
        assert self._detector is not None
        gray = frame.gray
        h, w = gray.shape[:2]
        scale = self.scale_for(w, h)
        if abs(scale - 1.0) > 1e-3:
            size = (max(1, round(w * scale)), max(1, round(h * scale)))
            if self._scaled is None or self._scaled.shape[:2] != (size[1], size[0]):
                self._scaled = np.empty((size[1], size[0]), np.uint8)
            interpolation = cv2.INTER_AREA if scale < 1.0 else cv2.INTER_LINEAR
            image = cv2.resize(gray, size, dst=self._scaled, interpolation=interpolation)
            sx, sy = w / size[0], h / size[1]
        else:
            image, sx, sy = gray, 1.0, 1.0
        self.calls += 1
        with self._lock:
            rects, scores, _ = self._detector.run(image, self.upsample, self.threshold)
        boxes = [((r.left() * sx, r.top() * sy, (r.right() + 1) * sx, (r.bottom() + 1) * sy), float(s))
                 for r, s in zip(rects, scores)]
        if self.refine:
            todo = [k for k, (box, _) in enumerate(boxes) if not _overlaps(box, settled)]
            for k, box in zip(todo, self.refine_boxes(gray, [boxes[k][0] for k in todo])):
                boxes[k] = (box, boxes[k][1])
        return boxes

    def forward_near(self, frame: FrameViews, boxes: Sequence[Box],
                     settled: Sequence[Box] = ()) -> list[tuple[Box, float]]:
        """The faces found again near `boxes` (the tracker's faces), without scanning the
        rest of the frame: HOG run on a crop around each box only (a few ms a face against
        the frame's 40-50 ms), for a detection that only confirms the faces followed
        (detect.scan_every). A box overlapping one of `settled` is looked for at one scale
        (its box is not taken), the others at every REFINE_SCALES, their boxes refined as
        `forward` refines them. A face not found near its box is left out (missed)."""
        if self._detector is None:
            self.open()
        gray = frame.gray
        self.calls += 1
        jobs = [(box, REFINE_SCALES[:1] if _overlaps(box, settled) else REFINE_SCALES) for box in boxes]
        out = []
        for (box, scales), (found, score) in zip(jobs, self._scan_crops(gray, jobs)):
            if found:
                out.append((box if len(scales) == 1 else _mean_box(found), score))
        return out

    def refine_box(self, gray: np.ndarray, box: Box) -> Box:
        """`box` measured again: HOG run on a crop around it with the face scaled to
        REFINE_SIZE x each of REFINE_SCALES, the boxes found near it averaged (in frame
        pixels). The box itself when none is found there."""
        return self.refine_boxes(gray, [box])[0]

    def refine_boxes(self, gray: np.ndarray, boxes: Sequence[Box]) -> list[Box]:
        """`refine_box` for each of `boxes`, half of them on a helper thread (`_scan_crops`)."""
        if self._detector is None:
            self.open()
        scans = self._scan_crops(gray, [(box, REFINE_SCALES) for box in boxes])
        return [_mean_box(found) if found else box for box, (found, _) in zip(boxes, scans)]

    def _scan_crops(self, gray: np.ndarray, jobs: Sequence[tuple[Box, Sequence[float]]]
                    ) -> list[tuple[list[Box], float]]:
        """`_scan_near` for each (box, scales) of `jobs`, in order. In line (not on a
        background detection's thread, engines.protocols.detecting_in_background), with a
        second detector, every other job runs on it on a helper thread while this one runs
        the rest: a new scene's six boxes refined in about half the time while the stages
        wait (each box's result is the same on either copy, whichever runs it). In the
        background the stages keep both cores busy, and a helper would only compete."""
        if len(jobs) < 2 or self._second is None or detecting_in_background():
            return [self._scan_near(gray, box, scales) for box, scales in jobs]
        own, helped = beside_helper(
            lambda: [self._scan_near(gray, *job) for job in jobs[0::2]],
            lambda: [self._scan_near(gray, *job, second=True) for job in jobs[1::2]], "fs-refine")
        return [own[k // 2] if k % 2 == 0 else helped[k // 2] for k in range(len(jobs))]

    def _scan_near(self, gray: np.ndarray, box: Box, scales: Sequence[float],
                   second: bool = False) -> tuple[list[Box], float]:
        """HOG on a crop around `box` with the face scaled to REFINE_SIZE x each of `scales`:
        the box found nearest its centre at each scale (frame pixels), and the best score
        among them (-inf: none found). `second`: on the second detector."""
        detector, lock = (self._second, self._second_lock) if second else (self._detector, self._lock)
        assert detector is not None
        x0, y0, x1, y1 = box
        w, h = x1 - x0, y1 - y0
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
        if w <= 0 or h <= 0:
            return [], -np.inf
        fh, fw = gray.shape[:2]
        # The crop: the box and its margin in whole pixels, replicated past the frame's edge.
        ix0, iy0 = int(np.floor(x0 - REFINE_PAD * w)), int(np.floor(y0 - REFINE_PAD * h))
        ix1, iy1 = int(np.ceil(x1 + REFINE_PAD * w)), int(np.ceil(y1 + REFINE_PAD * h))
        inner = gray[max(iy0, 0):min(iy1, fh), max(ix0, 0):min(ix1, fw)]
        if inner.size == 0:
            return [], -np.inf
        crop = cv2.copyMakeBorder(inner, max(-iy0, 0), max(iy1 - fh, 0), max(-ix0, 0), max(ix1 - fw, 0),
                                  cv2.BORDER_REPLICATE)
        found: list[Box] = []
        top = -np.inf
        for scale in scales:
            f = REFINE_SIZE * scale / w
            size = (max(round((ix1 - ix0) * f), 1), max(round((iy1 - iy0) * f), 1))
            fx, fy = size[0] / (ix1 - ix0), size[1] / (iy1 - iy0)
            scaled = cv2.resize(crop, size, interpolation=cv2.INTER_AREA if f < 1 else cv2.INTER_LINEAR)
            best = None
            with lock:
                rects, scores, _ = detector.run(scaled, 0, 0.0)
            for r, score in zip(rects, scores):
                # Pixel edges map back exactly: crop edge u -> frame edge u / fx + ix0.
                b = (r.left() / fx + ix0, r.top() / fy + iy0, (r.right() + 1) / fx + ix0, (r.bottom() + 1) / fy + iy0)
                off = float(np.hypot((b[0] + b[2]) / 2 - cx, (b[1] + b[3]) / 2 - cy))
                if off < REFINE_MATCH * w and (best is None or off < best[0]):
                    best = (off, b, float(score))
            if best is not None:
                found.append(best[1])
                top = max(top, best[2])
        return found, top


def _mean_box(boxes: Sequence[Box]) -> Box:
    x0, y0, x1, y1 = np.mean(np.array(boxes, np.float64), axis=0).tolist()
    return (x0, y0, x1, y1)
