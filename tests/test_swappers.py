"""The neural swappers by name, each on a synthetic model of its published I/O: the crop
(size and template), the input's normalisation, the source vector and the output's range
are checked against the published formulas on known inputs, and a whole swap runs with
`--swapper NAME`."""
from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest

from engines.backends.base import RuntimeOptions
from engines.backends.ort import OrtRuntime
from engines.backends.registry import runtime_factory
from engines.errors import EngineError
from engines.geometry.face_align import TEMPLATES, estimate_norm, warp_crop
from engines.models.inswapper import InSwapper
from engines.models.pixel_boost import explode, implode
from engines.models.swappers import PROFILES, profile
from stream.cli.main import main
from stream.runtime.allocator import PinnedAllocator
from tests.fixtures import (
    detector_and_embedder,
    make_converter,
    make_hyperswap,
    make_inswapper,
    make_simswap,
    probe,
)
from tests.fixtures.fake_tensorrt import V10, V11, install_fake_gpu
from tools.synth.swappers import make_crop_swapper

# Five points of a face in a 640x480 frame.
KPS5 = np.array([[290.0, 210.0], [350.0, 208.0], [321.0, 245.0], [297.0, 280.0], [345.0, 279.0]], np.float32)


def model_file(name: str, folder: Path) -> Path:
    """A synthetic file of swapper `name`'s exact I/O, under its catalog file name."""
    p = profile(name)
    path = folder / f"{name}.onnx"
    if path.exists():
        return path
    if p.family == "inswapper":
        return make_inswapper(path, fp16=name.endswith("fp16"))
    if p.family == "hyperswap":
        return make_hyperswap(path)
    return make_simswap(path, p.size)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("swappers")
    make_converter(d / "crossface_simswap.onnx", seed=7)
    return d


def open_swapper(name: str, folder: Path) -> InSwapper:
    p = profile(name)
    conv = OrtRuntime(folder / "crossface_simswap.onnx") if p.converter else None
    swapper = InSwapper(OrtRuntime(model_file(name, folder)), profile=p, converter=conv)
    swapper.open()
    return swapper


@pytest.fixture(scope="module")
def frame() -> np.ndarray:
    rng = np.random.default_rng(3)
    img = cv2.GaussianBlur(rng.integers(0, 256, (480, 640, 3), dtype=np.uint8), (0, 0), 3)
    return np.ascontiguousarray(img)


def test_the_published_templates() -> None:
    """arcface_112_v1 (SimSwap) and arcface_128 (inswapper, hyperswap) as published (over the crop size)."""
    v1 = [[0.35473214, 0.45658929], [0.64526786, 0.45658929], [0.50000000, 0.61154464],
          [0.37913393, 0.77687500], [0.62086607, 0.77687500]]
    np.testing.assert_allclose(TEMPLATES["arcface_112_v1"].normalized(), v1, atol=1e-6)
    np.testing.assert_allclose(TEMPLATES["arcface_128"].normalized()[0], [0.36167656, 0.40387734], atol=1e-6)
    assert {p.template for p in PROFILES.values()} <= set(TEMPLATES)


@pytest.mark.parametrize("name", list(PROFILES))
def test_crop_and_normalisation_follow_the_published_formula(name: str, folder: Path, frame: np.ndarray) -> None:
    swapper = open_swapper(name, folder)
    p = swapper.profile
    blob, M = swapper.prepare_crop(frame, KPS5)
    assert blob.shape == (1, 3, p.size, p.size)
    np.testing.assert_array_equal(M, estimate_norm(KPS5, p.size, p.template))
    crop = warp_crop(frame, M, p.size)
    # the formula as published: RGB, x / 255, minus the mean, over the std, channels first
    rgb = crop[:, :, ::-1].astype(np.float64) / 255.0
    want = ((rgb - np.array(p.mean)) / np.array(p.std)).transpose(2, 0, 1)
    np.testing.assert_allclose(blob[0], want, atol=2e-6)
    if not p.plain_input:  # it is not the plain x / 255
        assert np.abs(blob[0] - rgb.transpose(2, 0, 1)).max() > 0.1


