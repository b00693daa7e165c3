"""File source and sink, and still images: timing, audio, pixels, errors, aborted runs."""
from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from stream.config import EncodeConfig
from stream.errors import SinkError, SourceError
from stream.media.image_io import read_image, write_image
from stream.media.video_info import VideoInfo
from stream.runtime.slot import Slot
from stream.sinks.file import FileSink
from stream.sources.file import FileSource
from tests.fixtures import make_clip, pattern_frame, probe, window_frame

W, H = 160, 96


def frame_maker(seed: int):
    return lambda i: pattern_frame(i, W, H, seed=seed)


def image_slot(info: VideoInfo) -> Slot:
    return Slot(0, {"image": np.zeros((info.height, info.width, 3), np.uint8)})


def transcode(src: Path, dst: Path, encode: EncodeConfig, audio: bool = True,
              stop_after: int | None = None, exc: type[BaseException] = RuntimeError) -> list[np.ndarray]:
    """Source -> sink; with `stop_after`, raise `exc` after that many frames (close still runs)."""
    source = FileSource(src)
    info = source.open()
    slot = image_slot(info)
    sink = FileSink(dst, info, encode, audio_from=src if audio else None)
    sink.open()
    written: list[np.ndarray] = []
    try:
        while source.read_into(slot):
            sink.write(slot)
            written.append(slot.image.copy())
            if stop_after is not None and len(written) == stop_after:
                raise exc("simulated failure")
    finally:
        sink.close()
        source.close()
    return written


