"""`--config reference` reproduces insightface's per-frame loop on the same models:

    for face in SCRFD.detect(frame):           # every frame, the detector's order
        frame = INSwapper.get(frame, face, source, paste_back=True)   # face.kps: SCRFD's own

with the source's embedding from `ArcFaceONNX.get` on SCRFD's largest face of the source
photo. Bit-exact on a still (serial and staged), and on every frame of a video before it is
encoded, on every CPU: the paste-back runs over the whole frame as insightface's does
(tests/test_cpu_dispatch.py runs this file under each OpenCV dispatch level this CPU can
select). The still has overlapping faces and faces less than half inside the frame (which
insightface swaps too). The models are the seeded stand-ins of tools/synth.
"""
from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from stream.config import load_config
from stream.job.runs import run_image, run_video
from stream.job.swap_job import SwapJob
from stream.media.demo_clips import astronaut
from stream.runtime.slot import Slot
from stream.sources.file import FileSource
from tests.fixtures import build_scrfd_model, make_arcface, make_clip, make_inswapper

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # insightface 2.1 on skimage 0.26

CPU = ["CPUExecutionProvider"]
W, H = 480, 360
PATCH = 48
# Patches of the astronaut's face on a two-tone ground: two overlapping, one apart, one cut by
# the bottom edge (the stand-in detector finds faces there less than half inside the frame).
PLACES = [(90, 90), (114, 106), (250, 200), (330, H - PATCH // 3)]


def still(shift: int = 0) -> np.ndarray:
    img = np.full((H, W, 3), 128, np.uint8)
    img[H - 60:] = 64
    face = cv2.GaussianBlur(cv2.resize(astronaut()[60:220, 150:330], (PATCH, PATCH)), (0, 0), 1.5)
    for x, y in PLACES:
        x = x + shift
        y1 = min(y + PATCH, H)
        img[y:y1, x:x + PATCH] = face[:y1 - y]
    return img


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("reference_models")
    build_scrfd_model(d / "det_10g.onnx", seed=2)
    make_arcface(d / "w600k_r50.onnx", seed=4)
    make_inswapper(d / "inswapper_128.onnx", seed=5, batch=None)  # batched: one call per frame
    cv2.imwrite(str(d / "source.png"), astronaut())
    return d


class Reference:
    """insightface's classes on the same files, run as its own example loop runs them."""

    def __init__(self, models: Path) -> None:
        from insightface.app.common import Face as IFace
        from insightface.model_zoo import get_model
        from insightface.model_zoo.scrfd import SCRFD

        self.IFace = IFace
        self.det = SCRFD(model_file=str(models / "det_10g.onnx"))
        self.det.prepare(ctx_id=-1, input_size=(640, 640), det_thresh=0.5)
        self.swapper = get_model(str(models / "inswapper_128.onnx"), providers=CPU)
        arcface = get_model(str(models / "w600k_r50.onnx"), providers=CPU)
        photo = cv2.imread(str(models / "source.png"))
        boxes, kpss = self.det.detect(photo, max_num=0)
        largest = int(np.argmax((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])))
        self.source = IFace(bbox=boxes[largest, :4], kps=kpss[largest], det_score=boxes[largest, 4])
        arcface.get(photo, self.source)

    def faces(self, frame: np.ndarray) -> list:
        boxes, kpss = self.det.detect(frame, max_num=0)
        return [self.IFace(bbox=b[:4], kps=k, det_score=b[4]) for b, k in zip(boxes, kpss)]

    def swap(self, frame: np.ndarray) -> np.ndarray:
        res = frame.copy()
        for face in self.faces(frame):
            res = self.swapper.get(res, face, self.source, paste_back=True)
        return res


@pytest.fixture(scope="module")
def reference(models: Path) -> Reference:
    return Reference(models)


def _job(models: Path, *overrides: str) -> SwapJob:
    job = SwapJob(load_config("reference", [f"models.dir={models}", *overrides]), [str(models / "source.png")])
    job.open()
    return job


def test_the_still_has_what_the_loop_must_handle(reference: Reference) -> None:
    faces = reference.faces(still())
    assert 3 <= len(faces) <= 32  # all of them fit the preset's max_faces

    def inside(b: np.ndarray) -> float:
        ix = max(0.0, min(b[2], W) - max(b[0], 0.0))
        iy = max(0.0, min(b[3], H) - max(b[1], 0.0))
        return ix * iy / ((b[2] - b[0]) * (b[3] - b[1]))

    assert min(inside(f.bbox) for f in faces) < 0.5  # a face less than half inside
    boxes = [f.bbox for f in faces]
    assert any(min(a[2], b[2]) > max(a[0], b[0]) and min(a[3], b[3]) > max(a[1], b[1])
               for i, a in enumerate(boxes) for b in boxes[i + 1:])  # faces that overlap


@pytest.mark.parametrize("staged", [False, True])
def test_still_is_bit_exact(models: Path, reference: Reference, tmp_path: Path, staged: bool) -> None:
    picture = still()
    cv2.imwrite(str(tmp_path / "in.png"), picture)
    job = _job(models)
    if staged:  # a one-frame video run goes through the staged pipeline; catch the frame before encoding
        frames: list[np.ndarray] = []
        make_clip(tmp_path / "in.mp4", [picture], n=1, fps=25, audio=False)
        picture = _decoded(tmp_path / "in.mp4")[0]
        run_video(job, str(tmp_path / "in.mp4"), str(tmp_path / "out.mp4"),
                  on_frame=lambda slot: frames.append(slot.image.copy()))
        got = frames[0]
    else:
        run_image(job, str(tmp_path / "in.png"), str(tmp_path / "out.png"))
        got = cv2.imread(str(tmp_path / "out.png"))
    want = reference.swap(picture)
    assert np.any(want != picture)
    np.testing.assert_array_equal(got, want)


def test_the_paste_does_not_rest_on_the_region_warp(models: Path, reference: Reference, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Exact by construction, not by this CPU's luck: the reference mode never calls the
    region warp (whose exactness depends on the CPU), so breaking it changes nothing."""
    import engines.models.inswapper

    def broken(*args: object, **kwargs: object) -> None:
        raise AssertionError("the reference mode used the region warp")

    monkeypatch.setattr(engines.models.inswapper, "warp_affine_region", broken)
    cv2.imwrite(str(tmp_path / "in.png"), still())
    run_image(_job(models), str(tmp_path / "in.png"), str(tmp_path / "out.png"))
    np.testing.assert_array_equal(cv2.imread(str(tmp_path / "out.png")), reference.swap(still()))


def _decoded(path: Path) -> list[np.ndarray]:
    """The frames as our file source decodes them (the pipeline's input)."""
    out = []
    with FileSource(path) as source:
        info = source.info
        assert info is not None
        slot = Slot(0, {"image": np.empty((info.height, info.width, 3), np.uint8)})
        while source.read_into(slot):
            out.append(slot.image.copy())
    return out


@pytest.mark.parametrize("staged", [True, False])
def test_video_is_exact_before_encoding(models: Path, reference: Reference, tmp_path: Path, staged: bool) -> None:
    clip = tmp_path / "in.mp4"
    make_clip(clip, [still(shift) for shift in (0, 6, 12, 18)], n=4, fps=25, audio=False)
    frames: list[np.ndarray] = []
    job = _job(models, f"pipeline.staged={str(staged).lower()}")
    run_video(job, str(clip), str(tmp_path / "out.mp4"), on_frame=lambda slot: frames.append(slot.image.copy()))
    inputs = _decoded(clip)
    assert len(frames) == len(inputs) == 4
    for i, (got, picture) in enumerate(zip(frames, inputs)):
        np.testing.assert_array_equal(got, reference.swap(picture), err_msg=f"frame {i}")


def test_live_runs_detect_in_line(models: Path) -> None:
    """A live run of the reference mode detects each frame in line: the detector's points
    belong to the frame they were found on (a background detection's arrive frames late)."""
    from stream.job.assembly import assemble
    from stream.runtime.allocator import default_allocator

    job = _job(models, "detect.background=true")  # even when asked to detect in the background
    pipeline = assemble(job.config, job.models, job.prepared, [], (H, W), None, None,  # type: ignore[arg-type]
                        live=True, allocator=default_allocator())
    assert pipeline.tracker.background is None
