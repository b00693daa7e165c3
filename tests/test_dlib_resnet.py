"""dlib's face-embedding ResNet read from its own file and run by numpy
(engines.dlib.resnet): the same embedding as dlib's, and a clear error for a file it is not."""
from __future__ import annotations

import threading

import cv2
import dlib
import numpy as np
import pytest

from engines.dlib.embedder import DlibEmbedder
from engines.dlib.landmarker import DlibLandmarker
from engines.dlib.models import model_path, shared_model
from engines.dlib.resnet import BATCH, DlibFileError, read_network
from engines.frame_views import FrameViews
from engines.protocols import detect_in_background
from stream.media.demo_clips import astronaut, group_picture

# Float sums in another order (dlib's loops against numpy's BLAS, whose kernels pick their
# code by the CPU's instruction set): the two differ by about 3e-7 on AVX2; dlib's identity
# threshold is 0.6, the face filter's margin a few tenths of a spread.
TOLERANCE = 1e-4


def _faces() -> list[tuple[np.ndarray, np.ndarray]]:
    """(picture, 68 points) of each face HOG finds in the installed pictures."""
    hog, _ = shared_model("hog")
    lm = DlibLandmarker()
    out = []
    for bgr in (astronaut(), group_picture()):
        rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        for r in hog(rgb, 1):
            box = (r.left(), r.top(), r.right() + 1, r.bottom() + 1)
            out.append((bgr, lm.forward(FrameViews(bgr), box)))
    return out


@pytest.fixture(scope="module")
def faces() -> list[tuple[np.ndarray, np.ndarray]]:
    found = _faces()
    assert len(found) == 8  # the astronaut, the mission patch HOG takes for one, t1.jpg's six
    return found


def test_the_embedding_is_dlibs_own(faces) -> None:
    """Each face's embedding is what dlib's own network gives for the same chip, and the
    chip is what dlib's `compute_face_descriptor` aligns from the points."""
    reference = dlib.face_recognition_model_v1(model_path("embedding"))
    emb = DlibEmbedder()
    got = []
    for bgr, points in faces:
        chip = emb.chip(bgr, points)
        want = np.array(reference.compute_face_descriptor(chip), np.float32)
        mine = emb.forward(bgr, points)
        assert mine.shape == (128,) and mine.dtype == np.float32
        assert np.abs(mine - want).max() < TOLERANCE
        got.append(mine)
    # Its answer, the dlib way round (the picture and the points): the chip it cut is dlib's.
    bgr, points = faces[0]
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    shape = dlib.full_object_detection(
        dlib.rectangle(*np.floor(points.min(0)).astype(int), *np.ceil(points.max(0)).astype(int)),
        [dlib.point(int(round(x)), int(round(y))) for x, y in points])
    assert np.abs(np.array(reference.compute_face_descriptor(rgb, shape)) - got[0]).max() < TOLERANCE
    # Seven people and a patch: no two of them the same person by dlib's threshold.
    dists = [np.linalg.norm(a - b) for i, a in enumerate(got) for b in got[i + 1:]]
    assert min(dists) > emb.threshold


def test_a_batch_of_chips_gives_each_chips_embedding(faces) -> None:
    """embed_many over every face (two batches of BATCH and the rest) against embed one by one."""
    emb = DlibEmbedder()
    emb.open()
    chips = np.stack([emb.chip(bgr, points) for bgr, points in faces])
    model = emb._model
    assert model is not None
    many = model.embed_many(chips)
    assert many.shape == (len(faces), 128) and many.dtype == np.float32
    one = np.stack([model.embed(chip) for chip in chips])
    assert np.abs(many - one).max() < TOLERANCE
    assert np.array_equal(model.embed_many(chips[:1])[0], one[0])  # a batch of one is `embed`
    assert model.embed_many(chips[:0]).shape == (0, 128)
    with pytest.raises(ValueError, match="face chips are"):
        model.embed_many(chips[0])
    bgr = faces[0][0]
    assert np.abs(emb.forward_many(bgr, [faces[0][1]])[0] - one[0]).max() == 0


