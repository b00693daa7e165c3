"""Broken and hostile RTSP servers, for the RTSP input and the RTSP output alike.

Real servers throughout: GStreamer's RTSP server (tests/fixtures/rtsp_relay.py), frozen
with SIGSTOP to stall it and killed to drop it; a socket that takes the connection and
never answers; Python's HTTP server standing for another protocol on the port; a port
nobody listens on. What is checked: every wait ends (a timeout, Ctrl-C, stop()), a
refusal ends at once while silence waits the open timeout, a stall mid-run is one line
and a reconnect, the sink's figures add up, and the user reads our words, not FFmpeg's.
"""
from __future__ import annotations

import faulthandler
import http.server
import logging
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from stream.config import EncodeConfig
from stream.errors import SinkError, SourceError, StopRequested
from stream.media.backoff import PROBE_S, backoff_delay
from stream.runtime.slot import Slot
from stream.sinks.rtsp import RtspSink
from stream.sources.rtsp import PROBE_TIMEOUT_S, RtspSource
from tests.fixtures.rtsp import Publisher, Reader, Relay, free_port, require_relay, running_relay
from tests.fixtures.silent_server import SilentServer

pytestmark = pytest.mark.slow  # RTSP servers that stall, restart or never answer, waited out

ROOT = Path(__file__).resolve().parent.parent
# FFmpeg's own words, which are never the message: what its interrupt callback says when a
# timeout fires (meaningless to a user), and texts that may only follow ours in parentheses.
NEVER = "Immediate exit requested"
ONLY_AS_CAUSE = ("Invalid data found", "Server returned", "Connection refused")


def assert_ours(text: str) -> None:
    assert NEVER not in text, text
    outside = re.sub(r"\([^()]*\)", "", text)  # the causes in parentheses taken out
    for raw in ONLY_AS_CAUSE:
        assert raw not in outside, text


@pytest.fixture
def relay() -> Iterator[Relay]:
    with running_relay(["cam", "out"]) as server:
        yield server


@pytest.fixture(scope="module")
def shared_relay() -> Iterator[Relay]:
    with running_relay(["cam", "out"]) as server:
        yield server


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    with SilentServer() as server:
        yield server


@pytest.fixture(scope="module")
def http_port() -> Iterator[int]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


