"""An IP camera as `live` meets it, against a real RTSP server (GStreamer's): keyframes 6 and
10 s apart, a server that answers but sends no picture in time, six restarts of the server
while a run writes a file, and the figures the run reports about its input."""
from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from stream.cli.main import main
from stream.errors import SourceError
from stream.media.demo_clips import astronaut, pan_zoom_frames
from stream.sources.capture import WebcamSource
from stream.sources.rtsp import RtspSource
from tests.fixtures.rtsp import Publisher, Relay, running_relay

pytestmark = pytest.mark.slow  # real RTSP servers, restarted and waited on

FPS = 30


@pytest.fixture(scope="module")
def frames() -> list[np.ndarray]:
    return list(pan_zoom_frames(astronaut(), 30, size=(640, 360), zoom=(1.0, 1.05)))


@pytest.fixture
def relay() -> Iterator[Relay]:
    with running_relay(["cam"]) as server:
        yield server


def just_after_a_keyframe(publisher: Publisher, gop: int, after: int = 3) -> None:
    """Wait until the publisher has sent `after` frames past a keyframe: a reader joining
    now waits nearly the whole interval for the next one (the hardest moment to join)."""
    deadline = time.monotonic() + gop / FPS + 10
    while time.monotonic() < deadline:
        if publisher.sent > gop and publisher.sent % gop == after:
            return
        time.sleep(0.005)
    raise AssertionError(f"the publisher sent {publisher.sent} frames")


@pytest.mark.parametrize("gop_s", [6, 10])
def test_a_camera_with_keyframes_far_apart_opens_at_its_next_keyframe(
        relay: Relay, frames: list[np.ndarray], gop_s: int) -> None:
    gop = gop_s * FPS
    publisher = Publisher(relay.url("cam/push"), frames, fps=FPS, gop=gop)
    publisher.start()
    source = RtspSource(relay.url("cam"))  # the default open timeout
    try:
        just_after_a_keyframe(publisher, gop)
        joined = time.monotonic()
        info = source.open()
        opened = time.monotonic() - joined
        figures = source.describe()
    finally:
        source.close()
        publisher.stop()
    assert (info.width, info.height) == (640, 360)
    # The first picture is the next keyframe's, not the one after (the analysis of the
    # stream used to swallow the first: 9-11 s with keyframes 6 s apart).
    first = figures["first_picture_s"]
    assert isinstance(first, float) and first <= gop_s + 1.0, figures
    assert opened <= gop_s + 1.5, opened


def test_a_server_that_answers_but_sends_no_picture_in_time_says_it_waits_for_a_keyframe(
        relay: Relay, frames: list[np.ndarray]) -> None:
    gop = 10 * FPS
    publisher = Publisher(relay.url("cam/push"), frames, fps=FPS, gop=gop)
    publisher.start()
    source = RtspSource(relay.url("cam"), open_timeout=2.0)
    try:
        just_after_a_keyframe(publisher, gop)
        started = time.monotonic()
        with pytest.raises(SourceError) as caught:
            source.open()
        took = time.monotonic() - started
    finally:
        source.close()
        publisher.stop()
    text = str(caught.value)
    # Keyframes not measured yet: taken to be up to the open timeout apart, the wait is two of them.
    assert "connected, waiting for a keyframe: no picture within 4 s" in text and "\n" not in text, text
    assert 3.9 <= took < 8.0, took


def test_six_server_restarts_are_each_reconnected_within_a_second_and_a_half_and_the_output_plays(
        relay: Relay, frames: list[np.ndarray], source_photo: Path, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    publisher = Publisher(relay.url("cam/push"), frames, fps=FPS)
    publisher.start()
    out, stats = tmp_path / "out.mkv", tmp_path / "stats.json"
    back_at: list[float] = []

    def restart() -> None:
        # Once the run is receiving (a restart while it still opens is a refusal: the run
        # ends at once, by design); the file is written under another name until the end.
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline and not any(p.stat().st_size > 20_000 for p in tmp_path.iterdir()):
            time.sleep(0.1)
        for _ in range(6):
            time.sleep(2.5)
            relay.stop()
            time.sleep(1.5)
            relay.start()
            back_at.append(time.time())

    restarter = threading.Thread(target=restart, daemon=True)
    restarter.start()
    try:
        with caplog.at_level(logging.WARNING, logger="stream.sources.rtsp"):
            code = main(["live", "--source", str(source_photo), "--input", relay.url("cam"),
                         "--output", str(out), "--duration", "32", "-q", "--detect-every", "10",
                         "--stats-json", str(stats)])
    finally:
        restarter.join(30)
        publisher.stop()
    assert code == 0
    assert len(back_at) == 6
    reconnected = [r.created for r in caplog.records if "reconnected after" in r.getMessage()]
    assert len(reconnected) >= 6, [r.getMessage() for r in caplog.records]
    for back in back_at:
        first = min((t for t in reconnected if t > back - 0.2), default=None)
        assert first is not None and first - back <= 1.5, (back, reconnected)
    rep = json.loads(stats.read_text())
    assert rep["input"]["reconnects"] >= 6
    assert 29.0 <= rep["input"]["measured_fps"] <= 31.0, rep["input"]
    # The output plays: FFmpeg decodes it to the end without an error.
    probe = subprocess.run(["ffmpeg", "-v", "error", "-i", str(out), "-f", "null", "-"],
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0 and not probe.stderr.strip(), probe.stderr[-500:]


def test_the_start_line_names_a_file_a_file(face_clip: Path) -> None:
    assert WebcamSource(str(face_clip)).name == f"file {str(face_clip)!r}"
    assert WebcamSource(0).name == "webcam 0"
    assert WebcamSource("/dev/video2").name == "webcam '/dev/video2'"


def test_the_stream_rate_leaves_out_outages_bursts_and_frames_without_a_time() -> None:
    from stream.media.clock import StreamRate

    rate = StreamRate(settle_s=1.0)
    assert rate.fps() is None
    for connection in range(3):
        rate.new_connection()
        rate.frame(None, 0.0)  # a connection's first frame may carry no time
        base = 100.0 * connection  # each connection's own clock; the outages between are long
        for k in range(10):  # its first second: a burst of frames held back
            rate.frame(base + k * 0.001, 0.0)
        for k in range(1, 121):  # then 30 fps
            rate.frame(base + 1.0 + k / 30, 0.0)
    assert rate.fps() == pytest.approx(30.0)
    untimed = StreamRate()
    for k in range(61):
        untimed.frame(None, 10.0 + k / 25)
    assert untimed.fps() == pytest.approx(25.0)
    assert untimed.fps(outage_s=1.2) == pytest.approx(60 / 1.2)