def test_in_line_the_second_half_of_the_chips_runs_on_a_helper_thread(faces, monkeypatch) -> None:
    """In line (the stages wait for the detection) half the chips run on a helper thread; on
    a background detection's thread all of them run there, BATCH at a time. The same rows."""
    emb = DlibEmbedder()
    emb.open()
    model = emb._model
    assert model is not None
    chips = np.stack([emb.chip(bgr, points) for bgr, points in faces[:6]])
    ran: list[tuple[str, int]] = []
    run = model._run

    def spy(batch: np.ndarray) -> np.ndarray:
        ran.append((threading.current_thread().name, len(batch)))
        return run(batch)

    monkeypatch.setattr(model, "_run", spy)
    in_line = model.embed_many(chips)
    assert sorted(ran) == sorted([(threading.current_thread().name, 3), ("fs-embed", 3)])
    ran.clear()
    got: dict[str, np.ndarray] = {}

    def background() -> None:
        detect_in_background()
        got["rows"] = model.embed_many(chips)

    thread = threading.Thread(target=background, name="fs-detect")
    thread.start()
    thread.join()
    assert ran == [("fs-detect", BATCH), ("fs-detect", len(chips) - BATCH)]
    assert np.abs(got["rows"] - in_line).max() < TOLERANCE
    ran.clear()
    model.embed_many(chips[:1])  # one chip: no helper
    assert ran == [(threading.current_thread().name, 1)]


def test_runs_from_several_threads_at_once_each_get_their_own(faces) -> None:
    emb = DlibEmbedder()
    alone = [emb.forward(bgr, points) for bgr, points in faces]
    got: dict[int, list[np.ndarray]] = {}

    def work(k: int) -> None:
        got[k] = [emb.forward(bgr, points) for bgr, points in faces[k:] + faces[:k]]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(3):
        for mine, want in zip(got[k], alone[k:] + alone[:k]):
            assert np.array_equal(mine, want)


def test_a_file_that_is_not_the_network_is_refused_with_its_name(tmp_path) -> None:
    with open(model_path("embedding"), "rb") as f:
        data = f.read()
    read_network(data, "the real one")  # reads to its last byte
    with pytest.raises(DlibFileError, match="cut.dat: file ends inside a tensor"):
        read_network(data[: len(data) // 2], "cut.dat")
    with pytest.raises(DlibFileError, match="extra.dat: 3 bytes left after the network"):
        read_network(data + b"abc", "extra.dat")
    other = open(model_path("landmarks"), "rb").read(1 << 16)
    with pytest.raises(DlibFileError, match="shape.dat: "):
        read_network(other, "shape.dat")
    # A convolution of another size than the architecture's is named as such.
    at = data.index(b"con_4")
    wrong = bytearray(data)
    with pytest.raises(DlibFileError, match="a convolution"):
        read_network(bytes(_with_filters(wrong, at, 16)), "wrong.dat")


def _with_filters(data: bytearray, at: int, n: int) -> bytearray:
    """`data` with the convolution whose version string is at `at` given `n` filters."""
    from engines.dlib.resnet import _Reader

    r = _Reader(bytes(data), "x")
    r.pos = at - 2  # the string's length: a control byte and one byte
    r.string()
    r.tensor()
    assert data[r.pos:r.pos + 2] == bytes([1, 32])  # num_filters, as one byte
    data[r.pos + 1] = n
    return data


def test_the_network_is_warmed_once_and_a_live_run_warms_the_face_filter(monkeypatch) -> None:
    # A process's first batch of new faces ran 1.7x slower than the next (memory mapped
    # afresh): a live run has the face filter run one blank batch when it starts, once a
    # process; a file's run does not (its first detection costs no frames).
    from engines.dlib.detector import DlibHogDetector
    from engines.dlib.face_filter import FaceFilter
    from engines.dlib.resnet import BATCH, CHIP, DlibResNet
    from engines.protocols import WarmDetector
    from engines.registry import EngineSet
    from stream.config import Config
    from stream.job.assembly import assemble
    from stream.runtime.allocator import NumpyAllocator

    net = DlibResNet(model_path("embedding"))
    runs: list[tuple[int, ...]] = []
    real = DlibResNet._run

    def counting(self, chips):  # type: ignore[no-untyped-def]
        runs.append(chips.shape)
        return real(self, chips)

    monkeypatch.setattr(DlibResNet, "_run", counting)
    net.warm()
    net.warm()
    assert runs == [(BATCH, CHIP, CHIP, 3)]

    shared, _ = shared_model("embedding")
    monkeypatch.setattr(shared, "_warmed", False)
    detector = FaceFilter(DlibHogDetector())
    assert isinstance(detector, WarmDetector)
    detector.open()
    runs.clear()
    engines = EngineSet("dlib", detector, DlibLandmarker(), DlibEmbedder(), _NoSwapper(),  # type: ignore[arg-type]
                        detector)
    def run(live: bool) -> None:
        assemble(Config(), engines, [], [], (72, 128), None, None, live=live,  # type: ignore[arg-type]
                 allocator=NumpyAllocator())

    run(live=False)
    assert runs == []
    run(live=True)
    run(live=True)
    assert runs == [(BATCH, CHIP, CHIP, 3)]


class _NoSwapper:
    """Enough of a swapper for `assemble` to lay out its rings."""

    def batch_spec(self, max_faces: int):  # type: ignore[no-untyped-def]
        from engines.protocols import BatchSpec

        return BatchSpec()