@pytest.fixture
def hang_guard() -> Iterator[None]:
    """A wait that never ends (as publishing to a silent server did, inside FFmpeg with the
    GIL held, where no Python timer can run) fails the run with tracebacks, not hangs it."""
    faulthandler.dump_traceback_later(90, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def _sink(url: str, open_timeout: float = 30.0, send_timeout: float = 3.0,
          size: tuple[int, int] = (64, 64)) -> RtspSink:
    return RtspSink(url, size[0], size[1], 30, EncodeConfig(crf=18), open_timeout=open_timeout,
                    send_timeout=send_timeout)


def _open(kind: str, url: str, open_timeout: float) -> Callable[[], object]:
    if kind == "input":
        return RtspSource(url, open_timeout=open_timeout).open
    return _sink(url, open_timeout).open


def _timed_error(call: Callable[[], object], kind: type[BaseException] = Exception) -> tuple[BaseException, float]:
    started = time.monotonic()
    with pytest.raises(kind) as caught:
        call()
    return caught.value, time.monotonic() - started


# -- answers that will not change: at once, one line, our words ---------------------------

@pytest.mark.parametrize("kind", ["input", "output"])
@pytest.mark.parametrize("case", ["404", "refused", "http"])
def test_a_refusal_fails_at_once_in_one_line(kind: str, case: str, shared_relay: Relay, http_port: int,
                                             hang_guard: None) -> None:
    url = {"404": shared_relay.url("nope/push" if kind == "output" else "nope"),
           "refused": f"rtsp://127.0.0.1:{free_port()}/cam",
           "http": f"rtsp://127.0.0.1:{http_port}/cam"}[case]
    expected = {"404": "the server has no stream at this path (404 Not Found)",
                "refused": "connection refused", "http": "not an RTSP server"}[case]
    error, took = _timed_error(_open(kind, url, open_timeout=30.0), SinkError if kind == "output" else SourceError)
    text = str(error)
    # At once: the open timeout (30 s, which a 404 used to wait out) is for silence only.
    assert took < 10.0, f"took {took:.1f} s"
    assert text.startswith(f"rtsp {url!r}: ") and expected in text and "\n" not in text, text
    assert_ours(text)


@pytest.mark.parametrize("kind", ["input", "output"])
def test_a_silent_server_waits_the_open_timeout_without_freezing_the_process(
        kind: str, silent: SilentServer, hang_guard: None) -> None:
    ticks: list[float] = []
    done = threading.Event()

    def tick() -> None:  # another thread of the process, which must keep running meanwhile
        while not done.wait(0.05):
            ticks.append(time.monotonic())

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        error, took = _timed_error(_open(kind, silent.url(), open_timeout=2.0),
                                   SinkError if kind == "output" else SourceError)
    finally:
        done.set()
        ticker.join()
    text = str(error)
    assert silent.accepted.is_set()
    assert 1.9 <= took < 15.0, f"took {took:.1f} s"
    assert "no answer within 2 s" in text and "\n" not in text, text
    assert_ours(text)
    assert len(ticks) > 10, "the other threads were frozen while connecting"


@pytest.mark.parametrize("kind", ["input", "output"])
def test_ctrl_c_while_connecting_takes_effect_at_once(kind: str, silent: SilentServer, hang_guard: None) -> None:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    main = threading.main_thread().ident
    assert main is not None and threading.current_thread() is threading.main_thread()
    timer = threading.Timer(0.5, signal.pthread_kill, args=(main, signal.SIGINT))
    try:
        timer.start()
        _, took = _timed_error(_open(kind, silent.url(), open_timeout=30.0), KeyboardInterrupt)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    # It used to wait for the connect to fail first: the 30 s open timeout, or for ever.
    assert took < 5.0, f"Ctrl-C took {took:.1f} s"


def test_stop_from_another_thread_ends_a_connect_at_once(silent: SilentServer) -> None:
    source = RtspSource(silent.url(), open_timeout=30.0)
    threading.Timer(0.5, source.stop).start()
    error, took = _timed_error(source.open, StopRequested)
    assert took < 5.0, f"stop() took {took:.1f} s"
    assert "stopped while connecting" in str(error)


# -- through the command: the case as a user met it ----------------------------------------

def _live(source_photo: Path, face_clip: Path, output: str, *more: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "stream.cli", "live", "--source", str(source_photo),
                             "--input", str(face_clip), "--output", output, "--duration", "5", "-q", *more],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_live_to_a_server_that_never_answers_ends_in_one_line(silent: SilentServer, source_photo: Path,
                                                             face_clip: Path) -> None:
    proc = _live(source_photo, face_clip, silent.url("swapped"), "--open-timeout", "3")
    try:
        out, err = proc.communicate(timeout=120)  # it used to hang for ever, --duration ignored
    finally:
        proc.kill()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 1, err
    assert len(lines) == 1 and lines[0].startswith("facestream: error: rtsp "), err
    assert "no answer within" in lines[0] and "did not answer OPTIONS" in lines[0], lines[0]


def test_ctrl_c_while_publishing_connects_ends_live(silent: SilentServer, source_photo: Path,
                                                    face_clip: Path) -> None:
    proc = _live(source_photo, face_clip, silent.url("swapped"))
    try:
        assert silent.accepted.wait(90), "live never connected"
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        out, err = proc.communicate(timeout=60)  # it used to ignore SIGINT for ever
        took = time.monotonic() - started
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err, err
    assert took < 8.0, f"Ctrl-C took {took:.1f} s"


# -- mid-run: a stall and an outage -----------------------------------------------------

def _noise(n: int, size: tuple[int, int]) -> list[np.ndarray]:
    rng = np.random.default_rng(11)  # noise: frames big enough to fill the socket buffers quickly
    return [rng.integers(0, 256, (size[1], size[0], 3), np.uint8) for _ in range(n)]


def _feed(sink: RtspSink, seconds: float, at: dict[float, Callable[[], None]],
          size: tuple[int, int] = (640, 360)) -> tuple[int, float]:
    """Write frames to `sink` at 30 fps for `seconds`, running `at`'s calls at their times;
    the frames given and the longest write()."""
    frames = _noise(8, size)
    slot = Slot(0, {"image": frames[0]})
    started, given, longest = time.monotonic(), 0, 0.0
    pending = dict(sorted(at.items()))
    while (now := time.monotonic()) - started < seconds:
        for when in [w for w in pending if now - started >= w]:
            pending.pop(when)()
        slot.buffers["image"] = frames[given % len(frames)]
        slot.capture_time = time.monotonic()
        t = time.monotonic()
        sink.write(slot)
        longest = max(longest, time.monotonic() - t)
        given += 1
        time.sleep(max(0.0, started + given / 30 - time.monotonic()))
    return given, longest


def _messages(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name and r.levelno >= logging.WARNING]


def test_a_stalled_publish_is_one_line_drops_frames_and_reconnects(relay: Relay, hang_guard: None,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    sink = _sink(relay.url("out/push"), open_timeout=5.0, send_timeout=2.0, size=(640, 360))
    sink.open()
    with caplog.at_level(logging.WARNING):
        given, longest = _feed(sink, 11.0, {1.0: relay.pause, 6.0: relay.resume})
        sink.close()
    stats = sink.stats()
    lines = _messages(caplog, "stream.sinks.rtsp")
    # write() never waits on the server (it used to block for as long as the server slept).
    assert longest < 1.0, f"a write took {longest:.2f} s"
    assert sum("stalled: the server took no data for 2 s; reconnecting" in ln for ln in lines) == 1, lines
    assert sum("publishing again after" in ln for ln in lines) == 1, lines
    assert len(lines) == 2, lines
    assert stats["reconnects"] == 1 and stats["dropped"] > 30, stats
    assert 2.0 < stats["outage_s"] < 11.0, stats
    assert stats["dropped"] + sink.frames_written == given, (stats, sink.frames_written, given)
    assert sink.frames_written > 30 * 5 * 0.5, sink.frames_written  # before the stall and after it
    for line in lines:
        assert_ours(line)


def test_a_publish_through_a_server_restart_counts_drops_reconnects_and_outage(
        relay: Relay, caplog: pytest.LogCaptureFixture) -> None:
    sink = _sink(relay.url("out/push"), open_timeout=5.0, size=(320, 240))
    sink.open()
    reader = Reader(relay.url("out"), keep_every=1000)
    reader.start()
    seen: dict[str, int] = {}

    def restart() -> None:
        relay.start()
        seen["at_restart"] = reader.frames

    try:
        with caplog.at_level(logging.WARNING):
            given, longest = _feed(sink, 9.0, {1.5: relay.stop, 2.5: restart}, size=(320, 240))
            during = sink.stats()
            sink.close()
    finally:
        reader.stop()
    stats = sink.stats()
    lines = _messages(caplog, "stream.sinks.rtsp")
    assert any("reconnecting" in ln for ln in lines) and any("publishing again" in ln for ln in lines), lines
    assert stats["reconnects"] == 1, stats
    assert stats["dropped"] > 0 and 0.9 < stats["outage_s"] < 9.0, stats
    assert during["outage_s"] <= stats["outage_s"]
    # Every frame given is either delivered or counted as dropped.
    assert stats["dropped"] + sink.frames_written == given, (stats, sink.frames_written, given)
    assert reader.frames > seen["at_restart"] + 15, "nothing arrived after the restart"
    assert longest < 1.0, f"a write took {longest:.2f} s"


def test_a_stalled_input_is_one_line_and_reconnected(relay: Relay, caplog: pytest.LogCaptureFixture) -> None:
    frames = [np.full((240, 320, 3), 40 + 20 * i, np.uint8) for i in range(6)]
    publisher = Publisher(relay.url("cam/push"), frames)
    publisher.start()
    source = RtspSource(relay.url("cam"), open_timeout=10.0)
    try:
        source.open()
        slot = Slot(0, {"image": np.zeros((240, 320, 3), np.uint8)})
        threading.Timer(1.0, relay.pause).start()
        threading.Timer(6.0, relay.resume).start()
        started, after = time.monotonic(), 0
        with caplog.at_level(logging.WARNING):
            while after < 45 and time.monotonic() - started < 25.0 and source.read_into(slot):
                after += source.reconnects  # the frames read since it reconnected
        figures = source.describe()
    finally:
        source.close()
        publisher.stop()
    lines = _messages(caplog, "stream.sources.rtsp")
    assert lines[:1] == [f"{source.name}: no frames for 3 s; reconnecting"], lines
    assert sum("reconnected after" in ln for ln in lines) == 1, lines
    # The server is frozen from 1 s to 6 s; the reader notices at 4 s, and asks the frozen
    # server (which takes the connection, and answers nothing) until it answers: a question
    # asked just before 6 s waits its PROBE_TIMEOUT_S (+1 s) out, then the next one connects.
    bound = 5.0 + PROBE_TIMEOUT_S + 1.0 + backoff_delay(9, PROBE_S) + 2.0
    assert figures["reconnects"] == 1 and 3.0 < figures["outage_s"] < bound, figures  # type: ignore[operator]
    assert after == 45, "too few frames after the reconnect"
    for line in lines:
        assert_ours(line)


# -- a server that asks for credentials --------------------------------------------------

@pytest.mark.parametrize("method", ["basic", "digest"])
def test_credentials_in_the_url_answer_the_servers_challenge(method: str, caplog: pytest.LogCaptureFixture) -> None:
    require_relay()
    relay = Relay(free_port(), ["out"], options=("--user", "ann:s3cret", "--auth", method))
    relay.start()
    try:
        good = relay.url("out/push").replace("rtsp://", "rtsp://ann:s3cret@")
        sink = _sink(good, size=(320, 240))
        sink.open()
        reader = Reader(relay.url("out").replace("rtsp://", "rtsp://ann:s3cret@"), keep_every=1000)
        reader.start()
        try:
            given, _ = _feed(sink, 2.0, {}, size=(320, 240))
        finally:
            sink.close()
            reader.stop()
        assert sink.frames_written == given and reader.frames > 20, (sink.frames_written, given, reader.frames)
        assert "s3cret" not in sink.name
        cases = [("output", relay.url("out/push"), "the server wants a user name and password"),
                 ("output", good.replace("s3cret", "wrong"), "the server refused the user name and password"),
                 ("input", relay.url("out"), "the server wants a user name and password")]
        for kind, url, expected in cases:
            error, took = _timed_error(_open(kind, url, open_timeout=30.0))
            assert took < 10.0 and expected in str(error) and "(401 Unauthorized)" in str(error), (kind, error)
            assert "wrong" not in str(error), "a password in a message"
    finally:
        relay.stop()
