"""tools/cost_models.py: the cost-equivalent stand-ins have the real I/O and the estimated MACs.

No benchmark here: models are built once per module, loaded (not run, except the cheap
detector) and their MACs counted from the graph.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tools.cost_models import ESTIMATES, build_all, count_macs

pytestmark = pytest.mark.slow  # every test reads the cost models, built once in about 20 s

CPU = ["CPUExecutionProvider"]
# (file, inputs, outputs) as (name, shape) with symbolic dims as strings.
IO = {
    "det_10g.onnx": ([("input.1", [1, 3, "H", "W"])], 9),
    "w600k_r50.onnx": ([("input.1", ["N", 3, 112, 112])], [("683", ["N", 512])]),
    "inswapper_128.onnx": ([("target", [1, 3, 128, 128]), ("source", [1, 512])],
                           [("output", [1, 3, 128, 128])]),
    "inswapper_128_fp16.onnx": ([("target", [1, 3, 128, 128]), ("source", [1, 512])],
                                [("output", [1, 3, 128, 128])]),
    "2dfan4.onnx": ([("input", [1, 3, 256, 256])], [("landmarks", [1, 68, 3]), ("heatmaps", [1, 68, 64, 64])]),
    "simswap_256.onnx": ([("target", [1, 3, 256, 256]), ("source", [1, 512])], [("output", [1, 3, 256, 256])]),
    "simswap_unofficial_512.onnx": ([("target", [1, 3, 512, 512]), ("source", [1, 512])],
                                    [("output", [1, 3, 512, 512])]),
    "xseg_1.onnx": ([("input", [1, 256, 256, 3])], [("output", [1, 256, 256, 1])]),
    "bisenet_resnet_34.onnx": ([("input", [1, 3, 512, 512])], [("output", [1, 19, 512, 512])]),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_all(tmp_path_factory.mktemp("cost"))


def _dims(shape: list[int | str | None]) -> list[int | str]:
    return [d if isinstance(d, int) else "?" for d in shape]


@pytest.mark.parametrize("file", list(IO))
def test_loads_with_the_real_io(built: dict[str, Path], file: str) -> None:
    sess = ort.InferenceSession(str(built[file]), providers=CPU)
    inputs, outputs = IO[file]
    assert [(i.name, _dims(i.shape)) for i in sess.get_inputs()] == [(n, _dims(s)) for n, s in inputs]
    if isinstance(outputs, int):  # SCRFD: scores, boxes, keypoints for strides 8/16/32
        assert [o.shape[-1] for o in sess.get_outputs()] == [1, 1, 1, 4, 4, 4, 10, 10, 10]
    else:
        assert [(o.name, _dims(o.shape)) for o in sess.get_outputs()] == [(n, _dims(s)) for n, s in outputs]


def test_detector_runs_and_gives_insightface_row_counts(built: dict[str, Path]) -> None:
    sess = ort.InferenceSession(str(built["det_10g.onnx"]), providers=CPU)
    blob = np.random.default_rng(0).normal(size=(1, 3, 128, 160)).astype(np.float32)
    outs = sess.run(None, {"input.1": blob})
    rows = [(128 // s) * (160 // s) * 2 for s in (8, 16, 32)]
    assert [o.shape[0] for o in outs] == rows * 3
    assert all(np.isfinite(o).all() for o in outs)


@pytest.mark.parametrize(("file", "dtype"), [("inswapper_128.onnx", np.float32),
                                             ("inswapper_128_fp16.onnx", np.float16)])
def test_inswapper_emap_is_the_last_initializer(built: dict[str, Path], file: str, dtype: type) -> None:
    model = onnx.load(str(built[file]), load_external_data=False)
    emap = onnx.numpy_helper.to_array(model.graph.initializer[-1])
    assert emap.shape == (512, 512) and emap.dtype == dtype


@pytest.mark.parametrize("file", list(ESTIMATES))
def test_counted_macs_match_the_estimate(built: dict[str, Path], file: str) -> None:
    est = ESTIMATES[file]
    macs = count_macs(onnx.load(str(built[file])), est.input_shapes) / 1e9
    assert abs(macs / est.gmacs - 1) <= 0.25, f"{file}: {macs:.2f} GMACs built, {est.gmacs} estimated"


def test_counter_counts_a_known_conv() -> None:
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.zeros((8, 4, 3, 3), np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    assert count_macs(model, {}) == 8 * 8 * 8 * 4 * 9


def test_the_simswap_stand_in_swaps_a_face_through_its_swapper(built: dict[str, Path], tmp_path: Path) -> None:
    # tools/bench_pixel_boost.py --swapper simswap_256 times this: the stand-in goes through
    # the same swapper class and profile as the real file (crop, normalisation, converter).
    from engines.backends.base import RuntimeOptions
    from engines.backends.ort import OrtRuntime
    from engines.models.inswapper import InSwapper
    from engines.models.swappers import profile
    from stream.media.demo_clips import astronaut
    from tools.synth.swappers import make_converter

    frame = np.zeros((720, 1280, 3), np.uint8)
    frame[100:612, 400:912] = astronaut()
    kps5 = np.array([[197, 210], [293, 210], [245, 262], [205, 310], [285, 310]], np.float32) + [400, 100]
    swapper = InSwapper(OrtRuntime(built["simswap_256.onnx"], RuntimeOptions()), profile=profile("simswap_256"),
                        converter=OrtRuntime(make_converter(tmp_path / "crossface_simswap.onnx"), RuntimeOptions()))
    swapper.open()
    latent = swapper.prepare_source(np.random.default_rng(0).standard_normal(512).astype(np.float32))
    out = swapper.forward(frame, kps5, latent)
    assert out is not None
    x0, y0, x1, y1 = out.region
    # The face's region of the frame (SimSwap's 256 crop spans about twice the eyes' 96 px
    # distance), pasted over the face, with the model's picture in it.
    assert x0 < 400 + 197 and x1 > 400 + 293 and y0 < 100 + 210 and y1 > 100 + 310
    assert out.patch.shape[:2] == out.valid.shape == (y1 - y0, x1 - x0)
    assert np.isfinite(out.patch).all() and (out.valid > 0).mean() > 0.5


def test_the_mask_stand_ins_are_taken_as_the_mask_models(built: dict[str, Path]) -> None:
    # tools/bench_pixel_boost.py --mask occlusion,region times them through the same Masker
    # as the real xseg_1 and bisenet_resnet_34 files, which checks their inputs when it opens.
    from engines.backends.base import RuntimeOptions
    from engines.backends.ort import OrtRuntime
    from engines.models.masks import Masker, MaskOptions, occlusion_mask, region_mask

    occluder = OrtRuntime(built["xseg_1.onnx"], RuntimeOptions())
    parser = OrtRuntime(built["bisenet_resnet_34.onnx"], RuntimeOptions())
    Masker(MaskOptions(types=("occlusion", "region")), occluder=occluder, parser=parser).open()
    rng = np.random.default_rng(1)
    seen = occluder.run({"input": rng.random((1, 256, 256, 3), np.float32)}, ["output"])["output"]
    assert seen.shape == (1, 256, 256, 1) and 0.0 <= seen.min() and seen.max() <= 1.0
    assert occlusion_mask(seen[0], 128).shape == (128, 128)
    logits = parser.run({"input": rng.random((1, 3, 512, 512), np.float32)}, ["output"])["output"]
    assert logits.shape == (1, 19, 512, 512) and np.isfinite(logits).all()
    assert region_mask(logits[0], 128, ("skin", "nose")).shape == (128, 128)
