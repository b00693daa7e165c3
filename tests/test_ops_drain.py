"""Stopping as a service: SIGTERM to a real `facestream serve` with a live WHIP publisher
(ready no more, new publishers refused as "draining", the session closed when the drain's
time is up, a repeated SIGTERM changing nothing, exit 0), and `facestream live` on a clip
with its probe and metrics ports (ready while it runs, figures labelled with its name,
SIGTERM: exit 0 and a recording that plays)."""
from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stream.media.demo_clips import astronaut, pan_zoom_frames
from stream.ops.drain import StopDeadline
from stream.server.client import PacedTrack
from stream.server.whip_client import SignallingError, whip_publish
from tests.fixtures import probe
from tests.fixtures.scrape import get, samples
from tests.fixtures.serving import serve_process

ROOT = Path(__file__).resolve().parents[1]
LOOPBACK = ["127.0.0.1"]
POLL_S = 0.05
PATIENCE_S = 30.0  # bounds a wait that should end long before; nothing is asserted of time


def _until(check: Any) -> Any:
    """Poll `check()` until it returns something true (PATIENCE_S at most); its last value."""
    deadline = time.monotonic() + PATIENCE_S
    got = check()
    while not got and time.monotonic() < deadline:
        time.sleep(POLL_S)
        got = check()
    return got


@pytest.fixture(scope="module")
def pictures() -> list[np.ndarray]:
    return list(pan_zoom_frames(astronaut(), 12, size=(640, 480)))


@pytest.mark.slow
@pytest.mark.usefixtures("loopback_ice")
def test_sigterm_drains_serve(source_photo: Path, pictures: list[np.ndarray]) -> None:
    with serve_process(source_photo, "--drain-seconds", "2", "--name", "edge-1") as (proc, url):

        async def scenario() -> tuple[int, str]:
            call = await whip_publish(f"{url}whip", PacedTrack(pictures), ice_addresses=LOOPBACK)
            track = await asyncio.wait_for(call.remote, 30)
            for _ in range(5):
                await asyncio.wait_for(track.recv(), 30)
            assert (await asyncio.to_thread(get, f"{url}readyz"))[0] == 200
            proc.send_signal(signal.SIGTERM)
            status, said = await asyncio.to_thread(_until, lambda: (lambda r: r if r[0] == 503 else None)(
                get(f"{url}readyz")))
            proc.send_signal(signal.SIGTERM)  # a preStop hook's TERM, then the kubelet's: still one drain
            with pytest.raises(SignallingError) as refused:
                await whip_publish(f"{url}whip", PacedTrack(pictures), ice_addresses=LOOPBACK)
            assert refused.value.status == 503 and "draining" in str(refused.value)
            metrics = samples((await asyncio.to_thread(get, f"{url}metrics"))[1])
            assert metrics[("facestream_draining", (("stream", "edge-1"),))] == 1
            assert metrics[("facestream_refusals_total", (("reason", "draining"), ("stream", "edge-1")))] == 1
            assert metrics[("facestream_sessions", (("stream", "edge-1"),))] == 1  # still served while draining
            await asyncio.to_thread(proc.wait, PATIENCE_S)  # the drain's time up: the session is closed
            await call.pc.close()
            return status, said

        status, said = asyncio.run(scenario())
        out, err = proc.communicate(timeout=PATIENCE_S)
    assert (status, said) == (503, "not ready: draining (the server is stopping)\n")
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "draining (SIGTERM): no new sessions; 1 open, given up to 2 s to end" in out
    assert "stopped: 1 peer session(s) served, 1 closed at exit (drain time up)" in out


@pytest.mark.slow
def test_sigterm_with_no_session_exits_at_once_drained(source_photo: Path) -> None:
    with serve_process(source_photo, "--quiet") as (proc, url):
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=PATIENCE_S)
    assert proc.returncode == 0, err
    assert "stopped: 0 peer session(s) served (drained)" in out


class _Lines(threading.Thread):
    """A pipe's lines, collected as they come."""

    def __init__(self, pipe: Any) -> None:
        super().__init__(daemon=True)
        self.pipe, self.lines = pipe, []

    def run(self) -> None:
        for line in self.pipe:
            self.lines.append(line)

    def find(self, pattern: str) -> re.Match[str] | None:
        return next((m for m in (re.search(pattern, line) for line in list(self.lines)) if m), None)


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from stream.media.demo_clips import make_single_face_clip

    path = tmp_path_factory.mktemp("ops_live") / "camera.mp4"
    make_single_face_clip(path, seconds=8.0, fps=30, size=(640, 360))
    return path


@pytest.fixture()
def live_run(clip: Path, source_photo: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], _Lines, Path]]:
    out = tmp_path / "live.mp4"
    proc = subprocess.Popen([sys.executable, "-m", "stream.cli", "live", "--source", str(source_photo),
                             "--input", str(clip), "--output", str(out), "--health-port", "0",
                             "--metrics-port", "0", "--name", "door-cam"],
                            cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = _Lines(proc.stderr)
    err.start()
    try:
        yield proc, err, out
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        err.join(10)


@pytest.mark.slow
def test_live_serves_its_probes_and_figures_and_stops_on_sigterm(
        live_run: tuple[subprocess.Popen[str], _Lines, Path]) -> None:
    proc, err, out = live_run
    ops = _until(lambda: err.find(r"^ops: (\S+)/healthz, \S+/readyz, (\S+)/metrics"))
    assert ops, "".join(err.lines)
    health, scrape = ops.group(1), ops.group(2)
    assert get(f"{health}/healthz") == (200, "ok\n")
    assert _until(lambda: err.find(r"^in .* fps")), "".join(err.lines)  # the pipeline runs
    assert get(f"{health}/readyz") == (200, "ready\n")
    first = samples(get(f"{scrape}/metrics")[1])
    label = (("stream", "door-cam"),)
    assert first[("facestream_sessions", label)] == 1
    assert first[("facestream_ready", label)] == 1
    assert first[("facestream_sessions_started_total", label)] == 1
    second = _until(lambda: (lambda f: f if f[("facestream_frames_out_total", label)]
                             > first[("facestream_frames_out_total", label)] else None)(
        samples(get(f"{scrape}/metrics")[1])))
    assert second, "frames out never rose"
    assert second[("facestream_latency_seconds_count", label)] > 0
    assert second[("facestream_frames_in_total", label)] >= second[("facestream_frames_out_total", label)]
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=PATIENCE_S)
    err.join(10)
    assert proc.returncode == 0, "".join(err.lines)
    assert "Traceback" not in "".join(err.lines)
    summary = [line for line in stdout.splitlines() if line.startswith("live:")]
    assert summary and summary[-1].endswith("stopped by SIGTERM"), stdout
    assert probe(out)["frames"] > 0  # finalised: the recording reads back


def test_a_stop_past_its_deadline_is_interrupted_as_by_a_second_ctrl_c() -> None:
    threads = threading.active_count()
    deadline = StopDeadline(0.0)
    with pytest.raises(KeyboardInterrupt):
        deadline.start()
        _until(lambda: False)  # interrupted long before it gives up
    deadline.cancel()
    assert threading.active_count() == threads


def test_a_stop_within_its_deadline_is_left_alone() -> None:
    threads = threading.active_count()
    deadline = StopDeadline(60.0)
    deadline.start()
    deadline.start()  # a second signal: still the first deadline
    deadline.cancel()
    assert threading.active_count() == threads
