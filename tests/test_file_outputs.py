"""Files as users have them, and outputs that never lie: every audio track carried (PCM into
MP4 becomes AAC), subtitles where the container holds them, phone rotation, B-frames in
AVI, odd sizes, atomic outputs (signals, --no-overwrite, hard links, a full disk), and an
output read back before it is called written. Inputs are made here with PyAV (and with
Debian's ffmpeg where a case needs it: subtitles, and a cross-check of rotation)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from stream.cli.main import main
from tests.fixtures import Identity, window_frame

ROOT = Path(__file__).resolve().parent.parent
FFMPEG = shutil.which("ffmpeg")
needs_ffmpeg = pytest.mark.skipif(FFMPEG is None and not os.environ.get("FACESTREAM_REQUIRE_SERVERS"),
                                  reason="Debian's ffmpeg is not installed (make test-deps)")
N = 12  # frames of each clip (faces on every one)
RATE = 48000


def faces(i: int) -> np.ndarray:
    return window_frame(i)


def write_input(path: Path, n: int = N, fps: int = 25, *, audio: tuple[str, ...] = (), bframes: int = 0,
                rotation: int = 0, size: tuple[int, int] | None = None) -> None:
    """`n` frames of three faces as H.264 (upright pictures stored turned when `rotation`:
    the display matrix says how to turn them back), plus one tone per codec in `audio`."""
    with av.open(str(path), "w") as out:
        video = out.add_stream("libx264", rate=fps)
        first = faces(0)
        stored = _stored(first, rotation) if size is None else cv2.resize(first, size)
        video.width, video.height = stored.shape[1], stored.shape[0]
        video.pix_fmt = "yuv444p" if size is not None and (size[0] % 2 or size[1] % 2) else "yuv420p"
        video.options = {"preset": "ultrafast", "crf": "18", "bf": str(bframes)}
        if rotation:
            video.set_display_rotation(rotation)
        tones = []
        for k, codec in enumerate(audio):
            tone = out.add_stream(codec, rate=RATE)
            tone.layout = "stereo"
            tones.append((tone, 330.0 * (k + 1)))
        per_frame = RATE // fps
        for i in range(n):
            picture = _stored(faces(i), rotation) if size is None else cv2.resize(faces(i), size)
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(picture), format="bgr24")
            frame.pts = i
            frame.time_base = Fraction(1, fps)
            out.mux(video.encode(frame))
            for tone, hz in tones:
                t = (np.arange(per_frame) + i * per_frame) / RATE
                wave = (0.3 * np.sin(2 * np.pi * hz * t) * 32767).astype(np.int16)
                samples = np.repeat(wave[None, :], 2, axis=0).reshape(1, -1, order="F")
                chunk = av.AudioFrame.from_ndarray(samples, format="s16", layout="stereo")
                chunk.sample_rate, chunk.pts, chunk.time_base = RATE, i * per_frame, Fraction(1, RATE)
                out.mux(tone.encode(chunk))
        out.mux(video.encode(None))
        for tone, _ in tones:
            out.mux(tone.encode(None))


def _stored(upright: np.ndarray, rotation: int) -> np.ndarray:
    """How a camera stores an upright picture whose display rotation is `rotation` (counter-
    clockwise degrees): turned the other way."""
    return np.ascontiguousarray(np.rot90(upright, k=-(rotation // 90)))


def streams(path: Path) -> list[tuple[str, str]]:
    with av.open(str(path)) as c:
        return [(s.type, s.codec_context.codec.canonical_name) for s in c.streams]


def decoded_frames(path: Path) -> list[np.ndarray]:
    """The frames as BGR, converted as the pipeline converts them (exact for each colour
    matrix and range: PyAV's own bgr24 conversion is biased by about a level)."""
    from stream.media.convert import convert_into

    out = []
    with av.open(str(path)) as c:
        for f in c.decode(video=0):
            image = np.empty((f.height, f.width, 3), np.uint8)
            convert_into(f, image, None)
            out.append(image)
    return out


def swap(tmp_path: Path, source_photo: Path, src: Path, out: Path, *extra: str) -> int:
    return main(["swap", "--source", str(source_photo), "--input", str(src), "--output", str(out),
                 "--x264-preset", "ultrafast", "-q", *extra])


def ffmpeg_reads(path: Path) -> bool:
    """Debian's ffmpeg decodes every stream of `path` without an error."""
    res = subprocess.run([FFMPEG or "ffmpeg", "-v", "error", "-i", str(path), "-map", "0", "-f", "null", "-"],
                         capture_output=True, text=True, timeout=120)
    return res.returncode == 0 and not res.stderr.strip()


# -- other streams -------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("container, audio, expect", [
    ("mkv", ("pcm_s16le", "pcm_s24le"), [("audio", "aac"), ("audio", "aac")]),  # case 1 and 12
    ("mov", ("pcm_s16le",), [("audio", "aac")]),
    ("mkv", ("aac", "mp3"), [("audio", "aac"), ("audio", "mp3")]),  # copied as they are
])
def test_every_audio_track_reaches_an_mp4_that_opens(tmp_path: Path, source_photo: Path, container: str,
                                                      audio: tuple[str, ...], expect: list,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    codecs = tuple("libmp3lame" if a == "mp3" else a for a in audio)
    src = tmp_path / f"in.{container}"
    write_input(src, audio=codecs)
    out = tmp_path / "out.mp4"
    assert swap(tmp_path, source_photo, src, out) == 0
    text = capsys.readouterr().out
    assert streams(out) == [("video", "h264"), *expect]
    if any(a.startswith("pcm") for a in audio):
        assert "transcoded for .mp4" in text
    with av.open(str(out)) as c:
        for s in c.streams.audio:  # each track lasts as long as the video
            assert abs(float(s.duration * s.time_base) - N / 25) < 0.1
    if FFMPEG:
        assert ffmpeg_reads(out)


def test_pcm_is_copied_into_containers_that_hold_it(tmp_path: Path, source_photo: Path) -> None:
    src = tmp_path / "in.mkv"
    write_input(src, audio=("pcm_s16le", "pcm_s24le"))
    for ext in ("mkv", "mov"):
        out = tmp_path / f"out.{ext}"
        assert swap(tmp_path, source_photo, src, out) == 0
        assert streams(out) == [("video", "h264"), ("audio", "pcm_s16le"), ("audio", "pcm_s24le")]


@pytest.mark.slow
@needs_ffmpeg
def test_subtitles_are_kept_where_the_container_holds_them(tmp_path: Path, source_photo: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    plain = tmp_path / "plain.mkv"
    write_input(plain, audio=("aac",))
    srt = tmp_path / "s.srt"
    srt.write_text("1\n00:00:00,000 --> 00:00:00,400\nhello\n")
    src = tmp_path / "in.mkv"
    subprocess.run([FFMPEG or "ffmpeg", "-v", "error", "-i", str(plain), "-i", str(srt), "-map", "0", "-map", "1",
                    "-c", "copy", "-c:s", "srt", str(src)], check=True, timeout=60)
    assert swap(tmp_path, source_photo, src, tmp_path / "out.mkv") == 0
    assert ("subtitle", "subrip") in streams(tmp_path / "out.mkv")
    capsys.readouterr()
    assert swap(tmp_path, source_photo, src, tmp_path / "out.mp4") == 0
    notes = capsys.readouterr().out
    assert "not carried into .mp4" in notes and "subtitle stream 2 (subrip)" in notes
    assert [t for t, _ in streams(tmp_path / "out.mp4")] == ["video", "audio"]


# -- rotation, timestamps, sizes -------------------------------------------------------------

@pytest.mark.parametrize("rotation", [90, 180, 270])
def test_a_phone_video_is_swapped_upright(tmp_path: Path, source_photo: Path, rotation: int,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "phone.mp4"
    write_input(src, rotation=rotation)
    out = tmp_path / "out.mp4"
    assert swap(tmp_path, source_photo, src, out, "--stats-json", str(tmp_path / "s.json")) == 0
    assert f"display rotation {rotation} degrees" in capsys.readouterr().out
    frames = decoded_frames(out)
    upright = faces(0)
    assert frames[0].shape == upright.shape  # written upright, no rotation left to apply
    with av.open(str(out)) as c:
        assert not next(c.decode(video=0)).rotation
    # The output is the upright picture (faces swapped): far closer to it than to any turn of it.
    diff = np.abs(frames[0].astype(int) - upright).mean()
    assert diff < 20, diff
    rep = json.loads((tmp_path / "s.json").read_text())
    assert rep["frames_with_faces"] == N  # faces are found once the frames are upright


@needs_ffmpeg
def test_rotation_matches_ffmpegs_own(tmp_path: Path) -> None:
    """The stored-turned input as ffmpeg itself turns it upright: our source agrees."""
    from stream.runtime.slot import Slot
    from stream.sources.file import FileSource

    src = tmp_path / "phone.mp4"
    write_input(src, n=2, rotation=90)
    ref = tmp_path / "ffmpeg.mp4"
    subprocess.run([FFMPEG or "ffmpeg", "-v", "error", "-i", str(src), "-c:v", "libx264", "-crf", "0", str(ref)],
                   check=True, timeout=60)
    source = FileSource(src)
    info = source.open()
    slot = Slot(0, {"image": np.empty((info.height, info.width, 3), np.uint8)})
    assert source.read_into(slot)
    theirs = decoded_frames(ref)[0]
    assert theirs.shape == slot.image.shape
    assert np.abs(theirs.astype(int) - slot.image).mean() < 2.0
    source.close()


def test_b_frames_in_avi_are_accepted_and_timed_by_order(tmp_path: Path, source_photo: Path) -> None:
    src = tmp_path / "in.avi"
    write_input(src, n=20, bframes=3)
    out = tmp_path / "out.avi"
    assert swap(tmp_path, source_photo, src, out) == 0  # case 7 ("pts must increase" before)
    with av.open(str(out)) as c:
        v = c.streams.video[0]
        assert v.average_rate == 25  # case 13: the header's rate is the video's, not the time base's
        assert sum(1 for p in c.demux(v) if p.size) == 20
    assert len(decoded_frames(out)) == 20


def test_odd_sizes_are_padded_by_a_pixel(tmp_path: Path, source_photo: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "odd.mkv"
    write_input(src, size=(641, 361))
    out = tmp_path / "out.mp4"
    assert swap(tmp_path, source_photo, src, out) == 0  # case 10: refused before
    assert "padded to 642x362" in capsys.readouterr().out
    frames = decoded_frames(out)
    assert len(frames) == N and frames[0].shape == (362, 642, 3)


# -- outputs that never lie ------------------------------------------------------------------

def test_the_output_is_read_back_before_wrote(tmp_path: Path, source_photo: Path) -> None:
    src = tmp_path / "in.mp4"
    write_input(src)
    stats = tmp_path / "s.json"
    assert swap(tmp_path, source_photo, src, tmp_path / "out.mp4", "--stats-json", str(stats)) == 0
    check = json.loads(stats.read_text())["output_check"]
    assert check["video_frames"] == N and check["streams"][0] == "video h264"


def test_no_overwrite_refuses_and_overwrite_says_it_replaced(tmp_path: Path, source_photo: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.mp4"
    write_input(src)
    out = tmp_path / "out.mp4"
    out.write_bytes(b"earlier")
    assert swap(tmp_path, source_photo, src, out, "--no-overwrite") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists already" in err and out.read_bytes() == b"earlier"
    assert swap(tmp_path, source_photo, src, out) == 0
    assert f"replaced the existing {out}" in capsys.readouterr().out
    assert len(decoded_frames(out)) == N


@pytest.mark.parametrize("kind", ["hardlink", "symlink", "same"])
def test_an_output_that_is_the_input_file_is_refused(tmp_path: Path, source_photo: Path, kind: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.mp4"
    write_input(src, n=3)
    before = src.read_bytes()
    out = {"hardlink": tmp_path / "link.mp4", "symlink": tmp_path / "sym.mp4", "same": src}[kind]
    if kind == "hardlink":
        os.link(src, out)
    elif kind == "symlink":
        out.symlink_to(src)
    assert swap(tmp_path, source_photo, src, out) == 1
    err = capsys.readouterr().err
    assert "is the input file" in err and err.count("\n") == 1 and "written so far" not in err
    assert src.read_bytes() == before  # case 8: the input survives


def _interrupted(tmp_path: Path, source_photo: Path, sig: int) -> tuple[subprocess.CompletedProcess, Path]:
    src = tmp_path / "long.mp4"
    write_input(src, n=240, audio=("aac",))
    out = tmp_path / "out.mp4"
    out.write_bytes(b"an earlier output")
    proc = subprocess.Popen([sys.executable, "-m", "stream.cli", "swap", "--source", str(source_photo),
                             "--input", str(src), "--output", str(out), "--x264-preset", "ultrafast"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    partial = None
    while time.monotonic() < deadline and partial is None:  # wait until frames are being written
        found = [p for p in tmp_path.glob(".out.mp4.partial-*") if p.stat().st_size > 50_000]
        partial = found[0] if found else None
        time.sleep(0.05)
    assert partial is not None, "the run never started writing"
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), out


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_leave_a_playable_output(tmp_path: Path, source_photo: Path, sig: int,
                                                    code: int) -> None:
    res, out = _interrupted(tmp_path, source_photo, sig)
    assert res.returncode == code, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"stopped by {signal.Signals(sig).name}" in lines[0]
    assert f"is in {out}" in lines[0]
    frames = decoded_frames(out)
    assert 0 < len(frames) < 240
    assert [t for t, _ in streams(out)] == ["video", "audio"]
    assert not list(tmp_path.glob(".out.mp4.partial-*"))


@pytest.mark.slow
def test_sigkill_never_leaves_a_broken_output(tmp_path: Path, source_photo: Path) -> None:
    res, out = _interrupted(tmp_path, source_photo, signal.SIGKILL)
    assert res.returncode == -signal.SIGKILL
    assert out.read_bytes() == b"an earlier output"  # the partial file is aside, hidden


@pytest.fixture
def small_disk(tmp_path: Path):
    folder = tmp_path / "small"
    folder.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(folder)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        if os.environ.get("FACESTREAM_REQUIRE_SERVERS"):
            pytest.fail(f"cannot mount a small tmpfs: {res.stderr.strip()}")
        pytest.skip("a small disk needs mount (root)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def test_a_full_disk_is_one_line_and_keeps_the_earlier_output(tmp_path: Path, source_photo: Path,
                                                              small_disk: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.mp4"
    write_input(src, n=60)
    out = small_disk / "out.mp4"
    out.write_bytes(b"earlier")
    assert swap(tmp_path, source_photo, src, out, "--crf", "0") == 1
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "No space left on device" in lines[0] and str(out) in lines[0]
    assert "written so far" not in lines[0]  # nothing playable was kept, so nothing is claimed
    assert out.read_bytes() == b"earlier" and sorted(p.name for p in small_disk.iterdir()) == ["out.mp4"]


def test_the_swap_still_carries_the_source_identity(tmp_path: Path, source_photo: Path) -> None:
    """The rotated, padded and transcoded paths still put the source's face in."""
    src = tmp_path / "phone.mkv"
    write_input(src, rotation=90, audio=("pcm_s16le",))
    out = tmp_path / "out.mp4"
    assert swap(tmp_path, source_photo, src, out) == 0
    judge = Identity()
    photo = cv2.imread(str(source_photo))
    source = judge.embed(photo, max(judge.boxes(photo), key=lambda b: (b[2] - b[0]) * (b[3] - b[1])))
    before = sorted(judge.distance_to(faces(N // 2), source))
    after = sorted(judge.distance_to(decoded_frames(out)[N // 2], source))
    assert len(after) == len(before) == 3
    assert np.mean(after) < np.mean(before) - 0.03  # the swapped faces moved towards the source


# -- colour ----------------------------------------------------------------------------------

def _gif(path: Path, n: int = 6) -> None:
    """A GIF of a smooth picture under an ordered (checkerboard) dither, reduced to 3-3-2 bit
    colours: pixel-to-pixel colour alternation, as palette pictures have."""
    h, w = 120, 160
    y, x = np.mgrid[0:h, 0:w]
    checker = ((x + y) % 2 * 2 - 1)[..., None] * np.array([30, -30, 30])
    with av.open(str(path), "w") as out:
        gif = out.add_stream("gif", rate=10)
        gif.width, gif.height, gif.pix_fmt = w, h, "rgb8"
        for i in range(n):
            picture = np.dstack([(x + 4 * i) % 150 + 50, y * 120 // h + 70, np.full_like(x, 90 + 10 * i)]) + checker
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(picture.clip(0, 255).astype(np.uint8)),
                                               format="bgr24")
            frame.pts = i
            out.mux(gif.encode(frame))
        out.mux(gif.encode(None))


def _tagged(path: Path, matrix: str, full_range: bool, n: int = 4) -> None:
    """Smooth faceless pictures as H.264 tagged with `matrix` and range."""
    from stream.media.convert import ColourTags, YuvFramer, apply_tags

    h, w = 180, 320
    y, x = np.mgrid[0:h, 0:w]
    picture = np.dstack([(x * 200 // w + 20), (y * 180 // h + 40), ((x + y) * 150 // (w + h) + 60)]).astype(np.uint8)
    with av.open(str(path), "w") as out:
        video = out.add_stream("libx264", rate=25)
        video.width, video.height, video.pix_fmt = w, h, "yuv420p"
        video.options = {"preset": "ultrafast", "crf": "8"}
        apply_tags(video.codec_context, ColourTags.of(matrix, full_range))
        framer = YuvFramer(w, h, matrix, full_range)
        for i in range(n):
            frame = framer.fill(picture, framer.new_frame())
            frame.pts = i
            out.mux(video.encode(frame))
        out.mux(video.encode(None))


def _means(frames: list[np.ndarray]) -> np.ndarray:
    return np.mean([f.reshape(-1, 3).mean(axis=0) for f in frames], axis=0)


def test_a_gif_keeps_its_colour(tmp_path: Path, source_photo: Path) -> None:
    src = tmp_path / "in.gif"
    _gif(src)
    out = tmp_path / "out.mp4"
    assert swap(tmp_path, source_photo, src, out, "--crf", "0") == 0  # lossless: the conversion alone
    shift = _means(decoded_frames(out)) - _means(decoded_frames(src))
    assert np.abs(shift).max() <= 1.0, shift  # case 6: 30 to 55 levels off before (2x2 chroma from one pixel)


@pytest.mark.parametrize("matrix, full_range", [("bt709", False), ("bt709", True), ("bt601", True)])
def test_colour_tags_and_levels_are_kept(tmp_path: Path, source_photo: Path, matrix: str, full_range: bool) -> None:
    from stream.media.convert import colour_tags

    src = tmp_path / "in.mp4"
    _tagged(src, matrix, full_range)
    out = tmp_path / "out.mp4"
    assert swap(tmp_path, source_photo, src, out, "--crf", "8") == 0
    theirs, ours = decoded_frames(src), decoded_frames(out)
    assert np.abs(_means(ours) - _means(theirs)).max() <= 1.0  # case 13: 1.3 levels darker before
    assert np.abs(ours[0].astype(int) - theirs[0]).mean() <= 1.5
    with av.open(str(out)) as c:
        tags = colour_tags(c.streams.video[0].codec_context)
    assert (tags.matrix, tags.full_range) == (matrix, full_range)
