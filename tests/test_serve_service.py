"""`facestream serve` as a service people publish to all day: memory that comes back after
every session, and clients that hold connections without finishing a request. Real
servers (the `facestream serve` command, or its server in this process), real aiortc
WHIP publishers, raw sockets for the stalled clients."""
from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest

from stream.job.swap_job import SwapJob
from stream.media.demo_clips import astronaut, pan_zoom_frames
from stream.runtime.heap import arenas_for, bound_arenas, give_back
from stream.server.app import FaceServer
from stream.server.client import PacedTrack
from stream.server.guard import ConnectionBook, ConnectionLimits
from stream.server.whip_client import whip_publish
from tests.fixtures.serving import serve, serve_process, shared_serve_job

LOOPBACK = ["127.0.0.1"]
SDP = {"Content-Type": "application/sdp"}


@pytest.fixture(scope="module")
def shared_job(source_photo: Path) -> SwapJob:
    return shared_serve_job(source_photo)


@pytest.fixture(scope="module")
def pictures() -> list[Any]:
    return list(pan_zoom_frames(astronaut(), 12, size=(640, 480)))


def figures(proc: psutil.Process) -> dict[str, float]:
    return {"rss_mb": proc.memory_info().rss / 2**20, "threads": proc.num_threads(), "fds": proc.num_fds()}


