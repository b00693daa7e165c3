"""GFPGAN enhancer: pre/post-processing, region-only paste-back, live cadence, on/off switch.

The models are per-channel affine stand-ins (tests/synth_gfpgan.py) with the real file's
names and shapes, so every number the enhancer computes can be predicted exactly.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import cv2
import numpy as np
import pytest

from engines.backends.base import RuntimeOptions
from engines.backends.ort import OrtRuntime
from engines.errors import EngineError, ModelNotFound
from engines.face import Face
from engines.geometry.face_align import TEMPLATES, estimate_norm, kps5_from_landmarks68, warp_crop
from engines.models.enhancers import enhancer_profile
from engines.models.gfpgan import CROP_SIZE, EnhancerSwitch, GfpganEnhancer
from tests.fixtures import make_gfpgan

H, W = 480, 640
CPU1 = RuntimeOptions(providers="cpu", intra_threads=1)


def make_face(center: tuple[float, float] = (320.0, 240.0), span: float = 240.0, track_id: int = -1) -> Face:
    """A face whose five points sit where ffhq_512 puts them in a `span`-pixel crop at `center`."""
    kps = np.asarray(center, np.float64) + (TEMPLATES["ffhq_512"].normalized() - 0.5) * span
    lm = np.repeat(kps[2:3], 68, axis=0)
    lm[36:42], lm[42:48], lm[30], lm[48], lm[54] = kps[0], kps[1], kps[2], kps[3], kps[4]
    lm = lm.astype(np.float32)
    assert np.allclose(kps5_from_landmarks68(lm), kps, atol=1e-3)
    x0, y0 = kps.min(axis=0) - span * 0.15
    x1, y1 = kps.max(axis=0) + span * 0.15
    return Face(box=(float(x0), float(y0), float(x1), float(y1)), landmarks=lm, track_id=track_id)


def smooth_frame(seed: int = 0) -> np.ndarray:
    """A smooth, textured BGR frame: a colour gradient plus blurred seeded noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    base = np.stack([40 + 0.25 * xx, 60 + 0.3 * yy, 200 - 0.2 * xx], axis=-1)
    noise = cv2.GaussianBlur(rng.standard_normal((H, W, 3)).astype(np.float32) * 60, (0, 0), 6)
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def uniform_frame(bgr: tuple[int, int, int]) -> np.ndarray:
    return np.full((H, W, 3), bgr, np.uint8)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("gfpgan")
    return {
        "identity": make_gfpgan(d / "identity.onnx"),
        "black": make_gfpgan(d / "black.onnx", scale=0.0, bias=-1.0),
        "red": make_gfpgan(d / "red.onnx", scale=0.0, bias=[5.0, -5.0, -5.0]),  # out of range: clipped
        "half": make_gfpgan(d / "half.onnx", scale=0.5, bias=0.0),
        "dynamic": make_gfpgan(d / "dynamic.onnx", batch="N"),
    }


def enhancer(path: Path, every: int = 1) -> GfpganEnhancer:
    e = GfpganEnhancer(OrtRuntime(path, CPU1), every=every)
    e.open()
    return e


# ---- pre- and post-processing ----

def test_blob_is_rgb_in_minus_one_to_one(models: dict[str, Path]) -> None:
    e = enhancer(models["identity"])
    blob, M = e.prepare_crop(uniform_frame((0, 128, 255)), make_face())
    assert blob.shape == (1, 3, CROP_SIZE, CROP_SIZE) and blob.dtype == np.float32
    # The 240 px crop lies inside the frame: every crop pixel is the frame colour.
    np.testing.assert_allclose(blob[0, 0], 1.0, atol=1e-6)  # R = 255
    np.testing.assert_allclose(blob[0, 1], 128 / 127.5 - 1, atol=1e-6)  # G
    np.testing.assert_allclose(blob[0, 2], -1.0, atol=1e-6)  # B = 0
    np.testing.assert_allclose(M, estimate_norm(kps5_from_landmarks68(make_face().landmarks), 512, "ffhq_512"))


def test_decode_clips_scales_rounds_and_returns_bgr() -> None:
    pred = np.zeros((1, 3, 4, 4), np.float32)
    pred[0, 0] = 3.0  # R, above the range: clipped to 1 -> 255
    pred[0, 1] = 0.0  # G: (0 + 1) / 2 * 255 = 127.5 -> 128
    pred[0, 2] = -1.0  # B -> 0
    crop = GfpganEnhancer.decode_output(pred)
    assert crop.shape == (4, 4, 3) and crop.dtype == np.uint8 and crop.flags.c_contiguous
    assert crop[0, 0].tolist() == [0, 128, 255]