def decoded_images(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [f.to_ndarray(format="bgr24") for f in container.decode(video=0)]


ROUND_TRIPS = [
    # name, make_clip kwargs, encoder preset
    ("cfr30-audio", dict(fps=30, audio=True), "veryfast"),
    ("cfr25-audio", dict(fps=25, audio=True), "ultrafast"),
    ("vfr-audio", dict(vfr=True, audio=True), "veryfast"),
    ("vfr-no-audio", dict(vfr=True, audio=False), "medium"),
    ("cfr-no-audio", dict(audio=False), "veryfast"),
]


@pytest.mark.parametrize("name,kwargs,preset", ROUND_TRIPS, ids=[r[0] for r in ROUND_TRIPS])
def test_round_trip_keeps_timing_audio_and_pixels(tmp_path: Path, name: str, kwargs: dict,
                                                  preset: str) -> None:
    src, dst = tmp_path / "in.mp4", tmp_path / "out.mp4"
    n = 45
    make_clip(src, frame_maker(seed=7), n, seed=7, **kwargs)
    written = transcode(src, dst, EncodeConfig(preset=preset, crf=18))
    before, after = probe(src), probe(dst)

    assert len(written) == n
    assert after["frames"] == before["frames"] == n
    assert after["times"] == before["times"]  # every pts, exactly (also VFR)
    assert after["video_duration"] == pytest.approx(before["video_duration"], abs=1e-6)
    if kwargs.get("audio", True):
        assert after["audio"] is not None
        assert after["audio"]["codec"] == before["audio"]["codec"] == "aac"
        assert after["audio"]["packets"] == before["audio"]["packets"]
        assert after["audio"]["payloads"] == before["audio"]["payloads"]  # copied, not re-encoded
        assert after["audio"]["duration"] == pytest.approx(before["audio"]["duration"], abs=0.03)
    else:
        assert after["audio"] is None
    for ours, theirs in zip(decoded_images(dst), written):
        assert np.abs(ours.astype(np.int16) - theirs).mean() < 3.0


def test_round_trip_pixels_close_to_original(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.mp4", tmp_path / "out.mp4"
    make = frame_maker(seed=3)
    make_clip(src, make, 20, audio=False)
    transcode(src, dst, EncodeConfig(crf=18))
    # Two lossy H.264 encodes (the clip's and ours) and their colour conversions: the error
    # depends on the CPU's SIMD paths in x264 and swscale. The worst frame's mean was under
    # 4.0 on the Xeons of November; on an AMD EPYC with AVX-512 it is 3.93 or 4.03 (the same
    # process, run to run). A conversion gone wrong (channels swapped, a range or matrix
    # mismatch, a frame out of order) is tens.
    for i, image in enumerate(decoded_images(dst)):
        assert np.abs(image.astype(np.int16) - make(i)).mean() < 5.0


def test_source_info_and_colour_match_pyav(tmp_path: Path) -> None:
    src = tmp_path / "in.mp4"
    make_clip(src, frame_maker(seed=1), 12, fps=30, audio=True)
    source = FileSource(src)
    info = source.open()
    assert (info.width, info.height, info.rate, info.frames) == (W, H, Fraction(30), 12)
    assert info.has_audio and info.duration == pytest.approx(12 / 30, abs=1e-6)
    slot = image_slot(info)
    for reference in decoded_images(src):
        assert source.read_into(slot)
        assert np.abs(slot.image.astype(np.int16) - reference).max() <= 3
    assert not source.read_into(slot)
    source.close()


def test_one_decoder_thread_gives_the_same_pictures(tmp_path: Path) -> None:
    src = tmp_path / "in.mp4"
    make_clip(src, frame_maker(seed=5), 14, audio=False)
    pictures = {}
    for threads in (0, 1, 3):
        source = FileSource(src, threads=threads)
        info = source.open()
        count = source._stream.codec_context.thread_count
        assert count == threads if threads else count >= 1  # 0: FFmpeg's choice, made at open
        slot, got = image_slot(info), []
        while source.read_into(slot):
            got.append(slot.image.copy())
        source.close()
        pictures[threads] = np.stack(got)
    assert len(pictures[0]) == 14
    assert np.array_equal(pictures[0], pictures[1]) and np.array_equal(pictures[0], pictures[3])


def test_codec_threads_auto_is_one_for_small_pictures_on_few_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    from stream.runtime import cores
    hd, full_hd = 1280 * 720, 1920 * 1080
    for n, pixels, auto in ((1, hd, 1), (2, hd, 1), (4, 640 * 360, 1), (2, full_hd, 0), (5, hd, 0), (16, hd, 0)):
        monkeypatch.setattr(cores, "usable_cores", lambda n=n: n)
        assert cores.codec_threads(0, pixels) == auto  # 0: the codec's own choice
        assert cores.codec_threads(3, pixels) == 3  # asked for: as asked
    monkeypatch.undo()
    assert cores.usable_cores() >= 1


def test_encoder_threads_follow_the_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stream.runtime import cores
    src = tmp_path / "in.mp4"
    make_clip(src, frame_maker(seed=6), 4, audio=False)
    info = FileSource(src).open()
    for n, threads, expect in ((2, 0, 1), (8, 0, 0), (2, 3, 3)):
        monkeypatch.setattr(cores, "usable_cores", lambda n=n: n)
        sink = FileSink(tmp_path / f"out-{n}-{threads}.mp4", info, EncodeConfig(preset="ultrafast", threads=threads))
        sink.open()
        assert sink._video.codec_context.thread_count == expect
        sink.close()


def test_decoder_threads_follow_the_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As x264's: one thread on 2 cores for a picture up to 720p (the stages fill the cores),
    # FFmpeg's frame and slice threads on more, as many as asked for when asked.
    from stream.runtime import cores
    src = tmp_path / "in.mp4"
    make_clip(src, frame_maker(seed=6), 4, audio=False)
    for n, threads, one in ((2, 0, True), (8, 0, False), (2, 3, False)):
        monkeypatch.setattr(cores, "usable_cores", lambda n=n: n)
        source = FileSource(src, threads=threads)
        source.open()
        stream = source._stream
        if one:  # one thread, no frame threads
            assert stream.codec_context.thread_count == 1 and stream.thread_type.name != "AUTO"
        else:  # frame and slice threads: FFmpeg's count (its own cores), or the one asked for
            assert stream.thread_type.name == "AUTO"
            assert threads == 0 or stream.codec_context.thread_count == threads
        source.close()


def test_a_file_cut_short_ends_early_in_one_decoder_thread_too(tmp_path: Path) -> None:
    # Cut mid-packet: FFmpeg's frame threads drop the last, partial packet, a decoder in one
    # thread fails on it (PyAV raises there); either way the frames that decode are read and
    # the file is said to end early, not to be damaged.
    full = tmp_path / "full.mp4"
    make_clip(full, window_frame, 40, options={"movflags": "faststart"})
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    read = {}
    for threads in (1, 3):
        source = FileSource(cut, threads=threads)
        slot = image_slot(source.open())
        while source.read_into(slot):
            pass
        read[threads] = source.frames_read
        assert source.shortfall is not None and "ends early" in source.shortfall
        source.close()
    assert 0 < read[1] < 40 and read[1] == read[3]


def test_read_into_reuses_the_buffer_and_stamps_slots(tmp_path: Path) -> None:
    src = tmp_path / "in.mp4"
    pts = make_clip(src, frame_maker(seed=2), 10, vfr=True, audio=False)
    source = FileSource(src, threads=1)
    info = source.open()
    slot = image_slot(info)
    pointer = slot.image.__array_interface__["data"][0]
    seqs, stamps, times = [], [], []
    while source.read_into(slot):
        assert slot.image.__array_interface__["data"][0] == pointer
        seqs.append(slot.seq)
        stamps.append(slot.pts * slot.time_base)
        times.append(slot.capture_time)
    assert seqs == list(range(10)) and source.frames_read == 10
    assert stamps == [Fraction(p, 1000) for p in pts]
    assert times == sorted(times)
    source.close()
    source.close()  # idempotent


def _write_text(path: Path) -> Path:
    path.write_text("this is not a video\n" * 50)
    return path


def _write_audio_only(path: Path) -> Path:
    with av.open(str(path), "w") as out:
        stream = out.add_stream("aac", rate=48000)
        stream.layout = "mono"
        samples = np.zeros((1, 1024), np.float32)
        for i in range(10):
            frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout="mono")
            frame.sample_rate, frame.pts = 48000, i * 1024
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


def _truncated(path: Path, options: dict[str, str] | None = None) -> Path:
    full = path.with_name("full-" + path.name)
    make_clip(full, frame_maker(seed=4), 60, options=options)
    data = full.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


BAD_SOURCES = [
    ("missing", lambda d: d / "nope.mp4", "no such file"),
    ("directory", lambda d: d, "directory"),
    ("text-as-mp4", lambda d: _write_text(d / "fake.mp4"), "not a readable media file"),
    ("truncated-moov-at-end", lambda d: _truncated(d / "cut.mp4"), "not a readable media file"),
    ("audio-only", lambda d: _write_audio_only(d / "tone.m4a"), "no video stream"),
]


@pytest.mark.parametrize("name,make,message", BAD_SOURCES, ids=[b[0] for b in BAD_SOURCES])
def test_source_errors_are_one_line(tmp_path: Path, name: str, make, message: str) -> None:
    path = make(tmp_path)
    with pytest.raises(SourceError) as err:
        FileSource(path).open()
    text = str(err.value)
    assert "\n" not in text and str(path) in text and message in text


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_source(tmp_path: Path) -> None:
    src = tmp_path / "in.mp4"
    make_clip(src, frame_maker(seed=0), 5, audio=False)
    src.chmod(0)
    with pytest.raises(SourceError, match="permission"):
        FileSource(src).open()


def test_truncated_faststart_returns_the_frames_that_decode(tmp_path: Path) -> None:
    path = _truncated(tmp_path / "cut.mp4", {"movflags": "faststart"})
    source = FileSource(path)
    info = source.open()  # the index is at the front, so the header reads
    assert info.frames == 60
    slot = image_slot(info)
    try:
        while source.read_into(slot):
            pass
    except SourceError as exc:  # a decode error is fine too, as long as it is ours
        assert str(path) in str(exc) and "\n" not in str(exc)
    assert 0 < source.frames_read < 60
    source.close()


def test_corrupt_middle_raises_source_error_with_frame_number(tmp_path: Path) -> None:
    path = tmp_path / "bad.mp4"
    make_clip(path, frame_maker(seed=5), 60, audio=False)
    data = bytearray(path.read_bytes())
    start = len(data) // 3
    data[start:start + 5000] = np.random.default_rng(1).integers(0, 256, 5000, np.uint8).tobytes()
    path.write_bytes(bytes(data))
    source = FileSource(path)
    slot = image_slot(source.open())
    with pytest.raises(SourceError, match=r"decoding failed at frame \d+") as err:
        while source.read_into(slot):
            pass
    assert str(path) in str(err.value) and source.frames_read > 0
    source.close()


BAD_SINKS = [
    ("missing-folder", lambda d: d / "no" / "out.mp4", "does not exist"),
    ("directory", lambda d: d, "directory"),
    ("unknown-extension", lambda d: d / "out.qqq", "cannot be written"),
]


@pytest.mark.parametrize("name,make,message", BAD_SINKS, ids=[b[0] for b in BAD_SINKS])
def test_sink_errors_are_one_line(tmp_path: Path, name: str, make, message: str) -> None:
    path = make(tmp_path)
    info = VideoInfo(W, H, Fraction(30), Fraction(1, 30), 10, 1 / 3)
    with pytest.raises(SinkError) as err:
        FileSink(path, info, EncodeConfig()).open()
    text = str(err.value)
    assert "\n" not in text and str(path) in text and message in text


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_folder(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    info = VideoInfo(W, H, Fraction(30), Fraction(1, 30), 10, 1 / 3)
    with pytest.raises(SinkError, match="permission"):
        FileSink(folder / "out.mp4", info, EncodeConfig()).open()


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
@pytest.mark.parametrize("stop_after", [1, 17])
def test_aborted_run_leaves_a_playable_file(tmp_path: Path, exc: type[BaseException],
                                             stop_after: int) -> None:
    src, dst = tmp_path / "in.mp4", tmp_path / "out.mp4"
    make_clip(src, frame_maker(seed=6), 40, audio=True)
    with pytest.raises(exc):
        transcode(src, dst, EncodeConfig(), stop_after=stop_after, exc=exc)
    before, after = probe(src), probe(dst)
    assert after["frames"] == stop_after
    assert after["times"] == before["times"][:stop_after]
    assert after["audio"] is not None  # audio up to the last video frame, not past it
    assert 0 < after["audio"]["packets"] < before["audio"]["packets"]
    assert after["audio"]["duration"] <= after["video_duration"] + 0.05


def test_sink_close_is_idempotent_and_write_after_close_fails(tmp_path: Path) -> None:
    info = VideoInfo(W, H, Fraction(30), Fraction(1, 30), 3, 0.1)
    sink = FileSink(tmp_path / "out.mp4", info, EncodeConfig())
    sink.open()
    slot = Slot(0, {"image": pattern_frame(0, W, H)})
    for i in range(3):
        slot.seq, slot.pts, slot.time_base = i, i, Fraction(1, 30)
        sink.write(slot)
    sink.close()
    sink.close()
    assert sink.frames_written == 3 and probe(tmp_path / "out.mp4")["frames"] == 3
    with pytest.raises(SinkError):
        sink.write(slot)


@pytest.mark.parametrize("suffix", [".png", ".bmp", ".jpg"])
def test_image_round_trip(tmp_path: Path, suffix: str) -> None:
    image = pattern_frame(0, 64, 48, seed=9)
    path = tmp_path / f"pic{suffix}"
    write_image(path, image)
    back = read_image(path)
    assert back.shape == image.shape and back.dtype == np.uint8
    tolerance = 8.0 if suffix == ".jpg" else 0.0
    assert np.abs(back.astype(np.int16) - image).mean() <= tolerance


BAD_IMAGES = [
    ("read-missing", lambda d: read_image(d / "nope.png"), SourceError, "no such file"),
    ("read-not-image", lambda d: read_image(_write_text(d / "x.png")), SourceError, "not an image"),
    ("read-directory", lambda d: read_image(d), SourceError, "directory"),
    ("write-unknown-ext", lambda d: write_image(d / "x.qqq", pattern_frame(0)), SinkError,
     "unknown image extension"),
    ("write-missing-folder", lambda d: write_image(d / "no" / "x.png", pattern_frame(0)), SinkError,
     "does not exist"),
    ("write-directory", lambda d: write_image(d, pattern_frame(0)), SinkError, "directory"),
]


@pytest.mark.parametrize("name,call,error,message", BAD_IMAGES, ids=[b[0] for b in BAD_IMAGES])
def test_image_errors(tmp_path: Path, name: str, call, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message) as err:
        call(tmp_path)
    assert "\n" not in str(err.value)
