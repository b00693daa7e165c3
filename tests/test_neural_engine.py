"""The neural family end to end on synthetic models with the real I/O, and `--engine auto`."""
from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pytest

from stream.cli.main import main
from tests.fixtures import CLIP_FRAMES, build_scrfd_model, make_arcface, make_fan, make_inswapper, probe

pytestmark = pytest.mark.slow  # whole swaps with the neural engine set


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("models")
    build_scrfd_model(folder / "det_10g.onnx", seed=3)
    make_arcface(folder / "w600k_r50.onnx", seed=4)
    make_inswapper(folder / "inswapper_128.onnx", seed=5)
    return folder


def _frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]


def _swap(tmp_path: Path, face_clip: Path, source_photo: Path, *extra: str) -> dict:
    out = tmp_path / "out.mp4"
    stats = tmp_path / "stats.json"
    code = main(["swap", "--source", str(source_photo), "--input", str(face_clip), "--output", str(out),
                 "--x264-preset", "ultrafast", "--stats-json", str(stats), "-q", *extra])
    assert code == 0
    rep = json.loads(stats.read_text())
    rep["_out"] = out
    return rep


@pytest.mark.parametrize("with_fan", [False, True])
def test_neural_swap_runs_end_to_end(models_dir: Path, face_clip: Path, source_photo: Path,
                                     tmp_path: Path, with_fan: bool, capsys: pytest.CaptureFixture) -> None:
    folder = models_dir
    if with_fan:
        folder = tmp_path / "with_fan"
        folder.mkdir()
        for f in models_dir.iterdir():
            (folder / f.name).symlink_to(f)
        make_fan(folder / "2dfan4.onnx")
    rep = _swap(tmp_path, face_clip, source_photo, "--engine", "neural", "--models-dir", str(folder))
    said = capsys.readouterr().out
    assert "engine: neural (det_10g.onnx, w600k_r50.onnx, inswapper_128.onnx" in said
    assert ("2dfan4.onnx" in said) == with_fan
    assert rep["engine"] == "neural"
    assert probe(rep["_out"])["frames"] == CLIP_FRAMES
    calls = rep["model_calls"]
    assert rep["faces_swapped"] > 0 and calls["swap"] == rep["faces_swapped"]
    # 'all' mode: the embedder ran for the source only (in open()), never per frame or track
    assert calls["embed"] == 0
    assert calls["detect"] < CLIP_FRAMES
    before, after = _frames(face_clip), _frames(rep["_out"])
    assert max(np.abs(a.astype(int) - b.astype(int)).max() for a, b in zip(before, after)) > 50


def test_auto_picks_neural_when_the_files_are_there(models_dir: Path, face_clip: Path, source_photo: Path,
                                                    tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rep = _swap(tmp_path, face_clip, source_photo, "--models-dir", str(models_dir))
    assert rep["engine"] == "neural" and "engine: neural" in capsys.readouterr().out


def test_auto_falls_back_to_dlib_and_says_why(face_clip: Path, source_photo: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    rep = _swap(tmp_path, face_clip, source_photo, "--models-dir", str(empty))
    assert rep["engine"] == "dlib"
    assert "engine: dlib (the neural set is incomplete: det_10g.onnx" in capsys.readouterr().out


def test_neural_without_files_is_a_one_line_error(face_clip: Path, source_photo: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code = main(["swap", "--engine", "neural", "--models-dir", str(empty), "--source", str(source_photo),
                 "--input", str(face_clip), "--output", str(tmp_path / "o.mp4")])
    err = capsys.readouterr().err.strip()
    assert code == 1 and "\n" not in err
    assert "det_10g.onnx" in err and str(empty) in err


def test_reference_mode_embeds_per_track_not_per_frame(models_dir: Path, face_clip: Path,
                                                       source_photo: Path, tmp_path: Path) -> None:
    rep = _swap(tmp_path, face_clip, source_photo, "--engine", "neural", "--models-dir", str(models_dir),
                "--select", "reference", "--reference", str(source_photo), "--detect-every", "8")
    # at most once per track (re-checks come every 300 frames), whatever each track's life;
    # tracks past the per-frame budget (max_faces) are never even looked at
    assert 0 < rep["model_calls"]["embed"] <= rep["tracks_started"]


def test_a_batching_swapper_runs_once_per_frame(models_dir: Path, face_clip: Path, source_photo: Path,
                                                tmp_path: Path) -> None:
    folder = tmp_path / "batched"
    folder.mkdir()
    for name in ("det_10g.onnx", "w600k_r50.onnx"):
        (folder / name).symlink_to(models_dir / name)
    make_inswapper(folder / "inswapper_128.onnx", seed=5, batch=None)  # dynamic batch axis
    rep = _swap(tmp_path, face_clip, source_photo, "--engine", "neural", "--models-dir", str(folder))
    assert rep["faces_swapped"] > rep["frames_with_faces"]  # several faces a frame...
    assert rep["model_calls"]["swap"] == rep["frames_with_faces"]  # ...in one model call each


@pytest.mark.parametrize("every", [1, 3])
def test_enhancer_runs_on_swapped_faces_at_its_cadence(models_dir: Path, face_clip: Path, source_photo: Path,
                                                       tmp_path: Path, every: int) -> None:
    from tests.fixtures import make_gfpgan

    folder = tmp_path / "with_gfpgan"
    folder.mkdir()
    for f in models_dir.iterdir():
        (folder / f.name).symlink_to(f)
    make_gfpgan(folder / "gfpgan_1.4.onnx")
    rep = _swap(tmp_path, face_clip, source_photo, "--engine", "dlib", "--models-dir", str(folder),
                "--enhance", "--enhance-every", str(every))
    calls = rep["model_calls"]
    assert rep["faces_swapped"] > 0
    if every == 1:
        assert calls["enhance"] == rep["faces_swapped"]
    else:  # the model ran on every third frame of each face; its result was re-pasted between
        assert 0 < calls["enhance"] < rep["faces_swapped"] / 2


def test_enhance_without_its_file_is_a_one_line_error(face_clip: Path, source_photo: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    code = main(["swap", "--enhance", "--models-dir", str(tmp_path), "--source", str(source_photo),
                 "--input", str(face_clip), "--output", str(tmp_path / "o.mp4")])
    err = capsys.readouterr().err.strip()
    assert code == 1 and "\n" not in err and "gfpgan_1.4.onnx" in err


@pytest.mark.parametrize("name, size, weight", [("codeformer", 512, True), ("gpen_bfr_256", 256, False)])
def test_an_enhancer_chosen_by_name_runs_on_the_swapped_faces(models_dir: Path, face_clip: Path, source_photo: Path,
                                                              tmp_path: Path, name: str, size: int, weight: bool,
                                                              capsys: pytest.CaptureFixture) -> None:
    from tests.fixtures import make_gfpgan

    folder = tmp_path / "with_enhancer"
    folder.mkdir()
    make_gfpgan(folder / f"{name}.onnx", size=size, weight=weight)
    rep = _swap(tmp_path, face_clip, source_photo, "--engine", "dlib", "--models-dir", str(folder),
                "--enhancer", name)
    assert rep["faces_swapped"] > 0 and rep["model_calls"]["enhance"] == rep["faces_swapped"]
    assert f"enhancer: {name}.onnx" in capsys.readouterr().out
