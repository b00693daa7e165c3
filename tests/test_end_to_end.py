"""End to end on generated clips: timing, audio, identity moved toward the source,
faceless frames untouched; pictures in and out."""
from __future__ import annotations

import json
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from threadpoolctl import threadpool_info

from engines.frame_views import FrameViews
from stream.cli.main import main
from stream.job.runs import run_video
from stream.runtime.cores import set_blas_threads
from tests.fixtures import BLANK_FRAMES, CLIP_FRAMES, FACE_FRAMES, Identity, probe, window_frame


def decode_all(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]


@pytest.fixture(scope="module")
def identity() -> Identity:
    return Identity()


@pytest.fixture(scope="module")
def swapped(face_clip: Path, source_photo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("e2e") / "out.mp4"
    # crf 0: lossless, so "unchanged" frames can be compared closely
    code = main(["swap", "--source", str(source_photo), "--input", str(face_clip), "--output", str(out),
                 "--crf", "0", "--x264-preset", "ultrafast", "--detect-every", "4", "-q",
                 "--stats-json", str(out.with_suffix(".json"))])
    assert code == 0
    return out


def test_timing_and_frame_count_are_kept(face_clip: Path, swapped: Path) -> None:
    a, b = probe(face_clip), probe(swapped)
    assert b["frames"] == a["frames"] == CLIP_FRAMES
    assert b["times"] == a["times"]
    assert b["video_duration"] == pytest.approx(a["video_duration"], abs=1e-3)


def test_audio_is_copied_untouched(face_clip: Path, swapped: Path) -> None:
    a, b = probe(face_clip)["audio"], probe(swapped)["audio"]
    assert a is not None and b is not None
    assert b["codec"] == a["codec"]
    assert b["payloads"] == a["payloads"]


def test_every_swapped_face_moves_toward_the_source_identity(
        face_clip: Path, swapped: Path, source_photo: Path, identity: Identity) -> None:
    src = cv2.imread(str(source_photo))
    src_emb = identity.embed(src, identity.boxes(src)[0])
    before, after = decode_all(face_clip), decode_all(swapped)
    gains = []
    for i in (2, FACE_FRAMES - 1, CLIP_FRAMES - 2, CLIP_FRAMES - 1):
        boxes = identity.boxes(before[i])
        assert len(boxes) == 3
        for box in boxes:
            d_before = np.linalg.norm(identity.embed(before[i], box) - src_emb)
            d_after = np.linalg.norm(identity.embed(after[i], box) - src_emb)
            # the classical swap keeps the target's face shape, which dlib's embedding
            # partly encodes: every face must still move clearly toward the source
            assert d_after < d_before - 0.03, (i, box, d_before, d_after)
            gains.append(d_before - d_after)
    assert len(gains) == 12
    assert np.mean(gains) > 0.08


def test_frames_without_faces_are_unchanged(face_clip: Path, swapped: Path) -> None:
    before, after = decode_all(face_clip), decode_all(swapped)
    for i in range(FACE_FRAMES, FACE_FRAMES + BLANK_FRAMES):  # no ghost of the faces just gone
        diff = np.abs(before[i].astype(np.int16) - after[i].astype(np.int16))
        assert diff.mean() < 1.0 and np.percentile(diff, 99.9) <= 4
    # and the frames with faces did change, where the faces are
    diff = np.abs(before[2].astype(np.int16) - after[2].astype(np.int16)).mean(axis=2)
    assert (diff > 20).mean() > 0.01


def diff(a: np.ndarray, b: np.ndarray, where: np.ndarray) -> float:
    """The mean absolute difference of two pictures over the pixels `where`."""
    return float(np.abs(a[where].astype(int) - b[where]).mean())


def test_mask_area_keeps_each_targets_own_mouth_on_the_embedded_default(
        face_clip: Path, swapped: Path, source_photo: Path, tmp_path: Path, identity: Identity,
        capsys: pytest.CaptureFixture) -> None:
    """`--mask area --mask-areas upper-face,lower-face` with no neural model (the default engine
    falls back to dlib): every face's own mouth stays as it was, the rest is swapped."""
    out = tmp_path / "mouth.mp4"
    assert main(["swap", "--source", str(source_photo), "--input", str(face_clip), "--output", str(out),
                 "--crf", "0", "--x264-preset", "ultrafast", "--detect-every", "4",
                 "--mask", "area", "--mask-areas", "upper-face,lower-face"]) == 0
    assert "mask area: the target's own mouth kept" in capsys.readouterr().out
    before, plain, kept = decode_all(face_clip), decode_all(swapped), decode_all(out)
    mouths = faces = 0
    for i in range(FACE_FRAMES):
        for box in identity.boxes(before[i]):
            points = identity.lm.forward(FrameViews(before[i]), box)
            mouth = np.zeros(before[i].shape[:2], np.uint8)
            cv2.fillConvexPoly(mouth, cv2.convexHull(np.round(points[48:68]).astype(np.int32)), 255)
            inner = cv2.erode(mouth, np.ones((5, 5), np.uint8)) > 0  # this frame's points, not the tracker's
            x0, y0, x1, y1 = (int(v) for v in box)
            face = np.zeros_like(inner)
            face[y0:y1, x0:x1] = True
            face &= cv2.dilate(mouth, np.ones((15, 15), np.uint8)) == 0
            faces += 1
            mouths += diff(kept[i], before[i], inner) < 2.0 < 10.0 < diff(plain[i], before[i], inner)
            assert diff(kept[i], before[i], face) > 5.0  # the rest of the face is swapped
    assert faces >= 3 * FACE_FRAMES - 2 and mouths >= faces - 2, (mouths, faces)


@pytest.mark.parametrize("masks, finder", [("occlusion", True), ("area", False)])
def test_mask_occlusion_on_the_embedded_default_runs_its_own_finder(source_photo: Path, masks: str,
                                                                   finder: bool) -> None:
    """`fast` has the classical occlusion finder off; `--mask occlusion` with the dlib engine
    turns it on for that job (the preset itself is left as it was)."""
    from stream.config import load_config
    from stream.job.swap_job import SwapJob

    cfg = load_config("fast", [f"mask.types={masks}", "engine=dlib"])
    job = SwapJob(cfg, [str(source_photo)])
    job.open()
    assert job.config.track.occlusion is finder and cfg.track.occlusion is False
    assert ("the classical swapper's own occlusion finder" in job.engines.note) is finder


def test_stats_json_reports_the_run(swapped: Path) -> None:
    rep = json.loads(swapped.with_suffix(".json").read_text())
    assert rep["frames"] == CLIP_FRAMES
    # faces that come back are found at the next detection (every 4 frames here)
    assert CLIP_FRAMES - BLANK_FRAMES - 4 < rep["frames_with_faces"] <= CLIP_FRAMES - BLANK_FRAMES
    assert rep["faces_swapped"] == 3 * rep["frames_with_faces"]
    assert set(rep["stages"]) == {"decode", "analyse", "swap", "composite", "encode"}
    # landmarks on every tracked face every frame (plus the frames where the vanished
    # faces were followed, unconfirmed, until a detection ended them)
    assert rep["faces_swapped"] <= rep["model_calls"]["landmarks"] <= rep["faces_swapped"] + 3 * 2
    assert rep["model_calls"]["detect"] < CLIP_FRAMES  # not every frame
    assert rep["model_calls"]["embed"] == 0  # 'all' mode needs no identity
    assert rep["latency"]["count"] == CLIP_FRAMES
    assert rep["peak_rss_mb"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("staged", [True, False])
def test_staged_and_serial_write_the_same_video(face_clip: Path, source_photo: Path, tmp_path: Path,
                                                swapped: Path, staged: bool) -> None:
    out = tmp_path / "again.mp4"
    args = ["swap", "--source", str(source_photo), "--input", str(face_clip), "--output", str(out),
            "--crf", "0", "--x264-preset", "ultrafast", "--detect-every", "4", "-q"]
    assert main(args + ([] if staged else ["--serial"])) == 0
    a, b = decode_all(swapped), decode_all(out)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


@pytest.mark.slow
def test_opencv_and_blas_on_their_own_threads_write_the_same_video(face_clip: Path, source_photo: Path,
                                                                   tmp_path: Path, swapped: Path) -> None:
    # pipeline.cv_threads and pipeline.blas_threads: 1 by default (the stages already share
    # the cores); 0 hands the choice back to OpenCV (one worker a core) and to numpy's BLAS
    # (the count it had before a job first set it). Only the cost may differ.
    out = tmp_path / "threads.mp4"
    args = ["swap", "--source", str(source_photo), "--input", str(face_clip), "--output", str(out),
            "--crf", "0", "--x264-preset", "ultrafast", "--detect-every", "4", "-q"]

    def blas() -> list[int]:
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    cv2.setNumThreads(-1)
    default = cv2.getNumThreads()
    set_blas_threads(0)
    blas_default = blas()
    try:
        cv2.setNumThreads(1)  # as the job before left it
        set_blas_threads(1)
        assert main(args + ["--set", "pipeline.cv_threads=0", "--set", "pipeline.blas_threads=0"]) == 0
        assert cv2.getNumThreads() == default
        assert blas() == blas_default
        a, b = decode_all(swapped), decode_all(out)
        assert len(a) == len(b) == CLIP_FRAMES
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
        assert main(args + ["--set", "pipeline.cv_threads=1"]) == 0
        assert cv2.getNumThreads() == 1
        assert blas() == [1] * len(blas_default)
    finally:
        cv2.setNumThreads(-1)
        set_blas_threads(1)


@pytest.mark.slow
def test_a_file_detected_on_a_thread_of_its_own_is_swapped_the_same_every_time(
        face_clip: Path, source_photo: Path, tmp_path: Path) -> None:
    # detect.lag: the detection runs beside the analysis, its boxes joining a fixed number of
    # frames later. The threads' timing differs between runs (and staged against serial);
    # the video must not.
    outs, reports = [], []
    for k, staged in enumerate(("true", "false", "true")):
        out = tmp_path / f"lag{k}.mp4"
        assert main(["swap", "--source", str(source_photo), "--input", str(face_clip), "--output", str(out),
                     "--crf", "0", "--x264-preset", "ultrafast", "--detect-every", "4", "-q",
                     "--set", "detect.lag=3", "--set", f"pipeline.staged={staged}",
                     "--stats-json", str(out.with_suffix(".json"))]) == 0
        outs.append(decode_all(out))
        reports.append(json.loads(out.with_suffix(".json").read_text()))
    assert len(outs[0]) == CLIP_FRAMES
    for other in outs[1:]:
        assert all(np.array_equal(x, y) for x, y in zip(outs[0], other))
    # Every face swapped from its first frame (detected in line while nothing is followed),
    # and again after the blank stretch.
    rep = reports[0]
    assert CLIP_FRAMES - BLANK_FRAMES - 4 < rep["frames_with_faces"] <= CLIP_FRAMES - BLANK_FRAMES
    assert rep["faces_swapped"] == 3 * rep["frames_with_faces"]
    diff = np.abs(decode_all(face_clip)[0].astype(np.int16) - outs[0][0].astype(np.int16)).mean(axis=2)
    assert (diff > 20).mean() > 0.01


def test_picture_in_picture_out(source_photo: Path, tmp_path: Path, identity: Identity) -> None:
    target = tmp_path / "group.png"
    cv2.imwrite(str(target), window_frame(0))
    out = tmp_path / "swapped.png"
    assert main(["swap", "--source", str(source_photo), "--input", str(target), "--output", str(out),
                 "-q"]) == 0
    before, after = cv2.imread(str(target)), cv2.imread(str(out))
    assert after.shape == before.shape
    src = cv2.imread(str(source_photo))
    src_emb = identity.embed(src, identity.boxes(src)[0])
    for box in identity.boxes(before):
        d_before = np.linalg.norm(identity.embed(before, box) - src_emb)
        d_after = np.linalg.norm(identity.embed(after, box) - src_emb)
        assert d_after < d_before - 0.05


def test_picture_without_faces_passes_through_bit_identical(source_photo: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture) -> None:
    target = tmp_path / "plain.png"
    img = np.random.default_rng(3).integers(0, 255, (240, 320, 3), dtype=np.uint8)
    cv2.imwrite(str(target), img)
    out = tmp_path / "plain_out.png"
    assert main(["swap", "--source", str(source_photo), "--input", str(target), "--output", str(out)]) == 0
    assert np.array_equal(cv2.imread(str(out)), img)
    assert "no target faces found" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("mode, expect_faces", [("largest", 1), ("reference", 1), ("mapping", 1)])
def test_selection_on_a_clip(mode: str, expect_faces: int, face_clip: Path, source_photo: Path,
                             tmp_path: Path) -> None:
    out = tmp_path / "sel.mp4"
    args = ["swap", "--source", str(source_photo), "--input", str(face_clip), "--output", str(out),
            "--select", mode, "-q", "--stats-json", str(tmp_path / "s.json")]
    if mode in ("reference", "mapping"):
        ref = tmp_path / "ref.png"
        x0, y0 = 452 - 60, 300 - 80 - 60  # the middle face of the window, from frame 0, with margin
        cv2.imwrite(str(ref), window_frame(0)[y0:y0 + 250, x0:x0 + 250])
        if mode == "reference":
            args += ["--reference", str(ref)]
        else:  # mapping: the astronaut onto that person; a second source's person is absent
            other_src, other_ref = tmp_path / "src2.png", tmp_path / "ref2.png"
            cv2.imwrite(str(other_src), cv2.flip(cv2.imread(str(source_photo)), 1))
            cv2.imwrite(str(other_ref), cv2.imread(str(source_photo)))
            args = [a for a in args if a not in ("--source", str(source_photo))]
            args += ["--map", f"{source_photo}={ref}", "--map", f"{other_src}={other_ref}"]
    assert main(args) == 0
    rep = json.loads((tmp_path / "s.json").read_text())
    assert rep["faces_swapped"] == expect_faces * rep["frames_with_faces"]
    assert rep["frames_with_faces"] > CLIP_FRAMES - BLANK_FRAMES - 12
    if mode in ("reference", "mapping"):
        # one embedding per track (two track lifetimes: before and after the blank stretch)
        assert 0 < rep["model_calls"]["embed"] <= 2 * 3


def test_a_job_runs_several_inputs_and_reports_each_run_alone(face_clip: Path, source_photo: Path,
                                                              tmp_path: Path) -> None:
    from stream.config import load_config
    from stream.job.swap_job import SwapJob

    job = SwapJob(load_config("fast", ["detect.every=4"]), [str(source_photo)])
    job.open()
    first = run_video(job, str(face_clip), str(tmp_path / "a.mp4")).report
    second = run_video(job, str(face_clip), str(tmp_path / "b.mp4")).report
    assert first["model_calls"] == second["model_calls"]
    assert first["faces_swapped"] == second["faces_swapped"] > 0
    assert probe(tmp_path / "b.mp4")["frames"] == CLIP_FRAMES
