"""HDR in, HDR or honest SDR out: a 10-bit HDR10 input stays 10-bit with its tags and
mastering metadata (ffprobe reads them back), --tone-map and 8-bit encoders give BT.709 SDR
tagged so, close to FFmpeg's own tone map, and a live run from an HDR camera says it
tone-mapped. The tone map itself is checked against a float64 one written from the formulas."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from stream.cli.main import main
from stream.media.convert import convert_into
from stream.media.deep import DeepFramer, deep_buffers, keep_planes
from stream.media.dynamic_range import AS_IS, DEEP, TONE_MAP, plan_file
from stream.media.hdr import Dynamic, dynamic_of, encoder_hdr_options
from stream.media.tone_map import ToneMapper
from tests.fixtures.hdr import (
    MASTERING,
    MAX_CLL,
    MAX_FALL,
    graded,
    luma709,
    planes10,
    pq_encode,
    reference_tone_map,
    write_hdr_clip,
    yuv10_frame,
)
from tests.fixtures.rtsp import Publisher, require_relay, running_relay

FFMPEG = shutil.which("ffmpeg")
needs_ffmpeg = pytest.mark.skipif(FFMPEG is None and not os.environ.get("FACESTREAM_REQUIRE_SERVERS"),
                                  reason="Debian's ffmpeg is not installed (make test-deps)")
SIZE = (480, 272)
FRAMES = 8


def face_frames(n: int = FRAMES) -> list[np.ndarray]:
    from stream.media.demo_clips import pan_zoom_frames, single_face_picture

    picture, centre = single_face_picture()
    return list(pan_zoom_frames(picture, n, SIZE, zoom=(1.8, 2.0), centre=centre, sweep=20.0))


@pytest.fixture(scope="module")
def hdr_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hdr") / "hdr10.mp4"
    write_hdr_clip(path, face_frames())
    return path


def first_frame(path: Path) -> av.VideoFrame:
    with av.open(str(path)) as container:
        return next(container.decode(video=0))


def ffprobe(path: Path) -> dict:
    out = subprocess.run(["ffprobe", "-v", "error", "-print_format", "json", "-select_streams", "v:0",
                          "-show_streams", "-show_frames", "-read_intervals", "%+#1", str(path)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def side_data(probe: dict) -> dict[str, dict]:
    return {d["side_data_type"]: d for d in probe["frames"][0].get("side_data_list", [])}


# --- the tone map ---------------------------------------------------------------------


def test_tone_map_matches_the_float_reference() -> None:
    picture = face_frames(1)[0]
    frame = yuv10_frame(graded(picture))
    dynamic = dynamic_of(frame)
    assert dynamic.hdr and dynamic.deep and dynamic.describe() == "HDR (PQ, BT.2020, 10-bit)"
    image = np.empty((SIZE[1], SIZE[0], 3), np.uint8)
    ToneMapper(Dynamic(bits=10, transfer=16, primaries=9, light=dynamic_of(frame).light), *SIZE)(frame, image)
    mine = image[..., ::-1] / 255.0
    reference = reference_tone_map(frame, 1000.0)  # no metadata on the frame: the 1000 cd/m² default
    assert abs(luma709(mine).mean() - luma709(reference).mean()) < 0.01
    assert np.median(np.abs(mine - reference)) * 255 < 1.0
    # Highlights are compressed, not clipped: the 203-1000 cd/m² ramp of the top rows rises.
    ramp = luma709(mine[2, 10:-10])
    assert np.all(np.diff(ramp[::20]) > 0) and ramp[-1] < 0.999


def test_hlg_reference_white_lands_where_pq_puts_203_nits() -> None:
    """HLG's 75% signal is BT.2408's reference white, 203 cd/m² on a 1000 cd/m² display:
    the HLG and PQ paths (each with its own curve to light) must agree there."""
    grey = np.full((16, 16, 3), 0.75)
    pq_grey = np.full((16, 16, 3), float(pq_encode(np.array(203.0))))
    hlg = np.empty((16, 16, 3), np.uint8)
    pq = np.empty((16, 16, 3), np.uint8)
    ToneMapper(Dynamic(bits=10, transfer=18, primaries=9), 16, 16)(yuv10_frame(grey, transfer=18), hlg)
    ToneMapper(Dynamic(bits=10, transfer=16, primaries=9), 16, 16)(yuv10_frame(pq_grey), pq)
    assert 100 < int(pq[8, 8, 1]) < 200  # a mid grey, well off both ends
    assert np.abs(hlg.astype(int) - pq.astype(int)).max() <= 1


# --- the plan -------------------------------------------------------------------------

HDR10 = Dynamic(bits=10, transfer=16, primaries=9, colorspace=9, color_range=1, pix_fmt="yuv420p10le")
SDR8 = Dynamic()
SDR10 = Dynamic(bits=10, transfer=1, primaries=1, colorspace=1, color_range=1, pix_fmt="yuv420p10le")
HDR422 = Dynamic(bits=10, transfer=18, primaries=9, pix_fmt="yuv422p10le")


@pytest.mark.parametrize(("dynamic", "codec", "tone_map", "even", "mode", "chosen", "said"), [
    (SDR8, "auto", False, True, AS_IS, "libx264", ""),
    (SDR8, "auto", True, True, AS_IS, "libx264", "not HDR; nothing to tone-map"),
    (HDR10, "auto", False, True, DEEP, "libx265", "HDR (PQ, BT.2020, 10-bit) kept: HEVC Main10"),
    (HDR10, "libsvtav1", False, True, DEEP, "libsvtav1", "AV1 10-bit"),
    (HDR10, "auto", True, True, TONE_MAP, "libx264", "as --tone-map asks"),
    (HDR10, "libx264", False, True, TONE_MAP, "libx264", "libx264 writes 8 bits"),
    (HDR10, "auto", False, False, TONE_MAP, "libx264", "odd picture size"),
    (HDR422, "auto", False, True, TONE_MAP, "libx264", "HDR (HLG, BT.2020, 10-bit) input tone-mapped"),
    (SDR10, "auto", False, True, DEEP, "libx265", "SDR, 10-bit kept"),
    (SDR10, "libx264", True, True, AS_IS, "libx264", "written 8-bit"),
])
def test_plan(dynamic: Dynamic, codec: str, tone_map: bool, even: bool, mode: str, chosen: str, said: str) -> None:
    plan = plan_file(dynamic, codec, tone_map, even)
    assert (plan.mode, plan.codec) == (mode, chosen)
    assert said in " ".join(plan.notes)
    if mode == TONE_MAP:
        assert "tagged BT.709" in plan.notes[-1]


def test_hdr10_metadata_reads_back_and_goes_into_the_encoders(hdr_clip: Path) -> None:
    dynamic = dynamic_of(first_frame(hdr_clip))
    assert dynamic.mastering is not None and dynamic.light is not None
    assert dynamic.mastering.x265() == MASTERING.x265()
    assert dynamic.mastering.max_nits == MASTERING.max_nits and dynamic.mastering.min_nits == MASTERING.min_nits
    assert (dynamic.light.max_cll, dynamic.light.max_fall) == (MAX_CLL, MAX_FALL)
    assert dynamic.peak_nits == MAX_CLL
    x265 = encoder_hdr_options("libx265", dynamic)["x265-params"]
    assert f"master-display={MASTERING.x265()}" in x265 and f"max-cll={MAX_CLL},{MAX_FALL}" in x265
    assert "mastering-display=G(0.26500,0.69000)" in encoder_hdr_options("libsvtav1", dynamic)["svtav1-params"]
    assert encoder_hdr_options("libx265", SDR10) == {}


# --- the 10-bit path ------------------------------------------------------------------


def test_deep_framer_keeps_untouched_samples_and_converts_changed_ones() -> None:
    w, h = 64, 48
    rng = np.random.default_rng(5)
    frame = yuv10_frame(rng.uniform(0.1, 0.8, (h, w, 3)))
    buffers = {k: np.empty(s, t) for k, (s, t) in deep_buffers(h, w).items()}
    keep_planes(frame, buffers["deep"])
    before = np.empty((h, w, 3), np.uint8)
    convert_into(frame, before, None)
    framer = DeepFramer(w, h, colorspace=9, full_range=False)
    same = framer.fill(before.copy(), before, buffers["deep"])
    for kept, original in zip(planes10(same), planes10(frame)):
        assert np.array_equal(kept, original)
    swapped = before.copy()
    swapped[10:20, 30:44] = (40, 200, 90)  # a patch the swap changed (BGR)
    out = planes10(framer.fill(swapped, before, buffers["deep"]))
    original = planes10(frame)
    assert framer.changed_pixels == 10 * 14
    outside = np.ones((h, w), bool)
    outside[10:20, 30:44] = False
    assert np.array_equal(out[0][outside], original[0][outside])
    # BT.2020 limited 10-bit of (R, G, B) = (90, 200, 40) / 255.
    r, g, b = 90 / 255, 200 / 255, 40 / 255
    y = 0.2627 * r + 0.6780 * g + 0.0593 * b
    assert np.all(out[0][10:20, 30:44] == round(64 + 876 * y))
    assert np.all(out[1][5:10, 15:22] == round(512 + 896 * (b - y) / (2 * (1 - 0.0593))))
    assert np.all(out[2][5:10, 15:22] == round(512 + 896 * (r - y) / (2 * (1 - 0.2627))))
    assert np.array_equal(out[1][:4], original[1][:4])


@pytest.mark.slow
@needs_ffmpeg
def test_hdr10_input_stays_hdr10(hdr_clip: Path, source_photo: Path, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "swapped.mp4"
    code = main(["swap", "--source", str(source_photo), "-i", str(hdr_clip), "-o", str(out), "-q",
                 "--stats-json", str(tmp_path / "stats.json")])
    said = capsys.readouterr()
    assert code == 0, said.err
    assert "HDR (PQ, BT.2020, 10-bit) kept: HEVC Main10 (libx265)" in said.out + said.err
    probe, given = ffprobe(out), ffprobe(hdr_clip)
    stream = probe["streams"][0]
    assert (stream["codec_name"], stream["pix_fmt"], stream["codec_tag_string"]) == ("hevc", "yuv420p10le", "hvc1")
    for tag in ("color_space", "color_primaries", "color_transfer", "color_range"):
        assert stream[tag] == given["streams"][0][tag], tag
    assert (stream["color_space"], stream["color_transfer"]) == ("bt2020nc", "smpte2084")
    assert int(stream["nb_frames"]) == FRAMES
    ours, theirs = side_data(probe), side_data(given)
    for kind in ("Mastering display metadata", "Content light level metadata"):
        assert ours[kind] == theirs[kind], kind
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["dynamic_range"] == {"input": "HDR (PQ, BT.2020, 10-bit)", "output": "deep", "codec": "libx265"}
    assert stats["faces_swapped"] >= FRAMES // 2  # found in the PQ code values (6 of 8; tone-mapped: 6 too)
    # The samples are the input's outside the face (up to the encoder's loss), new on it.
    with av.open(str(out)) as a, av.open(str(hdr_clip)) as b:
        pairs = list(zip(a.decode(video=0), b.decode(video=0)))
    y_out, y_in = (planes10(f)[0].astype(int) for f in pairs[3])
    changed = np.abs(y_out - y_in) > 24
    rows, cols = np.nonzero(changed)
    assert changed.sum() > 400, "the face was not swapped"
    box = np.zeros_like(changed)
    box[rows.min():rows.max() + 1, cols.min():cols.max() + 1] = True
    assert np.abs(y_out - y_in)[~box].mean() < 2.0  # 10-bit codes: the picture kept its depth there


@pytest.mark.slow
@needs_ffmpeg
def test_tone_map_gives_bt709_sdr_near_ffmpegs(hdr_clip: Path, source_photo: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sdr.mp4"
    code = main(["swap", "--source", str(source_photo), "-i", str(hdr_clip), "-o", str(out), "-q",
                 "--tone-map"])
    said = capsys.readouterr()
    assert code == 0, said.err
    assert "input tone-mapped to BT.709 SDR, 8-bit (as --tone-map asks)" in said.out + said.err
    stream = ffprobe(out)["streams"][0]
    assert (stream["codec_name"], stream["pix_fmt"]) == ("h264", "yuv420p")
    assert [stream[t] for t in ("color_space", "color_primaries", "color_transfer", "color_range")] == \
        ["bt709", "bt709", "bt709", "tv"]
    with av.open(str(out)) as container:
        ours = next(container.decode(video=0)).to_ndarray(format="rgb24") / 255.0
    has_zscale = "zscale" in subprocess.run([FFMPEG or "ffmpeg", "-hide_banner", "-filters"],
                                            capture_output=True, text=True).stdout
    if has_zscale:
        reference_png = tmp_path / "reference.png"
        subprocess.run([FFMPEG or "ffmpeg", "-v", "error", "-i", str(hdr_clip), "-frames:v", "1", "-vf",
                        "zscale=t=linear:npl=100,format=gbrpf32le,zscale=p=bt709,"
                        f"tonemap=tonemap=hable:desat=0:peak={MAX_CLL / 100},"
                        "zscale=t=bt709:m=bt709:r=tv,format=yuv420p", str(reference_png)], check=True)
        reference = cv2.imread(str(reference_png))[..., ::-1] / 255.0
    else:
        reference = reference_tone_map(first_frame(hdr_clip), MAX_CLL)
    assert abs(luma709(ours).mean() / luma709(reference).mean() - 1) < 0.10


@pytest.mark.slow
def test_an_8bit_encoder_tone_maps_and_sdr_input_ignores_tone_map(hdr_clip: Path, face_clip: Path,
                                                                  source_photo: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["swap", "--source", str(source_photo), "-i", str(hdr_clip), "-o", str(tmp_path / "a.mp4"),
                 "-q", "--codec", "libx264"])
    said = capsys.readouterr()
    assert code == 0, said.err
    assert "tone-mapped to BT.709 SDR, 8-bit (libx264 writes 8 bits here)" in said.out + said.err
    with av.open(str(tmp_path / "a.mp4")) as container:
        frame = next(container.decode(video=0))
        assert (frame.format.name, frame.color_trc, frame.color_primaries) == ("yuv420p", 1, 1)
    code = main(["swap", "--source", str(source_photo), "-i", str(face_clip), "-o", str(tmp_path / "b.mp4"),
                 "-q", "--tone-map"])
    said = capsys.readouterr()
    assert code == 0, said.err
    assert "--tone-map: the input is SDR, 8-bit, not HDR; nothing to tone-map" in said.out + said.err


@pytest.mark.slow
def test_live_from_an_hdr_camera_says_it_tone_mapped(source_photo: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """An RTSP camera sending H.264 High 10 in PQ: live's outputs are SDR, so it tone-maps,
    says so, and records SDR pictures (not PQ code values shown as SDR)."""
    require_relay()
    frames = face_frames(30)
    record = tmp_path / "live.mp4"
    with running_relay(["cam"]) as relay:
        publisher = Publisher(relay.url("cam/push"), frames, hdr=True)
        publisher.start()
        try:
            code = main(["live", "--source", str(source_photo), "--input", relay.url("cam"),
                         "--output", str(record), "--duration", "4", "-q"])
        finally:
            publisher.stop()
    said = capsys.readouterr()
    assert code == 0, said.err
    assert "tone-mapped HDR (PQ, BT.2020, 10-bit) to BT.709 SDR (Hable on linear light, peak 1000 cd/m²" \
        in said.out, said.out
    with av.open(str(record)) as container:
        recorded = [f.to_ndarray(format="rgb24") / 255.0 for f in container.decode(video=0)]
    assert recorded
    expected = luma709(reference_tone_map(yuv10_frame(graded(frames[0])), 1000.0)).mean()
    as_pq = luma709(graded(frames[0])).mean()  # what an untouched conversion would show
    seen = luma709(recorded[-1]).mean()
    assert abs(seen / expected - 1) < 0.1 < abs(as_pq / expected - 1)


def test_a_webrtc_camera_in_hdr_is_tone_mapped_and_said() -> None:
    from stream.runtime.slot import Slot
    from stream.sources.webrtc import WebRtcSource

    frame = yuv10_frame(graded(face_frames(1)[0]))
    source = WebRtcSource("webrtc peer 1")
    source.offer(frame)
    info = source.open()
    assert source.range_note is not None and "tone-mapped HDR (PQ, BT.2020, 10-bit) to BT.709 SDR" in source.range_note
    slot = Slot(0, {"image": np.empty((info.height, info.width, 3), np.uint8)})
    assert source.read_into(slot)
    expected = np.empty_like(slot.image)
    ToneMapper(dynamic_of(frame), info.width, info.height)(frame, expected)
    assert np.array_equal(slot.image, expected)
    source.close()
    plain = WebRtcSource("webrtc peer 2")
    plain.offer(av.VideoFrame.from_ndarray(face_frames(1)[0], format="bgr24").reformat(format="yuv420p"))
    assert plain.open() and plain.range_note is None
    plain.close()


@pytest.mark.parametrize("turn", [cv2.ROTATE_90_CLOCKWISE, cv2.ROTATE_180, cv2.ROTATE_90_COUNTERCLOCKWISE])
def test_the_kept_planes_are_turned_upright_with_the_picture(turn: int) -> None:
    w, h = 64, 48
    frame = yuv10_frame(np.random.default_rng(2).uniform(0.1, 0.8, (h, w, 3)))
    up_h, up_w = (w, h) if turn != cv2.ROTATE_180 else (h, w)
    deep = np.empty(deep_buffers(up_h, up_w)["deep"][0], np.uint16)
    keep_planes(frame, deep, turn)
    y, u, v = planes10(frame)
    flat = deep.reshape(-1)
    quarter = (up_w // 2) * (up_h // 2)
    assert np.array_equal(flat[: up_w * up_h].reshape(up_h, up_w), cv2.rotate(y, turn))
    assert np.array_equal(flat[up_w * up_h: up_w * up_h + quarter].reshape(up_h // 2, up_w // 2), cv2.rotate(u, turn))
    assert np.array_equal(flat[up_w * up_h + quarter:].reshape(up_h // 2, up_w // 2), cv2.rotate(v, turn))


@pytest.mark.slow
def test_hdr10_in_av1_keeps_its_depth_tags_and_metadata(hdr_clip: Path, source_photo: Path, tmp_path: Path,
                                                        capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "swapped.mkv"
    policy = os.sched_getscheduler(0)
    code = main(["swap", "--source", str(source_photo), "-i", str(hdr_clip), "-o", str(out), "-q",
                 "--codec", "libsvtav1"])
    said = capfd.readouterr()  # the encoder's own lines go to the process's stderr
    assert os.sched_getscheduler(0) == policy  # SVT-AV1 left no real-time policy behind
    assert code == 0, said.err
    assert "kept: AV1 10-bit (SVT-AV1)" in said.out + said.err
    assert "Svt[info]" not in said.err  # its settings are not printed
    frame = first_frame(out)
    assert (frame.format.name, frame.color_trc, frame.color_primaries, frame.colorspace) == ("yuv420p10le", 16, 9, 9)
    kept = dynamic_of(frame)
    assert kept.mastering is not None and kept.mastering.x265() == MASTERING.x265()
    assert kept.light is not None and (kept.light.max_cll, kept.light.max_fall) == (MAX_CLL, MAX_FALL)