def test_identity_model_returns_the_aligned_crop(models: dict[str, Path]) -> None:
    e = enhancer(models["identity"])
    frame = smooth_frame()
    crop, M = e.forward_crop(frame, make_face())
    expected = warp_crop(frame, M, CROP_SIZE)
    assert np.abs(crop.astype(int) - expected.astype(int)).max() <= 1
    assert e.calls == 1


def test_preprocessing_range_is_pinned_by_a_scaling_model(models: dict[str, Path]) -> None:
    # output = 0.5 * input: decoded ((200/127.5 - 1) * 0.5 + 1) * 127.5 = 163.75 -> 164; any
    # other input scaling (x/255, x - 127.5, ...) gives a different grey.
    e = enhancer(models["half"])
    crop, _ = e.forward_crop(uniform_frame((200, 200, 200)), make_face())
    assert np.all(crop == 164)


@pytest.mark.parametrize("span", [400.0, 240.0, 120.0])  # crop px per frame px: 1.3, 2.1, 4.3
def test_identity_paste_leaves_the_face_nearly_unchanged(models: dict[str, Path], span: float) -> None:
    e = enhancer(models["identity"])
    frame = smooth_frame()
    res = e.forward(frame, make_face(span=span))
    assert res is not None
    x0, y0, x1, y1 = res.region
    diff = res.patch.astype(np.float32) - frame[y0:y1, x0:x1]
    inside = res.valid > 0
    assert inside.any()
    assert np.abs(diff[inside]).mean() < 1.0
    # No sub-pixel drift of the re-warp (a half-pixel shift would bias the gradient's levels).
    assert abs(diff[inside].mean()) < 0.3
    assert np.abs(diff).max() <= 12


@pytest.mark.parametrize("span", [400.0, 240.0, 120.0])
def test_paste_back_is_aligned_to_a_fraction_of_a_pixel(models: dict[str, Path], span: float) -> None:
    # A steep ramp (1 level a pixel across, 0.8 down): a half-pixel drift of the inverse warp
    # (e.g. a wrong pixel-centre term when a small face's crop is area-shrunk) biases it by
    # about half a level.
    e = enhancer(models["identity"])
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    ramp = 128 + (xx - 320) + 0.8 * (yy - 240)
    frame = np.repeat(np.clip(np.rint(ramp), 0, 255).astype(np.uint8)[..., None], 3, axis=2)
    res = e.forward(frame, make_face((320.0, 240.0), span))
    assert res is not None
    x0, y0, x1, y1 = res.region
    diff = res.patch.astype(np.float32) - frame[y0:y1, x0:x1]
    use = (res.valid > 0) & (np.abs(ramp[y0:y1, x0:x1] - 128) < 110)  # off the clipped ends
    assert abs(diff[use].mean()) < 0.2
    assert np.abs(diff[use]).max() <= 1


def test_black_model_darkens_the_face_region_only(models: dict[str, Path]) -> None:
    e = enhancer(models["black"])
    frame = smooth_frame()
    face = make_face(span=240.0)
    res = e.forward(frame, face)
    assert res is not None
    out = frame.copy()
    e.paste(out, face, res)
    x0, y0, x1, y1 = res.region
    outside = np.ones((H, W), bool)
    outside[y0:y1, x0:x1] = False
    np.testing.assert_array_equal(out[outside], frame[outside])
    # Within the region only pixels marked valid change, and the face centre is black.
    region_changed = np.any(out[y0:y1, x0:x1] != frame[y0:y1, x0:x1], axis=-1)
    assert not np.any(region_changed & (res.valid == 0))
    cx, cy = np.round(kps5_from_landmarks68(face.landmarks)[2]).astype(int)
    assert out[cy, cx].tolist() == [0, 0, 0]
    assert out[y0:y1, x0:x1].mean() < frame[y0:y1, x0:x1].mean() - 30
    # A region, not the frame: the 240 px crop plus the blur margin.
    assert (x1 - x0) * (y1 - y0) < 0.4 * H * W


def test_channel_order_end_to_end(models: dict[str, Path]) -> None:
    e = enhancer(models["red"])
    face = make_face()
    res = e.forward(uniform_frame((90, 90, 90)), face)
    assert res is not None
    cx, cy = np.round(kps5_from_landmarks68(face.landmarks)[2]).astype(int)
    x0, y0 = res.region[:2]
    assert res.patch[cy - y0, cx - x0].tolist() == [0, 0, 255]  # BGR red


