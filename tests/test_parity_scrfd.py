"""ScrfdDetector against insightface's own SCRFD class, on the same synthetic model file.

Both run the seeded stand-in from `tests/synth_scrfd.py` (SCRFD's real I/O), on
pictures that ship with installed packages, at several input sizes through the
model's dynamic axes; boxes and keypoints must agree to 0.01 px, count and order.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from engines.backends.base import RuntimeOptions
from engines.backends.ort import OrtRuntime
from engines.errors import EngineError, ModelNotFound
from engines.models.scrfd import ScrfdDetector
from stream.media.demo_clips import astronaut, group_picture
from tests.fixtures import build_scrfd_model

insightface_scrfd = pytest.importorskip("insightface.model_zoo.scrfd")

log = logging.getLogger(__name__)

TOLERANCE_PX = 0.01
CPU = RuntimeOptions(providers="cpu")


def tall_crop() -> np.ndarray:
    """A non-square (portrait) window of t1.jpg: the height binds the resize."""
    return group_picture()[100:800, 300:600].copy()


def wide_strip() -> np.ndarray:
    """A wide window of the astronaut: the width binds and the height is truncated."""
    return astronaut()[40:250, :].copy()


def small_picture() -> np.ndarray:
    """A small picture, upscaled into the input."""
    return cv2.resize(astronaut(), (100, 90), interpolation=cv2.INTER_AREA)


IMAGES: dict[str, Callable[[], np.ndarray]] = {
    "astronaut": astronaut,
    "t1": group_picture,
    "tall": tall_crop,
    "wide": wide_strip,
    "small": small_picture,
}
SIZES = [(640, 640), (320, 320), (640, 480)]


@pytest.fixture(scope="module", params=[False, True], ids=["unbatched", "batched"])
def model_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    batched = bool(request.param)
    path = tmp_path_factory.mktemp("scrfd") / f"scrfd_{'batched' if batched else 'plain'}.onnx"
    return build_scrfd_model(path, seed=0, batched=batched)


def reference(path: Path, size: tuple[int, int], threshold: float = 0.5):  # type: ignore[no-untyped-def]
    """insightface's SCRFD on `path`, CPU only, at one input size."""
    det = insightface_scrfd.SCRFD(model_file=str(path))
    det.prepare(ctx_id=-1, input_size=size, det_thresh=threshold)
    return det


def assert_same(ours: tuple[np.ndarray, np.ndarray], theirs: tuple[np.ndarray, np.ndarray], label: str) -> None:
    dets, kps = ours
    ref_dets, ref_kps = theirs
    assert dets.shape == ref_dets.shape, f"{label}: {dets.shape[0]} detections, insightface {ref_dets.shape[0]}"
    assert kps.shape == ref_kps.shape
    if dets.shape[0]:
        box_err = float(np.abs(dets[:, :4] - ref_dets[:, :4]).max())
        kps_err = float(np.abs(kps - ref_kps).max())
        score_err = float(np.abs(dets[:, 4] - ref_dets[:, 4]).max())
        log.info("%s: %d faces, max |box| %.3g px, |kps| %.3g px, |score| %.3g",
                 label, dets.shape[0], box_err, kps_err, score_err)
        assert box_err <= TOLERANCE_PX, f"{label}: boxes differ by {box_err} px"
        assert kps_err <= TOLERANCE_PX, f"{label}: keypoints differ by {kps_err} px"
        assert score_err <= 1e-6, f"{label}: scores differ by {score_err}"


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_parity_with_insightface(model_path: Path, size: tuple[int, int]) -> None:
    ours = ScrfdDetector(OrtRuntime(model_path, CPU), input_size=size)
    ours.open()
    theirs = reference(model_path, size)
    for name, make in IMAGES.items():
        image = make()
        assert_same(ours.forward(image), theirs.detect(image), f"{model_path.name} {size} {name}")
    assert ours.calls == len(IMAGES)


def test_blob_matches_insightface(model_path: Path) -> None:
    """The network input itself is bit-identical to insightface's (resize, pad, RGB, scale)."""
    size = (640, 480)
    ours = ScrfdDetector(OrtRuntime(model_path, CPU), input_size=size)
    theirs = reference(model_path, size)
    seen: list[np.ndarray] = []
    original = theirs.forward

    def spy(img: np.ndarray, threshold: float):  # type: ignore[no-untyped-def]
        seen.append(theirs._prepare_input_blob(img, tuple(img.shape[0:2][::-1])))
        return original(img, threshold)

    theirs.forward = spy
    for name, make in IMAGES.items():
        image = make()
        theirs.detect(image)
        blob, _ = ours.prepare_input(image)
        assert blob.shape == seen[-1].shape and blob.dtype == seen[-1].dtype
        assert np.array_equal(blob, seen[-1]), f"{name}: input blobs differ"


def test_synthetic_model_exercises_nms(model_path: Path) -> None:
    """The stand-in must make the comparison meaningful: detections, and overlaps to suppress."""
    det = ScrfdDetector(OrtRuntime(model_path, CPU))
    det.open()
    for make in (astronaut, group_picture):
        image = make()
        blob, scale = det.prepare_input(image)
        raw = det.runtime.run({"input.1": blob})
        candidates, _ = det.decode_outputs([raw[o.name] for o in det.runtime.outputs], scale)
        dets, kps = det.forward(image)
        assert 0 < dets.shape[0] < candidates.shape[0]
        assert np.all(np.diff(dets[:, 4]) <= 0), "detections sorted by descending score"
        assert dets[:, 0].min() > -image.shape[1] and dets[:, 2].max() < 2 * image.shape[1]