@pytest.mark.parametrize("name", list(PROFILES))
def test_the_source_vector_follows_the_published_formula(name: str, folder: Path) -> None:
    swapper = open_swapper(name, folder)
    emb = np.random.default_rng(11).standard_normal(512).astype(np.float32) * 7
    got = swapper.prepare_source(emb)
    normed = emb / np.linalg.norm(emb)
    if swapper.profile.source == "emap":  # insightface: normed @ emap, normed again
        want = normed @ swapper.emap
        want = want / np.linalg.norm(want)
    elif swapper.profile.source == "converted":  # crossface on the raw embedding, then normed
        conv = ort.InferenceSession(str(folder / "crossface_simswap.onnx"))
        want = conv.run(None, {"input": emb.reshape(1, -1)})[0].ravel()
        want = want / np.linalg.norm(want)
    else:  # hyperswap: the normed embedding itself
        want = normed
    assert got.shape == (1, 512) and got.dtype == np.float32
    np.testing.assert_allclose(got.ravel(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["inswapper_128", "hyperswap_1a_256", "simswap_unofficial_512"])
def test_the_output_range_is_decoded_as_published(name: str, folder: Path) -> None:
    swapper = open_swapper(name, folder)
    size = swapper.size
    pred = np.linspace(-1.2, 1.2, 3 * size * size, dtype=np.float32).reshape(1, 3, size, size)
    got = swapper.decode_output(pred)[0]
    x = pred[0].transpose(1, 2, 0).astype(np.float64)
    if swapper.profile.signed_output:
        x = x * 0.5 + 0.5
    want = np.clip(255 * x, 0, 255).astype(np.uint8)[:, :, ::-1]
    assert got.shape == (size, size, 3)
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1  # float32 against float64 at truncation


@pytest.mark.parametrize("name", list(PROFILES))
def test_a_face_is_swapped_and_pasted_on_its_region(name: str, folder: Path, frame: np.ndarray) -> None:
    swapper = open_swapper(name, folder)
    latent = swapper.prepare_source(np.random.default_rng(5).standard_normal(512).astype(np.float32))
    result = swapper.forward(frame, KPS5, latent)
    assert result is not None
    x0, y0, x1, y1 = result.region
    assert x0 <= KPS5[:, 0].min() and x1 >= KPS5[:, 0].max() and y0 <= KPS5[:, 1].min() and y1 >= KPS5[:, 1].max()
    # the crop's footprint grows with the template's margin, not with the model's size
    side = max(x1 - x0, y1 - y0)
    assert side < 6 * (KPS5[:, 0].max() - KPS5[:, 0].min())
    out = frame.copy()
    swapper.paste(out, None, result)
    assert np.any(out != frame) and np.array_equal(out[:y0], frame[:y0])


def test_a_file_of_another_swapper_is_a_one_line_error(folder: Path) -> None:
    wrong = InSwapper(OrtRuntime(model_file("hyperswap_1a_256", folder)), profile=profile("simswap_unofficial_512"),
                      converter=OrtRuntime(folder / "crossface_simswap.onnx"))
    with pytest.raises(EngineError, match=r"is not a simswap_unofficial_512 model: expected inputs target "
                                          r"\[1,3,512,512\]") as err:
        wrong.open()
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="needs its embedding converter"):
        InSwapper(OrtRuntime(model_file("simswap_256", folder)), profile=profile("simswap_256"))
    with pytest.raises(ValueError, match="unknown swapper 'nosuch'; known: inswapper_128"):
        profile("nosuch")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hyperswap_1a_256", "simswap_256"])
def test_swap_with_a_swapper_by_name(name: str, face_clip: Path, source_photo: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture) -> None:
    models = detector_and_embedder(tmp_path / "models")
    model_file(name, models)
    make_converter(models / "crossface_simswap.onnx", seed=7)
    out, stats = tmp_path / "out.mp4", tmp_path / "stats.json"
    assert main(["swap", "--engine", "neural", "--swapper", name, "--models-dir", str(models),
                 "--source", str(source_photo), "--input", str(face_clip), "--output", str(out),
                 "--x264-preset", "ultrafast", "--stats-json", str(stats), "-q"]) == 0
    said = capsys.readouterr().out
    assert f"{name}.onnx" in said
    rep = json.loads(stats.read_text())
    assert rep["faces_swapped"] > 0 and rep["model_calls"]["swap"] == rep["faces_swapped"]
    assert probe(out)["frames"] > 0