def test_a_face_off_the_frame(models: dict[str, Path]) -> None:
    e = enhancer(models["black"])
    assert e.forward(smooth_frame(), make_face(center=(-2000.0, 240.0))) is None
    res = e.forward(smooth_frame(), make_face(center=(10.0, 240.0)))  # half outside: clipped region
    assert res is not None and res.region[0] == 0 and res.patch.shape[:2] == res.valid.shape


def test_dynamic_batch_export_is_accepted(models: dict[str, Path]) -> None:
    e = enhancer(models["dynamic"])
    assert e.forward(smooth_frame(), make_face()) is not None


# ---- live cadence ----

@pytest.mark.parametrize("every, n", [(1, 5), (2, 5), (3, 7), (3, 9), (4, 4), (5, 1), (10, 25)])
def test_model_runs_ceil_n_over_k_times_per_track(models: dict[str, Path], every: int, n: int) -> None:
    e = enhancer(models["identity"], every=every)
    frame = smooth_frame()
    for i in range(n):
        assert e.forward(frame, make_face(center=(320.0 + i, 240.0), track_id=7)) is not None
    assert e.calls == math.ceil(n / every)
    assert e.reused == n - math.ceil(n / every)


def test_cadence_is_counted_per_track(models: dict[str, Path]) -> None:
    e = enhancer(models["identity"], every=3)
    frame = smooth_frame()
    a, b = make_face((200.0, 240.0), 160.0, track_id=1), make_face((450.0, 240.0), 160.0, track_id=2)
    for i in range(7):
        e.forward(frame, a)
        if i < 4:
            e.forward(frame, b)
    assert e.calls == math.ceil(7 / 3) + math.ceil(4 / 3)
    # Untracked faces have no earlier result to reuse: the model runs every time.
    before = e.calls
    for _ in range(3):
        e.forward(frame, make_face(track_id=-1))
    assert e.calls == before + 3


def test_the_last_result_is_rewarped_to_the_current_face(models: dict[str, Path]) -> None:
    e = enhancer(models["identity"], every=2)
    first = e.forward(uniform_frame((200, 200, 200)), make_face((300.0, 220.0), track_id=3))
    # Next frame: a different picture and the face moved by (32, 20) (paste regions start on
    # 32-column boundaries). No model call: the cached crop (grey 200) is pasted at the new position.
    moved = make_face((332.0, 240.0), track_id=3)
    second = e.forward(uniform_frame((60, 60, 60)), moved)
    assert first is not None and second is not None and e.calls == 1
    assert second.region == (first.region[0] + 32, first.region[1] + 20,
                             first.region[2] + 32, first.region[3] + 20)
    np.testing.assert_array_equal(second.valid, first.valid)
    cx, cy = np.round(kps5_from_landmarks68(moved.landmarks)[2]).astype(int)
    assert second.patch[cy - second.region[1], cx - second.region[0]].tolist() == [200, 200, 200]
    # The third call runs the model again, on the current picture.
    third = e.forward(uniform_frame((60, 60, 60)), moved)
    assert third is not None and e.calls == 2
    assert third.patch[cy - third.region[1], cx - third.region[0]].tolist() == [60, 60, 60]


def test_forget_and_close_drop_the_cached_crop(models: dict[str, Path]) -> None:
    e = enhancer(models["identity"], every=4)
    frame, face = smooth_frame(), make_face(track_id=5)
    e.forward(frame, face)
    e.forget(5)
    e.forward(frame, face)
    assert e.calls == 2
    e.close()
    e.forward(frame, face)  # reopens; the track starts over
    assert e.calls == 3 and e.loaded


@pytest.mark.parametrize("every", [0, -1, 1.5])
def test_bad_cadence(models: dict[str, Path], every: object) -> None:
    with pytest.raises(ValueError, match="every"):
        GfpganEnhancer(OrtRuntime(models["identity"], CPU1), every=every)  # type: ignore[arg-type]


# ---- on / off ----

