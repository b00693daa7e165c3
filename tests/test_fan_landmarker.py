"""2dfan4 landmarker on a synthetic model with the real I/O: crop geometry and decoding."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from engines.backends.ort import OrtRuntime
from engines.errors import EngineError
from engines.models.fan import FanLandmarker
from tests.fixtures import make_fan


@pytest.mark.parametrize("box", [(100.0, 80.0, 200.0, 180.0), (300.0, 50.0, 420.0, 250.0)])
def test_landmarks_come_back_in_frame_pixels(tmp_path: Path, box) -> None:
    fan = FanLandmarker(OrtRuntime(make_fan(tmp_path / "2dfan4.onnx")))
    fan.open()
    image = np.random.default_rng(1).integers(0, 255, (480, 640, 3), dtype=np.uint8)
    points = fan.forward(image, box)
    grid = np.random.default_rng(5).uniform(8, 56, size=(1, 68, 2)).astype(np.float32)[0]
    # the crop maps the box centre to (128, 128) at 195 px per longer box side
    scale = 195.0 / max(box[2] - box[0], box[3] - box[1])
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    expected = (grid * 4 - 128) / scale + np.array([cx, cy])
    np.testing.assert_allclose(points, expected, atol=1e-3)
    assert fan.calls == 1 and 0.0 < fan.last_scores[0] <= 0.8


def test_the_crop_holds_the_box_pixels(tmp_path: Path) -> None:
    fan = FanLandmarker(OrtRuntime(make_fan(tmp_path / "2dfan4.onnx")))
    image = np.zeros((300, 300, 3), np.uint8)
    image[100:200, 100:200] = (0, 0, 255)  # a red square: the box
    fan.prepare_crop(image, (100.0, 100.0, 200.0, 200.0))
    blob = fan._blob[0]
    assert blob.shape == (3, 256, 256)
    assert blob[0, 128, 128] == pytest.approx(1.0)  # R channel first, scaled to 0..1
    assert blob[2, 128, 128] == 0.0
    side = int((blob[0, 128] > 0.5).sum())
    assert abs(side - 195) <= 2  # the box's side became 195 px


def test_wrong_model_is_one_line_error(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])
    model = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "other.onnx"))
    with pytest.raises(EngineError, match="not a 2dfan4 landmarker") as err:
        FanLandmarker(OrtRuntime(tmp_path / "other.onnx")).open()
    assert "\n" not in str(err.value)