def test_a_missing_converter_is_named(face_clip: Path, source_photo: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture) -> None:
    models = detector_and_embedder(tmp_path / "models")
    model_file("simswap_256", models)
    assert main(["swap", "--engine", "neural", "--swapper", "simswap_256", "--models-dir", str(models),
                 "--source", str(source_photo), "--input", str(face_clip), "--output", str(tmp_path / "o.mp4"),
                 "-q"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "crossface_simswap.onnx" in err


@pytest.mark.parametrize("version", [V10, V11])
def test_the_swappers_run_on_the_tensorrt_stand_ins_as_on_onnx_runtime(
        folder: Path, frame: np.ndarray, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    """hyperswap and simswap (with its converter) through the native TensorRT runtime's
    stand-ins (tests/fixtures/fake_tensorrt.py: the real runtime code on a fake GPU) give the
    crops ONNX Runtime gives."""
    install_fake_gpu(monkeypatch, version)
    trt = runtime_factory(RuntimeOptions(kind="tensorrt", trt_cache_dir=str(tmp_path)), PinnedAllocator())
    ort_ = runtime_factory(RuntimeOptions(providers="cpu", intra_threads=1))
    emb = np.random.default_rng(2).standard_normal(512).astype(np.float32)
    for name in ("hyperswap_1a_256", "simswap_256"):
        crops = []
        for make in (trt, ort_):
            p = profile(name)
            swapper = InSwapper(make(model_file(name, folder)), profile=p,
                                converter=make(folder / "crossface_simswap.onnx") if p.converter else None)
            swapper.open()
            crop, _ = swapper.forward_crop(frame, KPS5, swapper.prepare_source(emb))
            crops.append(crop)
        assert isinstance(swapper.runtime, OrtRuntime)
        np.testing.assert_array_equal(crops[0], crops[1])


# -- pixel boost ----------------------------------------------------------------------------

def test_tiles_are_the_crops_strided_samples_and_put_back_exactly() -> None:
    crop = np.random.default_rng(1).integers(0, 256, (512, 512, 3), dtype=np.uint8)
    tiles = implode(crop, 4)
    assert tiles.shape == (16, 128, 128, 3)
    for a in range(4):
        for b in range(4):
            np.testing.assert_array_equal(tiles[a * 4 + b], crop[a::4, b::4])
    np.testing.assert_array_equal(explode(tiles, 4), crop)


@pytest.mark.parametrize("name, boost", [("inswapper_128", 256), ("hyperswap_1a_256", 512)])
def test_a_boosted_crop_is_cut_into_model_sized_tiles(name: str, boost: int, folder: Path,
                                                      frame: np.ndarray) -> None:
    p = profile(name)
    swapper = InSwapper(OrtRuntime(model_file(name, folder)), profile=p, pixel_boost=boost)
    swapper.open()
    k = boost // p.size
    blob, M = swapper.prepare_crop(frame, KPS5)
    assert blob.shape == (k * k, 3, p.size, p.size)
    np.testing.assert_array_equal(M, estimate_norm(KPS5, boost, p.template))  # aligned at the boosted size
    big = warp_crop(frame, M, boost)
    for t, tile in enumerate(implode(big, k)):
        rgb = tile[:, :, ::-1].astype(np.float64) / 255.0
        want = ((rgb - np.array(p.mean)) / np.array(p.std)).transpose(2, 0, 1)
        np.testing.assert_allclose(blob[t], want, atol=2e-6)


def test_a_boosted_swap_puts_the_swapped_tiles_back_into_the_whole_crop(tmp_path: Path, frame: np.ndarray) -> None:
    """An identity model in hyperswap's I/O: the boosted swap of a face is its own 512 crop
    (the tiles' normalisation, the output's range and the interleaving all undone exactly
    but for the output's truncation), at one model call per tile."""
    path = make_crop_swapper(tmp_path / "hyperswap_1a_256.onnx", 256, mask=True, signed=True, identity=True)
    swapper = InSwapper(OrtRuntime(path), profile=profile("hyperswap_1a_256"), pixel_boost=512)
    swapper.open()
    latent = swapper.prepare_source(np.ones(512, np.float32))
    crop, M = swapper.forward_crop(frame, KPS5, latent)
    assert crop.shape == (512, 512, 3) and swapper.calls == 4  # a batch-1 export: a call per tile
    assert np.abs(crop.astype(int) - warp_crop(frame, M, 512).astype(int)).max() <= 1
    result = swapper.forward(frame, KPS5, latent)
    assert result is not None
    plain = InSwapper(OrtRuntime(path), profile=profile("hyperswap_1a_256"))
    plain.open()
    unboosted = plain.prepare_region(frame.shape, estimate_norm(KPS5, 256, "arcface_128"))
    assert unboosted is not None  # the same footprint in the frame as without the boost (to the column grid)
    assert abs((result.region[2] - result.region[0]) - (unboosted[2] - unboosted[0])) <= 64


@pytest.mark.parametrize("boost, says", [
    (300, "pixel boost 300: inswapper_128 takes 128, 256, 384, 512, 640, 768, 896, 1024"),
    (2048, "pixel boost 2048"),
])
def test_a_pixel_boost_that_does_not_fit_is_one_line(boost: int, says: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    assert main(["swap", "--pixel-boost", str(boost), "--source", "x.jpg", "--input", "y.mp4",
                 "--output", str(tmp_path / "o.mp4")]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and says in err


@pytest.mark.slow
def test_swap_with_pixel_boost_calls_the_model_per_tile(face_clip: Path, source_photo: Path, tmp_path: Path) -> None:
    models = detector_and_embedder(tmp_path / "models")
    make_inswapper(models / "inswapper_128.onnx", seed=5)
    out, stats = tmp_path / "out.mp4", tmp_path / "stats.json"
    assert main(["swap", "--engine", "neural", "--pixel-boost", "256", "--models-dir", str(models),
                 "--source", str(source_photo), "--input", str(face_clip), "--output", str(out),
                 "--x264-preset", "ultrafast", "--stats-json", str(stats), "-q"]) == 0
    rep = json.loads(stats.read_text())
    assert rep["faces_swapped"] > 0 and rep["model_calls"]["swap"] == 4 * rep["faces_swapped"]
    assert probe(out)["frames"] > 0
