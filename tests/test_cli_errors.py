"""Bad input through the real command: one line, non-zero exit, no traceback, nothing lost."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from stream.media.demo_clips import group_picture
from tests.fixtures import make_clip, probe, window_frame
from tests.fixtures.cli import assert_one_line_error, facestream

ROOT = Path(__file__).resolve().parent.parent


def _text_file(path: Path) -> Path:
    path.write_text("this is not a video\n")
    return path


def _cut_in_half(path: Path, faststart: bool) -> Path:
    full = path.with_name("full-" + path.name)
    make_clip(full, window_frame, 40, options={"movflags": "faststart"} if faststart else None)
    data = full.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _grey(path: Path) -> Path:
    cv2.imwrite(str(path), np.full((200, 200, 3), 128, np.uint8))
    return path


BAD_INPUTS = [
    ("missing", lambda d: d / "nope.mp4", "no such file"),
    ("directory", lambda d: d, "directory"),
    ("not-a-video", lambda d: _text_file(d / "fake.mp4"), "not a readable media file"),
    ("truncated-index-at-end", lambda d: _cut_in_half(d / "cut.mp4", False), "not a readable media file"),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,make,needle", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_video(tmp_path: Path, source_photo: Path, name: str, make, needle: str) -> None:
    bad = make(tmp_path)
    res = facestream("swap", "--source", str(source_photo), "--input", str(bad),
                     "--output", str(tmp_path / "out.mp4"))
    assert_one_line_error(res, str(bad), needle)


@pytest.mark.slow
def test_truncated_video_keeps_what_decoded(tmp_path: Path, source_photo: Path) -> None:
    bad = _cut_in_half(tmp_path / "cut.mp4", True)
    out = tmp_path / "out.mp4"
    res = facestream("swap", "--source", str(source_photo), "--input", str(bad), "--output", str(out))
    assert_one_line_error(res, str(bad), "ends early")
    assert 0 < probe(out)["frames"] < 40  # what was written plays


BAD_SOURCES = [
    ("missing", lambda d: d / "nobody.png", "no such file"),
    ("no-face", lambda d: _grey(d / "grey.png"), "no face found"),
    ("not-an-image", lambda d: _text_file(d / "face.jpg"), "not"),
]


@pytest.mark.parametrize("name,make,needle", BAD_SOURCES, ids=[b[0] for b in BAD_SOURCES])
def test_bad_source_photo(tmp_path: Path, face_clip: Path, name: str, make, needle: str) -> None:
    bad = make(tmp_path)
    res = facestream("swap", "--source", str(bad), "--input", str(face_clip),
                     "--output", str(tmp_path / "out.mp4"))
    assert_one_line_error(res, str(bad), needle)


@pytest.mark.slow
def test_source_with_several_faces_uses_the_largest(tmp_path: Path, face_clip: Path) -> None:
    src = tmp_path / "group.jpg"
    cv2.imwrite(str(src), group_picture())
    out = tmp_path / "out.mp4"
    res = facestream("swap", "--source", str(src), "--input", str(face_clip), "--output", str(out), "-q")
    assert res.returncode == 0, res.stderr
    assert "has 6 faces; using the largest" in res.stdout
    assert probe(out)["frames"] == probe(face_clip)["frames"]


@pytest.mark.slow
def test_video_without_faces_passes_through(tmp_path: Path, source_photo: Path) -> None:
    clip = tmp_path / "plain.mp4"
    make_clip(clip, n=20)
    out = tmp_path / "out.mp4"
    res = facestream("swap", "--source", str(source_photo), "--input", str(clip), "--output", str(out))
    assert res.returncode == 0, res.stderr
    assert "no target faces found: the input passed through unchanged" in res.stdout
    assert probe(out)["frames"] == 20


@pytest.mark.parametrize("output", ["/nonexistent-dir/out.mp4", "{tmp}", "{tmp}/out.xyz"])
def test_unwritable_output(tmp_path: Path, source_photo: Path, face_clip: Path, output: str) -> None:
    out = output.format(tmp=tmp_path)
    res = facestream("swap", "--source", str(source_photo), "--input", str(face_clip), "--output", out)
    assert_one_line_error(res, out)


@pytest.mark.parametrize("args,needle", [
    (["--set", "detect.every=0"], "detect.every"),
    (["--set", "nosuch.field=1"], "nosuch"),
    (["--config", "nosuchpreset"], "nosuchpreset"),
    (["--select", "reference"], "reference photo"),
    (["--map", "a.png"], "SOURCE=REFERENCE"),
])
def test_bad_configuration(tmp_path: Path, source_photo: Path, face_clip: Path, args: list[str],
                           needle: str) -> None:
    res = facestream("swap", "--source", str(source_photo), "--input", str(face_clip),
                     "--output", str(tmp_path / "o.mp4"), *args)
    assert_one_line_error(res, needle)


def test_odd_sized_video_is_padded_not_refused(tmp_path: Path, source_photo: Path) -> None:
    import av

    clip = tmp_path / "odd.mkv"
    with av.open(str(clip), "w") as out:  # FFV1 (lossless) takes odd sizes; H.264 4:2:0 cannot
        stream = out.add_stream("ffv1", rate=25)
        stream.width, stream.height, stream.pix_fmt = 321, 241, "bgr0"
        for i in range(5):
            frame = av.VideoFrame.from_ndarray(np.full((241, 321, 3), 40 * i, np.uint8), format="bgr24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    res = facestream("swap", "--source", str(source_photo), "--input", str(clip),
                     "--output", str(tmp_path / "o.mp4"))
    assert res.returncode == 0, res.stderr
    assert "321x241 picture is padded to 322x242" in res.stdout
    with av.open(str(tmp_path / "o.mp4")) as c:
        frames = [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]
    assert len(frames) == 5 and frames[0].shape == (242, 322, 3)
    assert abs(int(frames[4][120, 160, 1]) - 160) <= 3  # the picture itself is unchanged


def test_output_onto_the_input_is_refused(tmp_path: Path, source_photo: Path, face_clip: Path) -> None:
    clip = tmp_path / "mine.mp4"
    clip.write_bytes(face_clip.read_bytes())
    res = facestream("swap", "--source", str(source_photo), "--input", str(clip), "--output", str(clip))
    assert_one_line_error(res, "is the input")
    assert clip.read_bytes() == face_clip.read_bytes()


@pytest.mark.slow
def test_picture_to_video_is_refused(tmp_path: Path, source_photo: Path) -> None:
    res = facestream("swap", "--source", str(source_photo), "--input", str(source_photo),
                     "--output", str(tmp_path / "o.mp4"))
    assert_one_line_error(res, "picture output")


@pytest.mark.slow
def test_corruption_mid_stream_stops_with_a_playable_output(tmp_path: Path, source_photo: Path) -> None:
    clip = tmp_path / "clip.mkv"
    make_clip(clip, window_frame, 60, audio=False, options=None)
    data = bytearray(clip.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 20000] = np.random.default_rng(11).bytes(20000)  # garbage mid-stream
    clip.write_bytes(bytes(data))
    out = tmp_path / "out.mp4"
    res = facestream("swap", "--source", str(source_photo), "--input", str(clip), "--output", str(out),
                     "-q")  # no progress lines: stderr holds the error alone
    # mkv has no frame count: the demuxer just stops at the damage, and only the missing
    # frames (against duration x rate) tell that the input was cut short
    assert_one_line_error(res, str(clip), "ends early")
    assert 0 < probe(out)["frames"] < 60  # what was decoded is written and plays


@pytest.mark.slow
def test_ctrl_c_finalises_the_output(tmp_path: Path, source_photo: Path) -> None:
    clip = tmp_path / "long.mp4"
    make_clip(clip, window_frame, 240)
    out = tmp_path / "out.mp4"
    proc = subprocess.Popen([sys.executable, "-m", "stream.cli", "swap", "--source", str(source_photo),
                             "--input", str(clip), "--output", str(out), "--x264-preset", "ultrafast"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60

    def writing() -> bool:  # the output is written under a hidden partial name until it is final
        return any(p.stat().st_size >= 20_000 for p in tmp_path.glob(".out.mp4.partial-*"))

    while time.monotonic() < deadline and not writing():
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    frames = probe(out)["frames"]
    assert 0 < frames < 240


def test_the_demo_face_needs_its_extra_even_when_a_copy_is_left_in_tmp(monkeypatch: pytest.MonkeyPatch) -> None:
    """`serve` without --source offers the demo face only where scikit-image is installed: a
    picture an earlier run left in the temp folder is no stand-in for the missing package."""
    import sys

    from stream.cli.demo import demo_face
    from stream.media.demo_clips import DemoUnavailable

    assert Path(demo_face()).is_file()  # with the extra: written (or already there)
    monkeypatch.setitem(sys.modules, "skimage", None)  # as without the extra
    with pytest.raises(DemoUnavailable, match="scikit-image"):
        demo_face()


def test_a_file_swap_loads_no_server_package(tmp_path: Path, source_photo: Path, face_clip: Path) -> None:
    # asyncio (with ssl) and aiohttp were 18 MB of a one-face swap's peak memory, for a
    # command that serves nothing: they load with `live` and `serve` only.
    script = ("import sys; from stream.cli.main import main; "
              f"rc = main(['swap', '--source', {str(source_photo)!r}, '--input', {str(face_clip)!r}, "
              f"'--output', {str(tmp_path / 'out.mp4')!r}, '-q']); "
              "print(rc, sorted(m for m in ('asyncio', 'ssl', 'aiohttp', 'aiortc') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.stdout.strip().splitlines()[-1] == "0 []", res.stdout + res.stderr