def test_switch_loads_only_while_enabled(models: dict[str, Path]) -> None:
    e = GfpganEnhancer(OrtRuntime(models["black"], CPU1))
    switch = EnhancerSwitch(e)
    frame, face = smooth_frame(), make_face()
    assert not switch.enabled and e.runtime.session is None
    assert switch.forward(frame, face) is None and e.calls == 0
    switch.enable()
    first_session = e.runtime.session
    assert switch.enabled and first_session is not None
    res = switch.forward(frame, face)
    assert res is not None and e.calls == 1
    out = frame.copy()
    switch.paste(out, face, res)
    assert not np.array_equal(out, frame)
    switch.disable()
    assert not switch.enabled and e.runtime.session is None
    assert switch.forward(frame, face) is None and e.calls == 1
    switch.set(True)  # re-enabling reloads the model
    assert e.runtime.session is not None and e.runtime.session is not first_session
    assert switch.forward(frame, face) is not None and e.calls == 2


def test_switch_with_a_bad_model_stays_off(tmp_path: Path) -> None:
    switch = EnhancerSwitch(GfpganEnhancer(OrtRuntime(tmp_path / "gfpgan_1.4.onnx", CPU1)))
    with pytest.raises(ModelNotFound, match="gfpgan_1.4.onnx"):
        switch.enable()
    assert not switch.enabled and switch.enhancer.runtime.session is None


# ---- bad model files ----

@pytest.mark.parametrize("kwargs, found", [
    ({"size": 256}, "found inputs \\[\\('input', \\[1, 3, 256, 256\\]\\)\\]"),
    ({"input_name": "x"}, "found inputs \\[\\('x', "),
    ({"output_name": "y"}, "outputs \\[\\('y', "),
])
def test_a_model_with_other_io_is_refused(tmp_path: Path, kwargs: dict[str, object], found: str) -> None:
    path = make_gfpgan(tmp_path / "other.onnx", **kwargs)  # type: ignore[arg-type]
    e = GfpganEnhancer(OrtRuntime(path, CPU1))
    with pytest.raises(EngineError) as err:
        e.open()
    text = str(err.value)
    assert "\n" not in text and "other.onnx" in text
    assert "expected input input [1,3,512,512] and output output [1,3,512,512]" in text
    assert re.search(found, text)
    assert e.runtime.session is None


def test_missing_and_non_onnx_files(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match="nope.onnx"):
        GfpganEnhancer(OrtRuntime(tmp_path / "nope.onnx", CPU1)).open()
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(EngineError, match="bad.onnx.*expected a GFPGAN 1.4 ONNX file") as err:
        GfpganEnhancer(OrtRuntime(bad, CPU1)).open()
    assert "\n" not in str(err.value)


# -- the other enhancers by name ---------------------------------------------------------------

@pytest.mark.parametrize("name", ["codeformer", "gpen_bfr_256", "gpen_bfr_512", "restoreformer_plus_plus"])
def test_each_enhancer_by_name_crops_normalises_and_decodes_as_published(name: str, tmp_path: Path) -> None:
    p = enhancer_profile(name)
    path = make_gfpgan(tmp_path / f"{name}.onnx", size=p.size, weight=p.weight is not None)  # an identity
    enhancer = GfpganEnhancer(OrtRuntime(path), profile=p)
    enhancer.open()
    frame = np.ascontiguousarray(cv2.resize(np.random.default_rng(3).integers(0, 256, (64, 64, 3), np.uint8),
                                            (512, 512)))
    kps = np.array([[197, 210], [293, 210], [245, 262], [205, 310], [285, 310]], np.float32)
    blob, M = enhancer.prepare_crop(frame, kps)
    assert blob.shape == (1, 3, p.size, p.size)
    np.testing.assert_array_equal(M, estimate_norm(kps, p.size, p.template))
    crop = warp_crop(frame, M, p.size)
    want = (crop[:, :, ::-1].astype(np.float64) / 255 - 0.5) / 0.5
    np.testing.assert_allclose(blob[0], want.transpose(2, 0, 1), atol=1e-6)
    restored, _ = enhancer.forward_crop(frame, kps)  # identity: (x + 1) / 2 * 255 gives the crop back
    assert np.abs(restored.astype(int) - crop.astype(int)).max() <= 1
    assert enhancer.forward(frame, kps) is not None


def test_codeformer_without_its_weight_input_is_one_line(tmp_path: Path) -> None:
    path = make_gfpgan(tmp_path / "codeformer.onnx")  # no weight input
    enhancer = GfpganEnhancer(OrtRuntime(path), profile=enhancer_profile("codeformer"))
    with pytest.raises(EngineError, match=r"is not a CodeFormer model: expected input input \[1,3,512,512\] "
                                          r"and weight \[1\] \(float64\) and output output") as err:
        enhancer.open()
    assert "\n" not in str(err.value)
