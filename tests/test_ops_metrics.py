"""Running as a service, the figures: `serve`'s /metrics (Prometheus text, read back with
the client library's own parser) during a real WHIP session, its probes and the access
token, `live`'s probe and metrics server on a thread of its own, the totals that stay when
a session ends, and the flags' one-line refusals."""
from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import numpy as np
import pytest

from stream.cli.main import main
from stream.job.swap_job import SwapJob
from stream.media.demo_clips import astronaut, pan_zoom_frames
from stream.ops.buckets import Buckets
from stream.ops.health import OpsServer, bind_port
from stream.ops.live import LiveReadiness
from stream.ops.metrics import REASONS, StreamMetrics, check_name, registry_of
from stream.runtime.metrics import Metrics
from stream.server.app import FaceServer
from stream.server.client import PacedTrack
from stream.server.whip_client import SignallingError, whip_publish
from tests.fixtures.scrape import get, samples, value
from tests.fixtures.serving import serve, shared_serve_job

LOOPBACK = ["127.0.0.1"]
TOKEN = "ops-test-token-0123456789"
STAGES = {"decode", "analyse", "swap", "composite", "encode"}


# -- the pieces, without a server -------------------------------------------------------------

def test_buckets_expose_cumulative_counts_and_the_sum() -> None:
    b = Buckets((0.01, 0.1))
    b.add_many([0.005, 0.05, 0.05])
    b.add(3.0)
    rows, total = b.exposed()
    assert rows == [("0.01", 1), ("0.1", 3), ("+Inf", 4)]
    assert total == pytest.approx(3.105)


@pytest.mark.parametrize("name, ok", [("serve", True), ("cam-1.front_door", True), ("a" * 63, True),
                                      ("", False), ("a" * 64, False), ("two words", False),
                                      ("10.0.0.1:554", False), ('x"y', False)])
def test_the_stream_label_is_checked(name: str, ok: bool) -> None:
    if ok:
        assert check_name(name) == name
    else:
        with pytest.raises(ValueError, match="--name"):
            check_name(name)


def _fake_pipeline(metrics: Metrics, drops: int = 0) -> Any:
    ring = SimpleNamespace(drops=drops)
    runner = SimpleNamespace(sink=object(), source=object(), stopped=None)
    return SimpleNamespace(metrics=metrics, rings=[ring], runner=runner)


def test_an_ended_sessions_figures_stay_in_the_totals() -> None:
    figures = StreamMetrics("t")
    first, second = Metrics(), Metrics()
    first.stage("decode")
    first.frames_in, first.frames_out, first.faces_swapped = 10, 8, 5
    first.latency.values.extend([0.02] * 8)
    first.stages["decode"].values.extend([0.001] * 10)
    figures.watch("a", lambda: _fake_pipeline(first, drops=2))
    figures.watch("b", lambda: None)  # a session whose pipeline has not started yet
    before = figures.totals()
    assert before["frames_in"] == 10 and before["frames_dropped"] == 2
    figures.retire("a")
    assert figures.totals() == before  # the ended session's counts are still there
    second.frames_in = 3
    figures.watch("c", lambda: _fake_pipeline(second))
    assert figures.totals()["frames_in"] == 13
    got = samples(registry_text(figures))
    assert value(got, "facestream_latency_seconds_count", stream="t") == 8  # each record counted once
    assert value(got, "facestream_stage_seconds_count", stream="t", stage="decode") == 10
    assert value(got, "facestream_sessions_started_total", stream="t") == 3


def test_a_count_read_mid_update_never_goes_down() -> None:
    figures = StreamMetrics("t")
    m = Metrics()
    m.frames_out = 5
    sink = SimpleNamespace(dropped=0)
    pipeline = _fake_pipeline(m)
    pipeline.runner.sink = SimpleNamespace(stats=lambda: {"dropped": sink.dropped, "reconnects": 0, "outage_s": 0.0})
    figures.watch("a", lambda: pipeline)
    assert figures.totals()["frames_out"] == 5
    sink.dropped = 1  # the sink counted a drop before the runner counted the frame out
    assert figures.totals()["frames_out"] == 5
    m.frames_out = 7
    assert figures.totals()["frames_out"] == 6