def test_max_num_matches_insightface(model_path: Path) -> None:
    ours = ScrfdDetector(OrtRuntime(model_path, CPU))
    theirs = reference(model_path, (640, 640))
    image = group_picture()
    for metric in ("default", "max"):
        assert_same(ours.forward(image, max_num=3, metric=metric), theirs.detect(image, max_num=3, metric=metric),
                    f"max_num=3 {metric}")


def test_black_image_has_no_detections(model_path: Path) -> None:
    det = ScrfdDetector(OrtRuntime(model_path, CPU))
    black = np.zeros((480, 640, 3), np.uint8)
    dets, kps = det.forward(black)
    assert dets.shape == (0, 5) and kps.shape == (0, 5, 2)
    assert_same((dets, kps), reference(model_path, (640, 640)).detect(black), "black")


def test_raised_threshold_has_no_detections(model_path: Path) -> None:
    image = astronaut()
    det = ScrfdDetector(OrtRuntime(model_path, CPU), score_threshold=0.9999)
    dets, kps = det.forward(image)
    assert dets.shape == (0, 5) and kps.shape == (0, 5, 2)
    assert_same((dets, kps), reference(model_path, (640, 640), threshold=0.9999).detect(image), "threshold")


def test_not_onnx_is_engine_error(tmp_path: Path) -> None:
    path = tmp_path / "det_10g.onnx"
    path.write_bytes(b"this is not an ONNX model\n")
    with pytest.raises(EngineError, match="det_10g.onnx"):
        ScrfdDetector(OrtRuntime(path, CPU)).open()


def test_missing_file_is_model_not_found(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match="nowhere.onnx"):
        ScrfdDetector(OrtRuntime(tmp_path / "nowhere.onnx", CPU)).open()


def _reordered_outputs(path: Path) -> Path:
    """The stand-in with its outputs grouped per stride (score, box, kps), not per kind."""
    model = onnx.load(str(path))
    outs = list(model.graph.output)
    regrouped = [outs[k + 3 * j] for k in range(3) for j in range(3)]
    del model.graph.output[:]
    model.graph.output.extend(regrouped)
    onnx.save(model, str(path))
    return path


def _two_inputs(path: Path) -> Path:
    model = onnx.load(str(path))
    model.graph.input.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, [1]))
    onnx.save(model, str(path))
    return path


BAD_MODELS: list[tuple[str, Callable[[Path], Path], str]] = [
    ("six_outputs", lambda p: build_scrfd_model(p, with_kps=False), r"expected 9 outputs.*found 6"),
    ("reordered_outputs", lambda p: _reordered_outputs(build_scrfd_model(p)), r"expected output widths"),
    ("wrong_input_name", lambda p: build_scrfd_model(p, input_name="images"), r"input named.*found 'images'"),
    ("two_inputs", lambda p: _two_inputs(build_scrfd_model(p)), r"expected 1 input, found 2"),
    ("fixed_other_size", lambda p: build_scrfd_model(p, input_hw=(320, 320)), r"fixed at 320x320.*expected"),
]


@pytest.mark.parametrize(("make", "message"), [(m, e) for _, m, e in BAD_MODELS], ids=[n for n, _, _ in BAD_MODELS])
def test_wrong_io_is_engine_error(tmp_path: Path, make: Callable[[Path], Path], message: str) -> None:
    path = make(tmp_path / "bad_scrfd.onnx")
    with pytest.raises(EngineError, match=message) as info:
        ScrfdDetector(OrtRuntime(path, CPU)).open()
    text = str(info.value)
    assert "bad_scrfd.onnx" in text and "\n" not in text


def test_fixed_input_of_the_right_size_is_accepted(tmp_path: Path) -> None:
    path = build_scrfd_model(tmp_path / "fixed.onnx", input_hw=(320, 320))
    ours = ScrfdDetector(OrtRuntime(path, CPU), input_size=(320, 320))
    image = astronaut()
    assert_same(ours.forward(image), reference(path, (320, 320)).detect(image), "fixed 320")


def test_input_name_input_is_accepted(tmp_path: Path) -> None:
    path = build_scrfd_model(tmp_path / "named_input.onnx", input_name="input")
    ours = ScrfdDetector(OrtRuntime(path, CPU))
    image = group_picture()
    assert_same(ours.forward(image), reference(path, (640, 640)).detect(image), "input name 'input'")


@pytest.mark.parametrize("size", [(630, 640), (0, 640), (-32, 32)])
def test_input_size_must_be_multiple_of_32(size: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="multiples of 32"):
        ScrfdDetector(OrtRuntime("unused.onnx"), input_size=size)


def test_anchor_centres_are_cached_and_laid_out_like_the_export(model_path: Path) -> None:
    det = ScrfdDetector(OrtRuntime(model_path, CPU))
    det.open()
    centres = det.anchor_centres(80, 80, 8)
    assert centres is det.anchor_centres(80, 80, 8)
    assert centres.shape == (12800, 2)
    # rows (y, x, anchor): both anchors of a location share its centre; x runs fastest.
    assert np.array_equal(centres[:4], [[0, 0], [0, 0], [8, 0], [8, 0]])
    assert np.array_equal(centres[160], [0, 8])
