"""Finer quantisation on the swapped faces (encode.face_qp): the regions, and that the
encoder spends them where the faces are and nowhere else."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from stream.config import ConfigError, EncodeConfig, load_config
from stream.media.face_roi import (
    LARGE_FACE,
    QP_SCALE,
    SMALL_FACE,
    face_offset,
    face_regions,
    uses_regions,
    with_regions,
)
from stream.media.video_info import VideoInfo
from stream.runtime.slot import Pasted, Slot
from stream.sinks.file import FileSink

W, H = 320, 192
FACE = (40.0, 60.0, 88.0, 116.0)  # a 48 px face
FACE_AREA = (slice(60, 116), slice(40, 88))
ELSEWHERE = (slice(60, 116), slice(200, 280))


def test_small_faces_get_the_whole_offset_large_ones_none():
    assert face_offset(40, 3.0) == face_offset(SMALL_FACE, 3.0) == -3.0
    assert face_offset(LARGE_FACE, 3.0) == 0 and face_offset(300, 3.0) == 0
    assert -3.0 < face_offset((SMALL_FACE + LARGE_FACE) / 2, 3.0) < 0
    assert face_offset(40, 0.0) == 0


def test_regions_cover_the_face_and_forehead_inside_the_picture():
    [(x, y, w, h, q)] = face_regions([FACE], 2.5, W, H)
    assert x < 40 and y < 60 - 0.3 * 56 and x + w > 88 and y + h > 116
    assert q == pytest.approx(-2.5 / QP_SCALE)
    [(x, y, w, h, _)] = face_regions([(-10.0, -8.0, 30.0, 40.0)], 2.5, W, H)  # off the corner
    assert (x, y) == (0, 0) and w > 0 and h > 0
    assert face_regions([(0.0, 0.0, 200.0, 180.0)], 2.5, W, H) == []  # a large face: nothing


def test_only_encoders_that_apply_offsets_get_regions():
    assert uses_regions("libx264", "veryfast", 2.5)
    assert uses_regions("libx265", "medium", 2.5)
    assert not uses_regions("libx264", "ultrafast", 2.5)  # no adaptive quantiser there
    assert not uses_regions("mpeg4", "veryfast", 2.5)
    assert not uses_regions("libx264", "veryfast", 0.0)


def test_face_qp_is_checked():
    assert load_config(None, ["encode.face_qp=0"]).encode.face_qp == 0
    with pytest.raises(ConfigError, match="encode.face_qp must be in"):
        load_config(None, ["encode.face_qp=-1"])


def _textured(i: int) -> np.ndarray:
    # Fine texture everywhere, moving a little each frame: the encoder must quantise it.
    rng = np.random.default_rng(7)
    base = rng.integers(40, 216, (H + 8, W + 8, 3), np.uint8)
    base = np.repeat(np.repeat(base[::2, ::2], 2, axis=0), 2, axis=1)
    return np.ascontiguousarray(base[i % 4:i % 4 + H, i % 3:i % 3 + W])


def _write(path: Path, face_qp: float, boxes: tuple) -> list[np.ndarray]:
    info = VideoInfo(W, H, Fraction(30), Fraction(1, 30), 12, 0.4)
    # One encoder thread: the same bits on every run, whatever the machine is doing.
    sink = FileSink(path, info, EncodeConfig(crf=30, face_qp=face_qp, threads=1))
    sink.open()
    slot = Slot(0, {"image": np.zeros((H, W, 3), np.uint8)})
    written = []
    try:
        for i in range(12):
            slot.image[:] = _textured(i)
            slot.pts, slot.time_base = i, Fraction(1, 30)
            slot.payload = Pasted(boxes)
            sink.write(slot)
            written.append(slot.image.copy())
    finally:
        sink.close()
    return written


def _error(path: Path, written: list[np.ndarray], area: tuple[slice, slice]) -> float:
    with av.open(str(path)) as container:
        decoded = [f.to_ndarray(format="bgr24") for f in container.decode(video=0)]
    assert len(decoded) == len(written)
    return float(np.mean([np.abs(d[area].astype(np.int16) - w[area]).mean() for d, w in zip(decoded, written)]))


def test_the_faces_are_encoded_finer_and_the_rest_as_before(tmp_path):
    plain, finer = tmp_path / "plain.mp4", tmp_path / "finer.mp4"
    written = _write(plain, 0.0, (FACE,))
    assert np.array_equal(np.stack(written), np.stack(_write(finer, 12.0, (FACE,))))
    assert _error(finer, written, FACE_AREA) < 0.85 * _error(plain, written, FACE_AREA)
    assert _error(finer, written, ELSEWHERE) == pytest.approx(_error(plain, written, ELSEWHERE), rel=0.1)
    assert finer.stat().st_size > plain.stat().st_size


def _regions_given(tmp_path: Path, payloads: list, preset: str = "veryfast") -> list[np.ndarray]:
    """The regions of interest (top, bottom, left, right, qoffset) the encoder got with each frame."""
    info = VideoInfo(W, H, Fraction(30), Fraction(1, 30), len(payloads), 0.1)
    sink = FileSink(tmp_path / f"{preset}.mp4", info, EncodeConfig(preset=preset))
    given: list[np.ndarray] = []
    encode = sink._encode

    def spy(frame: av.VideoFrame, pts: int) -> None:
        rois = [np.frombuffer(bytes(sd), np.int32).reshape(-1, 7) for sd in frame.side_data.keys()
                if sd.type.name == "REGIONS_OF_INTEREST"]
        given.append(np.concatenate(rois) if rois else np.zeros((0, 7), np.int32))
        encode(frame, pts)

    sink._encode = spy
    sink.open()
    slot = Slot(0, {"image": np.zeros((H, W, 3), np.uint8)})
    try:
        for i, payload in enumerate(payloads):
            slot.image[:] = _textured(i)
            slot.pts, slot.time_base, slot.payload = i, Fraction(1, 30), payload
            sink.write(slot)
    finally:
        sink.close()
    return [np.column_stack([g[:, 1:5], g[:, 5] / np.maximum(g[:, 6], 1)]) for g in given]


def test_only_frames_with_small_faces_pasted_carry_regions(tmp_path):
    large = (10.0, 10.0, 150.0, 170.0)
    given = _regions_given(tmp_path, [Pasted((FACE,)), Pasted(()), None, Pasted((large,)),
                                      Pasted((FACE, large))])
    [(top, bottom, left, right, q)] = given[0]
    # A face this small gets the whole default offset, as the region's qoffset (-1..1).
    assert top < 60 and bottom > 116 and left < 40 and right > 88
    assert q == pytest.approx(-EncodeConfig().face_qp / QP_SCALE, abs=1e-4)  # 4 decimals, as addroi reads it
    assert [len(g) for g in given[1:]] == [0, 0, 0, 1]
    assert np.array_equal(given[4], given[0])
    # ultrafast has no adaptive quantiser to apply them: none are made
    assert [len(g) for g in _regions_given(tmp_path, [Pasted((FACE,))], preset="ultrafast")] == [0]


def test_a_step_is_one_of_the_encoders_quantiser_steps(tmp_path):
    # A region over the whole picture, k steps finer, spends the bits of a crf k lower (the
    # scale FFmpeg's libx264 applies to a region's qoffset: 51 at 8 bits; at 25 the file
    # came out like crf 30 - 2k).
    whole = [(0, 0, W, H, -4.0 / QP_SCALE)]
    info = VideoInfo(W, H, Fraction(30), Fraction(1, 30), 12, 0.4)
    sizes = {}
    for name, crf, regions in (("plain26", 26, None), ("finer30", 30, whole), ("plain22", 22, None)):
        path = tmp_path / f"{name}.mp4"
        sink = FileSink(path, info, EncodeConfig(crf=crf, face_qp=0.0, threads=1))
        sink.open()
        slot = Slot(0, {"image": np.zeros((H, W, 3), np.uint8)})
        if regions:
            make = sink._to_frame
            sink._to_frame = lambda image, slot, make=make, regions=regions: with_regions(
                make(image, slot), regions, Fraction(1, 30))
        try:
            for i in range(12):
                slot.image[:] = _textured(i)
                slot.pts, slot.time_base = i, Fraction(1, 30)
                sink.write(slot)
        finally:
            sink.close()
        sizes[name] = path.stat().st_size
    assert sizes["finer30"] == pytest.approx(sizes["plain26"], rel=0.15), sizes
    assert sizes["finer30"] < 0.8 * sizes["plain22"], sizes


class _Swapper:
    """Pastes nothing; finds a result for every face but the one marked with score 0."""

    def finish_batch(self, image, batch, output):
        return [None if face.score == 0 else object() for face in batch]

    def paste(self, image, face, result):
        pass


def test_the_composite_stage_hands_the_sink_the_boxes_of_the_faces_it_pasted():
    from engines.face import Face
    from stream.runtime.metrics import Metrics
    from stream.stages.composite import CompositeWorker
    from stream.stages.records import SwappedFaces

    lm = np.zeros((68, 2), np.float32)
    faces = (Face(FACE, lm), Face((100.0, 10.0, 140.0, 50.0), lm, score=0.0), Face((150.0, 20.0, 200.0, 70.0), lm))
    item = Slot(0, {"image": np.zeros((H, W, 3), np.uint8)})
    item.payload = SwappedFaces(faces, batch=faces)
    out = Slot(1)
    CompositeWorker(_Swapper(), Metrics()).process(item, out)
    assert (out.payload.count, out.payload.boxes) == (2, (FACE, (150.0, 20.0, 200.0, 70.0)))


def test_a_full_range_bt709_frame_keeps_its_tags_and_the_filter_sees_no_change():
    import av.logging

    from stream.media.convert import YuvFramer

    frame = YuvFramer(64, 48, "bt709", True)(np.zeros((48, 64, 3), np.uint8))
    level = av.logging.get_level()
    av.logging.set_level(av.logging.VERBOSE)
    try:
        with av.logging.Capture() as logs:
            out = with_regions(frame, [(0, 0, 16, 16, -0.1)], Fraction(1001, 30000))
    finally:
        av.logging.set_level(level)
    assert (out.colorspace, out.color_range) == (frame.colorspace, frame.color_range)
    assert [sd.type.name for sd in out.side_data.keys()] == ["REGIONS_OF_INTEREST"]
    assert not [line for line in logs if "Changing video frame properties" in str(line)]


def test_an_rtsp_output_gets_the_face_regions_too():
    # A real RTSP server; what is checked is the frame handed to the sink's encoder thread.
    import time

    from stream.sinks.rtsp import RtspSink
    from tests.fixtures.rtsp import Relay, free_port, require_relay

    require_relay()
    relay = Relay(free_port(), ["out"])
    relay.start()
    try:
        sink = RtspSink(relay.url("out/push"), W, H, 30, EncodeConfig(), open_timeout=10.0)
        sink.open()
        given: list[int] = []
        put = sink._queue.put_nowait

        def spy(frame: av.VideoFrame) -> None:
            given.append(sum(sd.type.name == "REGIONS_OF_INTEREST" for sd in frame.side_data.keys()))
            put(frame)

        sink._queue.put_nowait = spy
        slot = Slot(0, {"image": np.zeros((H, W, 3), np.uint8)})
        try:
            for i, payload in enumerate([Pasted((FACE,)), Pasted(()), None, Pasted((FACE,))]):
                slot.image[:] = _textured(i)
                slot.capture_time = time.monotonic()
                slot.payload = payload
                sink.write(slot)
                time.sleep(0.05)  # the writer takes each frame before the next comes
        finally:
            sink.close()
    finally:
        relay.stop()
    assert given == [1, 0, 0, 1]
    assert sink.frames_written == 4