def test_refusal_reasons_are_a_fixed_set() -> None:
    figures = StreamMetrics("t")
    figures.refuse("full")
    with pytest.raises(ValueError, match="not one of"):
        figures.refuse("10.1.2.3")
    got = samples(registry_text(figures))
    assert {dict(k[1])["reason"] for k in got if k[0] == "facestream_refusals_total"} == set(REASONS)
    assert value(got, "facestream_refusals_total", stream="t", reason="full") == 1


def registry_text(figures: StreamMetrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(registry_of(figures)).decode()


def test_live_ops_server_answers_and_leaves_no_thread() -> None:
    threads = threading.active_count()
    readiness = LiveReadiness()
    figures = StreamMetrics("cam")
    figures.not_ready = readiness.not_ready
    server = OpsServer(bind_port("127.0.0.1", 0, "--health-port"), bind_port("127.0.0.1", 0, "--metrics-port"),
                       readiness.not_ready, registry_of(figures))
    server.start()
    try:
        health, ready, scrape = server.urls()
        assert get(health) == (200, "ok\n")
        assert get(ready)[0] == 503 and "starting" in get(ready)[1]
        readiness.watch(_fake_pipeline(Metrics()))
        assert get(ready) == (200, "ready\n")
        assert value(samples(get(scrape)[1]), "facestream_ready", stream="cam") == 1
        base = health.rsplit("/", 1)[0]
        assert get(base + "/metrics")[0] == 404  # each port serves its own paths only
    finally:
        server.stop()
    assert threading.active_count() == threads


# -- the flags' refusals: one line, exit 1, before anything loads --------------------------------

def _busy_port() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock, sock.getsockname()[1]


@pytest.mark.parametrize("args, said", [
    (["serve", "--name", "two words"], "--name 'two words'"),
    (["serve", "--drain-seconds", "-1"], "--drain-seconds -1: must be 0 or more"),
    (["live", "--input", "x.mp4", "--output", "o.mp4", "--name", ""], "--name ''"),
    (["live", "--input", "x.mp4", "--output", "o.mp4", "--drain-seconds", "-2"], "--drain-seconds -2"),
    (["live", "--input", "x.mp4", "--output", "o.mp4", "--metrics-port", "70000"], "--metrics-port 70000: not a port"),
    (["live", "--input", "x.mp4", "--output", "o.mp4", "--health-port", "-1"], "--health-port -1: not a port"),
    (["live", "--input", "x.mp4", "--output", "o.mp4", "--health-port", "9100", "--metrics-port", "9100"],
     "--health-port and --metrics-port are both 9100"),
    (["live", "--input", "x.mp4", "--output", "o.mp4", "--metrics-port", "BUSY"], "--metrics-port BUSY: cannot listen"),
    (["live", "--input", "x.mp4", "--output", "o.mp4", "--health-port", "BUSY"], "--health-port BUSY: cannot listen"),
])
def test_bad_service_flags_are_one_line(args: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    busy, port = _busy_port()
    threads = threading.active_count()
    try:
        code = main([a.replace("BUSY", str(port)) for a in args])
    finally:
        busy.close()
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert len(err.splitlines()) == 1 and err.startswith("facestream: error: "), err
    assert said.replace("BUSY", str(port)) in err
    assert threading.active_count() == threads


# -- serve: /metrics during a real WHIP session ------------------------------------------------

@pytest.fixture(scope="module")
def shared_job(source_photo: Path) -> SwapJob:
    return shared_serve_job(source_photo)


@pytest.fixture(scope="module")
def pictures() -> list[np.ndarray]:
    return list(pan_zoom_frames(astronaut(), 12, size=(640, 480)))


async def _scrape(http: aiohttp.ClientSession, url: str, **headers: str) -> dict[Any, float]:
    async with http.get(f"{url}metrics", headers=headers) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        return samples(await response.text())


@pytest.mark.slow
@pytest.mark.usefixtures("loopback_ice")
def test_metrics_follow_a_whip_session(shared_job: SwapJob, pictures: list[np.ndarray]) -> None:
    async def scenario(server: FaceServer, url: str) -> None:
        call = await whip_publish(f"{url}whip", PacedTrack(pictures), ice_addresses=LOOPBACK)
        track = await asyncio.wait_for(call.remote, 30)
        for _ in range(10):
            await asyncio.wait_for(track.recv(), 30)
        async with aiohttp.ClientSession() as http:
            first = await _scrape(http, url)
            for _ in range(15):
                await asyncio.wait_for(track.recv(), 30)
            await asyncio.sleep(0.5)
            second = await _scrape(http, url)
            async with http.get(f"{url}readyz") as response:  # one peer of one: full
                assert response.status == 503 and "full" in await response.text()
            with pytest.raises(SignallingError) as refused:  # a second publisher finds no slot
                await whip_publish(f"{url}whip", PacedTrack(pictures), ice_addresses=LOOPBACK)
            assert refused.value.status == 503
            assert await call.delete() == 200
            await call.pc.close()
            third = await _scrape(http, url)
            async with http.get(f"{url}readyz") as response:
                assert response.status == 200
        for name in ("facestream_frames_in_total", "facestream_frames_out_total"):
            assert value(first, name, stream="studio") > 0
            assert value(second, name, stream="studio") > value(first, name, stream="studio")
            assert value(third, name, stream="studio") >= value(second, name, stream="studio")  # kept after the end
        assert value(second, "facestream_sessions", stream="studio") == 1
        assert value(third, "facestream_sessions", stream="studio") == 0
        assert value(second, "facestream_ready", stream="studio") == 0
        assert value(third, "facestream_sessions_started_total", stream="studio") == 1
        assert value(third, "facestream_refusals_total", stream="studio", reason="full") == 1
        assert value(second, "facestream_latency_seconds_count", stream="studio") > 0
        assert value(second, "facestream_frames_dropped_total", stream="studio") >= 0
        stages = {dict(k[1])["stage"] for k in second if k[0] == "facestream_stage_seconds_count"}
        assert stages == STAGES
        models = {(dict(k[1])["runtime"], dict(k[1])["model"]) for k, v in second.items()
                  if k[0] == "facestream_model_seconds_count" and v > 0}
        assert ("dlib", "detector") in models and ("dlib", "swapper") in models
        # Every sample carries the stream label, and only the server's name in it.
        assert {dict(k[1]).get("stream") for k in second} == {"studio"}

    serve(shared_job, scenario, ice_addresses=LOOPBACK, max_peers=1, name="studio")


@pytest.mark.slow
@pytest.mark.parametrize("public", [False, True])
def test_metrics_need_the_token_unless_public_and_probes_never(shared_job: SwapJob, public: bool) -> None:
    async def scenario(server: FaceServer, url: str) -> None:
        async with aiohttp.ClientSession() as http:
            for probe in ("healthz", "readyz"):
                async with http.get(f"{url}{probe}") as response:
                    assert response.status == 200
                    assert "Set-Cookie" not in response.headers  # a kubelet's call leaves nothing
            async with http.get(f"{url}metrics") as response:
                assert response.status == (200 if public else 401)
            async with http.get(f"{url}metrics", headers={"Authorization": f"Bearer {TOKEN}"}) as response:
                assert response.status == 200
            async with http.get(f"{url}api/status") as response:  # the rest still needs it
                assert response.status == 401
            got = await _scrape(http, url, Authorization=f"Bearer {TOKEN}")
        assert value(got, "facestream_refusals_total", stream="serve",
                     reason="unauthorized") == (1 if public else 2)

    serve(shared_job, scenario, token=TOKEN, metrics_public=public)


class _Runtime:
    """An inference runtime's shape (run, open_expecting, path), for the model clock."""

    path = "/models/inswapper_128.onnx"

    def open_expecting(self, what: str) -> None:
        pass

    def run(self, feeds: dict[str, Any], outputs: list[str] | None = None) -> dict[str, Any]:
        return {}


class _Model:
    def __init__(self, runtime: Any = None) -> None:
        self.runtime = runtime
        self.inner_calls = 0

    def forward(self, *args: Any) -> None:
        self.inner_calls += 1
        if self.runtime is not None:
            self.runtime.run({})


def test_model_runs_are_timed_once_each_by_runtime_and_model() -> None:
    from stream.ops.models import time_models

    engines = SimpleNamespace(name="neural", detector=_Model(), landmarker=_Model(), embedder=_Model(),
                              swapper=_Model(_Runtime()))
    first, second = StreamMetrics("a"), StreamMetrics("b")
    time_models(engines, None, first)
    engines.swapper.forward()
    engines.detector.forward()
    time_models(engines, None, second)  # the same models served again: counted into the new figures
    engines.swapper.forward()
    assert first.models[("runtime", "inswapper_128")].count == 1  # the runtime's run, not the model's too
    assert first.models[("neural", "detector")].count == 1
    assert second.models[("runtime", "inswapper_128")].count == 1
    assert engines.swapper.inner_calls == 2