async def publish_once(url: str, pictures: list[Any], seconds: float) -> int:
    """One WHIP publisher as OBS is one (it takes the swapped video back here), for
    `seconds`, then DELETE; the frames it got back."""
    call = await whip_publish(f"{url}whip", PacedTrack(pictures), ice_addresses=LOOPBACK)
    track = await asyncio.wait_for(call.remote, 30)
    got, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        await asyncio.wait_for(track.recv(), 30)
        got += 1
    assert await call.delete() == 200
    await call.pc.close()
    return got


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's memory from /proc")
def test_thirty_whip_sessions_in_turn_leave_the_server_where_it_was_after_the_fifth(
        source_photo: Path, pictures: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("MALLOC_"):  # the product bounds its heap itself
            monkeypatch.delenv(name)
    with serve_process(source_photo, "--quiet") as (proc, url):
        server = psutil.Process(proc.pid)
        time.sleep(1.0)
        before = figures(server)

        async def sessions() -> list[dict[str, Any]]:
            rows = []
            for _ in range(30):
                back = await publish_once(url, pictures, 1.5)
                await asyncio.sleep(0.3)
                rows.append({"back": back, **figures(server)})
            return rows

        rows = asyncio.run(sessions())
    # Every session was real: swapped video came back (how much in 1.5 s depends on the load).
    assert all(row["back"] >= 1 for row in rows), [row["back"] for row in rows]
    fifth, last = rows[4], rows[-1]
    rss = [round(row["rss_mb"]) for row in rows]
    assert last["rss_mb"] <= fifth["rss_mb"] * 1.10, rss
    # No session leaves a descriptor or a thread behind (the server's worker threads are
    # all started with it).
    assert last["fds"] == before["fds"], (before, last)
    assert [row["threads"] for row in rows] == [before["threads"]] * 30, (before, [row["threads"] for row in rows])


def test_a_finished_sessions_objects_are_freed_when_it_ends(shared_job: SwapJob, pictures: list[Any]) -> None:
    """The session's pipeline (its rings, its threads) and its peer connection hold each
    other in cycles: the server collects them when the session ends, not whenever Python's
    rare full collection runs."""
    import gc
    import weakref

    from stream.runtime.ring import Ring

    async def scenario(server: FaceServer, url: str) -> dict[str, Any]:
        gc.collect()
        rings_before = {id(o) for o in gc.get_objects() if isinstance(o, Ring)}
        gc.disable()  # only the server's own collection may free them
        try:
            call = await whip_publish(f"{url}whip", PacedTrack(pictures), ice_addresses=LOOPBACK)
            await asyncio.wait_for(call.remote, 30)
            session = next(iter(server.sessions.values()))
            deadline = time.monotonic() + 20
            while session.pipeline is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert session.pipeline is not None
            rings = [weakref.ref(o) for o in gc.get_objects() if isinstance(o, Ring) and id(o) not in rings_before]
            ref = weakref.ref(session)
            del session
            assert rings
            assert await call.delete() == 200
            await call.pc.close()
            deadline = time.monotonic() + 5
            while ref() is not None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return {"session": ref() is None, "rings": sum(r() is not None for r in rings)}
        finally:
            gc.enable()

    got = serve(shared_job, scenario, ice_addresses=LOOPBACK)
    assert got == {"session": True, "rings": 0}


def test_the_heap_calls_do_what_they_say() -> None:
    assert arenas_for(1) == 1 and arenas_for(2) == 1 and arenas_for(3) == 1
    assert arenas_for(8) == 4 and arenas_for(64) == 8 and arenas_for(None) == 1
    give_back()  # on glibc it trims, elsewhere it collects only: either way no error
    if os.environ.get("MALLOC_ARENA_MAX"):
        assert bound_arenas(2) is None  # the user's own bound stands
    elif Path("/proc/self/maps").exists() and "libc.so.6" in Path("/proc/self/maps").read_text():
        assert bound_arenas(arenas_for(os.cpu_count())) == arenas_for(os.cpu_count())


def test_live_and_serve_bound_the_arenas_first_and_a_file_swap_does_not(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    import stream.cli.main as cli

    calls: list[str] = []
    monkeypatch.setattr(cli, "bound_arenas", lambda: calls.append("bound"))
    missing = str(tmp_path / "missing.mp4")
    assert cli.main(["live", "--input", missing, "--output", str(tmp_path / "out.mp4")]) != 0
    assert calls == ["bound"]  # before the input was even looked at
    calls.clear()
    assert cli.main(["swap", "--input", missing, "--output", str(tmp_path / "out.mp4")]) != 0
    assert calls == []  # a file's stages keep glibc's arenas (one arena's lock cost the default 3.9%)


# -- connections ---------------------------------------------------------------------------


async def stalled(port: int, client: str, n: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """`n` connections from address `client` (a 127.x.y.z loopback address) that send half
    a request line and then nothing."""
    out = []
    for _ in range(n):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(client, 0))
        writer.write(b"GET / HT")
        await writer.drain()
        out.append((reader, writer))
    return out


async def closed_within(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], seconds: float,
                        hold: bool = False) -> bytes | None:
    """What the server sent before closing the connection; None if it was still open after
    `seconds` (then closed by us, unless `hold`)."""
    reader, writer = conn
    got = b""
    try:
        async with asyncio.timeout(seconds):
            while chunk := await reader.read(4096):
                got += chunk
    except TimeoutError:
        if not hold:
            writer.close()
        return None
    except ConnectionError:
        pass
    writer.close()
    return got


async def timed_get(http: aiohttp.ClientSession, url: str) -> tuple[int, float]:
    t0 = time.perf_counter()
    async with http.get(url) as response:
        await response.read()
        return response.status, time.perf_counter() - t0


async def timed_whip_post(url: str, pictures: list[Any]) -> tuple[int, float]:
    """A WHIP offer made beforehand, then its POST timed (the answer, 201); the session is
    deleted again."""
    from aiortc import RTCConfiguration, RTCPeerConnection

    from stream.server.ice import restrict_gathering

    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver(PacedTrack(pictures), direction="sendonly")
    restrict_gathering(pc, LOOPBACK)
    await pc.setLocalDescription(await pc.createOffer())
    async with aiohttp.ClientSession() as http:
        t0 = time.perf_counter()
        async with http.post(f"{url}whip", data=pc.localDescription.sdp, headers=SDP) as response:
            await response.read()
            took = time.perf_counter() - t0
            status, location = response.status, response.headers.get("Location", "")
        if location:
            async with http.delete(location if location.startswith("http") else url.rstrip("/") + location):
                pass
    await pc.close()
    return status, took


@pytest.mark.slow
def test_two_hundred_stalled_sockets_are_closed_and_the_page_and_whip_answer_meanwhile(
        shared_job: SwapJob, pictures: list[Any]) -> None:
    limits = ConnectionLimits(header_timeout=2.0)

    async def scenario(server: FaceServer, url: str) -> dict[str, Any]:
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        t0 = time.monotonic()
        held = []
        for k in range(10):  # 10 addresses x 20: within the per-address limit
            held += await stalled(port, f"127.0.0.{10 + k}", 20)
        assert server.connections is not None
        got: dict[str, Any] = {"open": server.connections.open}
        async with aiohttp.ClientSession() as http:
            got["page"] = [await timed_get(http, url) for _ in range(5)]
            got["status"] = await timed_get(http, f"{url}api/status")
        got["whip"] = await timed_whip_post(url, pictures)
        closed = await asyncio.gather(*(closed_within(c, limits.header_timeout + 3) for c in held))
        got["closed_after_s"] = time.monotonic() - t0
        got["still_open"] = sum(c is None for c in closed)
        got["answered"] = sum(bool(c) for c in closed)
        got["timed_out"] = server.connections.timed_out
        return got

    got = serve(shared_job, scenario, ice_addresses=LOOPBACK, limits=limits)
    assert got["open"] == 200
    assert all(status == 200 for status, _ in got["page"])
    assert sorted(s for _, s in got["page"])[2] < 0.1, got["page"]  # the median of five, in ms: a few
    assert got["whip"][0] == 201 and got["whip"][1] < 0.1, got["whip"]  # answered while 200 sockets hang
    assert got["still_open"] == 0 and got["answered"] == 0 and got["timed_out"] == 200
    assert got["closed_after_s"] < limits.header_timeout + 3


@pytest.mark.slow
def test_connections_over_a_limit_get_a_503_and_other_clients_are_served(shared_job: SwapJob) -> None:
    limits = ConnectionLimits(header_timeout=3.0, max_connections=30, per_client=8)

    async def scenario(server: FaceServer, url: str) -> dict[str, Any]:
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        got: dict[str, Any] = {}
        one = await stalled(port, "127.0.0.20", 12)  # 8 kept, 4 refused at once
        got["per_client"] = await asyncio.gather(*(closed_within(c, 0.5, hold=True) for c in one))
        others = []
        for k in range(3):  # 8 + 3 x 8 = 32 > 30: the last two are refused for the total
            others += await stalled(port, f"127.0.0.{21 + k}", 8)
        got["total"] = await asyncio.gather(*(closed_within(c, 0.5, hold=True) for c in others))
        assert server.connections is not None
        got["refused"] = server.connections.refused
        async with aiohttp.ClientSession() as http:  # held ones timed out: room again
            await asyncio.sleep(limits.header_timeout + 0.5)
            got["after"] = await timed_get(http, url)
            got["open_after"] = server.connections.open
        return got

    got = serve(shared_job, scenario, ice_addresses=LOOPBACK, limits=limits)
    per_client = got["per_client"]
    assert [c is None for c in per_client] == [True] * 8 + [False] * 4
    assert all(c is not None and c.startswith(b"HTTP/1.1 503") and b"from one address" in c for c in per_client[8:])
    total = got["total"]
    assert [c is None for c in total] == [True] * 22 + [False] * 2
    assert all(c is not None and b"30 connections at once" in c for c in total[-2:])
    assert got["refused"] == 6
    assert got["after"][0] == 200 and got["open_after"] <= 1


@pytest.mark.slow
def test_an_idle_keepalive_connection_and_a_half_sent_second_request_are_closed(shared_job: SwapJob) -> None:
    limits = ConnectionLimits(header_timeout=1.0, keepalive_timeout=1.5)

    async def scenario(server: FaceServer, url: str) -> dict[str, Any]:
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        got: dict[str, Any] = {}
        for case in ("idle", "half"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /api/status HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            await reader.readexactly(length)
            t0 = time.monotonic()
            if case == "half":
                writer.write(b"GET / HT")
                await writer.drain()
            rest = await closed_within((reader, writer), 5.0)
            got[case] = (rest, time.monotonic() - t0)
        return got

    got = serve(shared_job, scenario, ice_addresses=LOOPBACK, limits=limits)
    for case in ("idle", "half"):
        rest, after = got[case]
        assert rest == b"", (case, rest)  # closed, nothing more sent
        assert 1.0 < after < 3.5, (case, after)


def test_the_connection_book_counts_by_address() -> None:
    book = ConnectionBook(ConnectionLimits(max_connections=3, per_client=2))
    assert book.admit("a") is None and book.admit("a") is None
    assert "from one address" in (book.admit("a") or "")
    assert book.admit("b") is None
    assert "3 connections at once" in (book.admit("c") or "")
    book.release("a")
    assert book.admit("c") is None
    assert book.open == 3 and dict(book.by_client) == {"a": 1, "b": 1, "c": 1} and book.refused == 2
    with pytest.raises(ValueError):
        ConnectionLimits(header_timeout=0)
    with pytest.raises(ValueError):
        ConnectionLimits(per_client=0)


@pytest.mark.parametrize("flag, value, said", [
    ("--header-timeout", "0", "--header-timeout 0: must be more than 0 seconds"),
    ("--keepalive-timeout", "-1", "--keepalive-timeout -1: must be more than 0 seconds"),
    ("--max-connections", "0", "--max-connections 0: must be at least 1"),
    ("--max-connections-per-client", "0", "--max-connections-per-client 0: must be at least 1"),
])
def test_serve_refuses_bad_limits_in_one_line(flag: str, value: str, said: str) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "stream.cli", "serve", flag, value],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.strip() == f"facestream: error: {said}", done.stderr


def test_the_status_says_what_connections_are_open(shared_job: SwapJob) -> None:
    async def scenario(server: FaceServer, url: str) -> dict[str, Any]:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}api/status") as response:
                return dict((await response.json())["connections"])

    got = serve(shared_job, scenario, ice_addresses=LOOPBACK, limits=ConnectionLimits(max_connections=40))
    assert got["open"] == 1 and got["max"] == 40 and got["refused"] == 0 and got["header_timeouts"] == 0
