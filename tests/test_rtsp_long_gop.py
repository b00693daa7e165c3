"""A camera sending keyframes 10 s apart, joined between them on a busy machine, opens every
time; and the rule for how long a join waits for its first picture (two keyframe intervals,
at least the open timeout)."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from stream.media.demo_clips import astronaut, pan_zoom_frames
from stream.media.rtsp import MAX_GOP_S, Join, first_picture_wait
from stream.sources.rtsp import RtspSource
from tests.fixtures.rtsp import Publisher, Relay, running_relay

FPS = 30
GOP = 10 * FPS  # a keyframe every 10 s
ROUNDS, PER_ROUND = 2, 10  # 20 joins: each round one join a second through one keyframe interval


@pytest.mark.parametrize(("open_timeout", "gop_s", "wait"), [
    (15.0, None, 15.0),  # not known: the open timeout
    (15.0, 0.0, 15.0),
    (15.0, 2.0, 15.0),  # two short intervals fit in the open timeout
    (15.0, 10.0, 20.0),  # two long ones do not
    (5.0, 4.0, 8.0),
    (15.0, 1000.0, 2 * MAX_GOP_S),  # an absurd measure is capped
])
def test_the_first_picture_waits_two_keyframe_intervals_and_at_least_the_open_timeout(
        open_timeout: float, gop_s: float | None, wait: float) -> None:
    assert first_picture_wait(open_timeout, gop_s) == pytest.approx(wait)


def test_a_join_waits_twice_the_open_timeout_until_it_knows_the_keyframe_interval() -> None:
    join = Join(connected=100.0, open_timeout=15.0)
    assert join.deadline() == pytest.approx(130.0)  # not known yet: keyframes may be up to 15 s apart
    assert join.longest() == pytest.approx(100.0 + 2 * MAX_GOP_S)
    join.saw(False, 101.0)
    assert join.deadline() == pytest.approx(130.0)
    join.saw(True, 104.0)
    join.saw(False, 104.1)
    join.saw(True, 114.0)  # two keyframes 10 s apart (the first one did not give a picture)
    assert join.gop() == pytest.approx(10.0)
    assert join.deadline() == pytest.approx(120.0)
    assert (join.packets, join.before_key) == (4, 1)
    known = Join(connected=0.0, open_timeout=15.0, gop_s=12.0)  # measured on an earlier connection
    assert known.deadline() == pytest.approx(24.0)
    short = Join(connected=0.0, open_timeout=15.0, gop_s=1.0)  # keyframes a second apart: the open timeout
    assert short.deadline() == pytest.approx(15.0)


def test_the_note_says_how_long_the_first_picture_took_and_why() -> None:
    quick = Join(connected=10.0, open_timeout=15.0)
    quick.answered = 10.1
    quick.saw(True, 10.2)
    assert quick.note(10.3) == "first picture after 0.3 s"
    held = Join(connected=10.0, open_timeout=15.0, gop_s=10.0)  # the server answered at its keyframe
    held.answered = 17.3
    held.saw(True, 17.4)
    assert held.note(17.5) == ("first picture after 7.5 s: joined between keyframes (the server held its "
                                "answer until its next keyframe) (keyframes about 10 s apart)")
    mid = Join(connected=0.0, open_timeout=15.0)  # a camera that sends from mid-interval on
    mid.answered, mid.attempts, mid.undecodable = 0.1, 2, 3
    for k in range(120):
        mid.saw(False, 0.1 + k / 30)
    mid.saw(True, 4.1)
    assert mid.note(4.2) == ("first picture after 4.2 s: joined between keyframes (120 frame(s) before the "
                             "first keyframe), 2 attempts, 3 frame(s) without a reference skipped")
    text = mid.failure()
    assert text.startswith("connected, waiting for a keyframe: no picture within 30 s (121 frame(s) came")
    assert "\n" not in text


@pytest.fixture
def relay() -> Iterator[Relay]:
    with running_relay(["cam"]) as server:
        yield server


@pytest.fixture
def busy_machine() -> Iterator[None]:
    """Two processes spinning, one a core of a two-core machine: the relay, the publisher
    and the joins all run on what is left."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait(10)


def next_keyframe_sent(publisher: Publisher) -> None:
    """Wait until the publisher has just sent a keyframe."""
    deadline = time.monotonic() + GOP / FPS + 20
    start = publisher.sent // GOP
    while time.monotonic() < deadline:
        if publisher.sent // GOP > start and publisher.sent % GOP < 3:
            return
        time.sleep(0.005)
    raise AssertionError(f"the publisher sent {publisher.sent} frames")


def join(url: str, results: list[tuple[str, str]]) -> None:
    """Open the camera as `live` does (the default open timeout), note how, close it."""
    source = RtspSource(url)
    try:
        info = source.open()
        results.append(("ok", f"{info.width}x{info.height} {source.first_note}"))
    except Exception as exc:  # noqa: BLE001 - a failed open is what the test counts
        results.append(("failed", str(exc)))
    finally:
        source.close()


@pytest.mark.slow
def test_a_camera_with_keyframes_10_s_apart_joined_between_them_on_a_busy_machine_opens_every_time(
        relay: Relay, busy_machine: None) -> None:
    frames = list(pan_zoom_frames(astronaut(), 30, size=(640, 360), zoom=(1.0, 1.05)))
    publisher = Publisher(relay.url("cam/push"), frames, fps=FPS, gop=GOP)
    publisher.start()
    results: list[tuple[str, str]] = []
    try:
        for _ in range(ROUNDS):
            next_keyframe_sent(publisher)
            joins = []
            for k in range(PER_ROUND):  # joins 0.5, 1.5 ... 9.5 s after a keyframe
                time.sleep(0.5 if k == 0 else GOP / FPS / PER_ROUND)
                joins.append(threading.Thread(target=join, args=(relay.url("cam"), results),
                                              name=f"test-join-{k}"))
                joins[-1].start()
            for thread in joins:
                thread.join(60)
    finally:
        publisher.stop()
    failed = [text for outcome, text in results if outcome != "ok"]
    assert len(results) == ROUNDS * PER_ROUND and not failed, failed
    assert all(text.startswith("640x360 first picture after ") for _, text in results), results
    between = [text for _, text in results if "joined between keyframes" in text]
    assert len(between) >= len(results) // 2, results
