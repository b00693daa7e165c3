"""WHIP ingest and WHEP egress on `facestream serve`, with real aiortc peers on loopback
that speak only the standard (one POST of an SDP offer, 201 + Location, DELETE): a
publisher sends a face clip and gets it back swapped, viewers watch the same session, a
stalled viewer holds back nobody; the access token, CORS and malformed requests."""
from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import av
import cv2
import numpy as np
import pytest
from aiortc.mediastreams import AudioStreamTrack

from stream.job.swap_job import SwapJob
from stream.server.app import FaceServer
from stream.server.client import PacedTrack
from stream.server.whip_client import SignallingError, whep_view, whip_publish
from stream.sinks.relay import FrameRelay
from tests.fixtures import Identity
from tests.fixtures.clips import window_frame
from tests.fixtures.serving import live_whep_process, serve, serve_process, shared_serve_job

SDP = {"Content-Type": "application/sdp"}


pytestmark = pytest.mark.usefixtures("loopback_ice")  # every test here talks WebRTC on loopback


@pytest.fixture(scope="module")
def shared_job(source_photo: Path) -> SwapJob:
    return shared_serve_job(source_photo)


@pytest.fixture(scope="module")
def clip() -> list[np.ndarray]:
    """The suite's three-face window of t1.jpg, panning (a camera that moves a little)."""
    return [window_frame(i) for i in range(12)]


@pytest.fixture(scope="module")
def source_identity(source_photo: Path) -> tuple[Identity, np.ndarray]:
    identity = Identity()
    src = cv2.imread(str(source_photo))
    assert src is not None
    return identity, identity.embed(src, identity.boxes(src)[0])


def closest(identity: Identity, image: np.ndarray, target: np.ndarray) -> float:
    """The distance of the picture's face nearest to the source identity."""
    distances = identity.distance_to(image, target)
    assert distances, "no face found"
    return min(distances)


async def frames_of(remote: asyncio.Future[Any], n: int, timeout: float = 30.0) -> list[av.VideoFrame]:
    track = await asyncio.wait_for(remote, timeout)
    return [await asyncio.wait_for(track.recv(), timeout) for _ in range(n)]


async def until(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return bool(predicate())


def session_of(location: str) -> str:
    return location.rstrip("/").split("/")[-2]  # /whip/sessions/ID/KEY


@pytest.mark.slow
def test_a_whip_publisher_gets_its_clip_back_swapped_and_delete_frees_the_slot(
        shared_job: SwapJob, clip: list[np.ndarray], source_identity: tuple[Identity, np.ndarray]) -> None:
    async def scenario(server: FaceServer, url: str) -> dict[str, Any]:
        got: dict[str, Any] = {}
        call = await whip_publish(f"{url}whip", PacedTrack(clip))
        assert call.location.startswith(f"{url}whip/sessions/")
        got["frames"] = await frames_of(call.remote, 40)
        sid = session_of(call.location)
        got["state"] = server.sessions[sid].state()
        # One slot: a second publisher is turned away while the first one streams...
        with pytest.raises(SignallingError) as refused:
            await whip_publish(f"{url}whip", PacedTrack(clip))
        got["refused"] = (refused.value.status, refused.value.reason)
        # ... and DELETE on the Location ends the session and frees it at once.
        got["delete"] = await call.delete()
        got["gone"] = sid not in server.sessions
        got["delete_again"] = await call.delete()
        await call.pc.close()
        second = await whip_publish(f"{url}whip", PacedTrack(clip))
        await frames_of(second.remote, 2)
        await second.close()
        got["second_gone"] = await until(lambda: not server.sessions)
        return got

    got = serve(shared_job, scenario, max_peers=1)
    state = got["state"]
    assert state["via"] == "whip" and state["connection"] == "connected" and state["error"] is None
    assert (got["frames"][-1].width, got["frames"][-1].height) == (640, 480)
    assert got["refused"][0] == 503 and "1 peers at once" in got["refused"][1]
    assert got["delete"] == 200 and got["gone"] and got["delete_again"] == 404 and got["second_gone"]
    # The faces that came back carry the source identity: one is closer to it than any
    # face of the clip the publisher sent.
    identity, target = source_identity
    before = min(closest(identity, picture, target) for picture in clip[:3])
    after = closest(identity, got["frames"][-1].to_ndarray(format="bgr24"), target)
    assert after < before - 0.03, (before, after)


@pytest.mark.slow
def test_whep_viewers_watch_an_obs_like_publisher_and_a_stalled_viewer_holds_back_nobody(
        shared_job: SwapJob, clip: list[np.ndarray], source_identity: tuple[Identity, np.ndarray]) -> None:
    async def scenario(server: FaceServer, url: str) -> dict[str, Any]:
        got: dict[str, Any] = {}
        # A publisher as OBS is one: it sends (sendonly) video and sound, takes nothing back.
        publisher = await whip_publish(f"{url}whip", PacedTrack(clip), receive=False, audio=AudioStreamTrack())
        sid = session_of(publisher.location)
        session = server.sessions[sid]
        assert await until(lambda: session.pipeline is not None, 30)
        # Its sound is read as it comes (not queued for the session's life); with nobody to
        # send it to (it takes nothing back), the delay line holds none of it.
        got["audio_drained"] = (await until(lambda: session.sound is not None and session.sound.frames > 10, 10)
                                and not session.sound.task.done() and session.sound_out is None)
        watcher = await whep_view(f"{url}whep/{sid}")
        assert watcher.location.startswith(f"{url}whep/{sid}/viewers/")
        got["watched"] = await frames_of(watcher.remote, 20)
        # A second viewer connects, then never reads a frame; and a third whose sender is
        # stuck (its encoder never asks for a frame): a track of the relay nobody pulls.
        idle = await whep_view(f"{url}whep/{sid}")
        await asyncio.wait_for(idle.remote, 30)
        with pytest.raises(SignallingError) as refused:  # two viewers at most on this server
            await whep_view(f"{url}whep/{sid}")
        got["third"] = (refused.value.status, refused.value.reason)
        stuck = session.relay.track()
        pipeline = session.pipeline
        assert pipeline is not None
        track = watcher.remote.result()
        out0, published0 = pipeline.metrics.frames_out, session.relay.published
        t0 = time.monotonic()
        got["later"] = [await asyncio.wait_for(track.recv(), 30) for _ in range(30)]
        window = time.monotonic() - t0
        got["fps_stalled"] = (pipeline.metrics.frames_out - out0) / window
        got["published"] = session.relay.published - published0
        got["out"] = pipeline.metrics.frames_out - out0
        got["stuck_replaced"] = stuck.frames_replaced
        got["viewers"] = session.relay.viewers
        stuck.stop()
        got["viewers_after_stop"] = session.relay.viewers
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}api/status") as r:
                status = await r.json()
        got["status"] = (status["viewers"], status["max_viewers"])
        # Ending the session ends its viewers.
        assert await publisher.delete() == 200
        got["viewers_gone"] = await until(lambda: not server.viewers)
        got["viewer_delete"] = await watcher.delete()
        for call in (publisher, watcher, idle):
            await call.pc.close()
        return got

    got = serve(shared_job, scenario, max_viewers=2)
    assert got["audio_drained"]
    assert got["third"][0] == 503 and "2 viewers at once" in got["third"][1]
    # The viewer got the session's swapped video.
    identity, target = source_identity
    before = min(closest(identity, picture, target) for picture in clip[:3])
    after = closest(identity, got["watched"][-1].to_ndarray(format="bgr24"), target)
    assert after < before - 0.03, (before, after)
    # With a viewer that reads nothing and one that is stuck, every frame the pipeline
    # finished was offered to the viewers (the sink never waited for one), the reading
    # viewer kept getting new frames, and the stuck one holds just the newest.
    assert got["viewers"] == 3 and got["viewers_after_stop"] == 2 and got["status"] == (2, 2)
    assert abs(got["published"] - got["out"]) <= 1, got
    assert got["stuck_replaced"] >= got["published"] - 2 > 10, got
    pts = [f.pts for f in got["later"]]
    assert pts == sorted(pts) and len(set(pts)) == len(pts)
    assert got["viewers_gone"] and got["viewer_delete"] == 404


@pytest.mark.slow
def test_a_whip_publisher_or_viewer_that_never_connects_frees_its_slot(shared_job: SwapJob,
                                                                     clip: list[np.ndarray]) -> None:
    said: list[str] = []

    async def scenario(server: FaceServer, url: str) -> dict[str, Any]:
        got: dict[str, Any] = {}
        live = await whip_publish(f"{url}whip", PacedTrack(clip))
        await frames_of(live.remote, 2)
        sid = session_of(live.location)
        # Both leave right after the answer, without a word and before ICE connects.
        ghost = await whip_publish(f"{url}whip", PacedTrack(clip))
        await ghost.pc.close()
        ghost_viewer = await whep_view(f"{url}whep/{sid}")
        await ghost_viewer.pc.close()
        got["held"] = (len(server.sessions), len(server.viewers))
        t0 = time.monotonic()
        got["freed"] = await until(lambda: len(server.sessions) == 1 and not server.viewers, 10)
        got["after_s"] = time.monotonic() - t0
        got["live_left"] = sid in server.sessions
        await live.close()
        return got

    got = serve(shared_job, scenario, connect_timeout=2.0, say=said.append)
    assert got["held"] == (2, 1) and got["freed"] and got["live_left"], got
    assert got["after_s"] < 8, got  # bounded by the connect timeout, not ICE's 30 s consent
    assert sum("not connected within 2 s" in line for line in said) == 2, said


def test_the_relay_never_waits_for_a_viewer_and_keeps_one_frame_each() -> None:
    async def scenario() -> dict[str, Any]:
        relay = FrameRelay()
        reading, stalled = relay.track(), relay.track()
        framer_frames = [av.VideoFrame.from_ndarray(np.full((48, 64, 3), 5 * i, np.uint8), format="bgr24")
                         .reformat(format="yuv420p") for i in range(40)]

        def publish_all() -> None:
            for i, frame in enumerate(framer_frames):
                frame.pts = i
                relay.publish(frame)
                time.sleep(0.002)

        publisher = threading.Thread(target=publish_all)
        publisher.start()
        seen: list[int] = []
        while publisher.is_alive() or reading.last_seq < relay.published:
            try:
                frame = await asyncio.wait_for(reading.recv(), 0.5)
            except asyncio.TimeoutError:
                break
            seen.append(int(frame.pts or 0))
        publisher.join(5)
        late = relay.track()  # a viewer joining now starts on the newest frame
        first_late = await asyncio.wait_for(late.recv(), 1.0)
        relay.close()
        return {"seen": seen, "stalled_replaced": stalled.frames_replaced, "published": relay.published,
                "late": first_late.pts, "alive": publisher.is_alive(), "ended": stalled.readyState}

    got = asyncio.run(scenario())
    assert not got["alive"] and got["published"] == 40
    assert got["seen"] == sorted(set(got["seen"])) and got["seen"][-1] == 39  # in order, up to the newest
    assert got["stalled_replaced"] == 39  # one frame held, never a queue
    assert got["late"] == 39 and got["ended"] == "ended"


def test_the_access_token_is_required_on_every_endpoint(shared_job: SwapJob, clip: list[np.ndarray]) -> None:
    token = "s3cret-Token_for-tests"

    async def scenario(server: FaceServer, url: str) -> dict[str, Any]:
        got: dict[str, Any] = {}
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            for method, path in (("GET", ""), ("GET", "api/faces"), ("GET", "api/status"), ("POST", "whip"),
                                 ("POST", "whep/abc"), ("DELETE", "whip/sessions/a/b")):
                async with http.request(method, url + path, data=b"v=0", headers=SDP) as r:
                    got[f"{method} /{path}"] = (r.status, r.headers.get("WWW-Authenticate"), await r.text())
            async with http.get(url + "api/faces", headers={"Authorization": "Bearer wrong"}) as r:
                got["wrong"] = (r.status, r.headers.get("WWW-Authenticate"))
            async with http.options(url + "whip") as r:  # a CORS preflight carries no credentials
                got["preflight"] = r.status
            async with http.get(url + "api/faces", headers={"Authorization": f"Bearer {token}"}) as r:
                got["bearer"] = r.status
            # A browser opens the page once with the token; its cookie then carries it.
            async with http.get(f"{url}?access_token={token}") as r:
                got["page"] = (r.status, "RTCPeerConnection" in await r.text())
            async with http.get(url + "api/faces") as r:
                got["cookie"] = r.status
        with pytest.raises(SignallingError) as refused:
            await whip_publish(f"{url}whip", PacedTrack(clip))
        got["whip_without"] = refused.value.status
        call = await whip_publish(f"{url}whip", PacedTrack(clip), token=token)
        got["whip_frames"] = len(await frames_of(call.remote, 3))
        sid = session_of(call.location)
        with pytest.raises(SignallingError) as refused:
            await whep_view(f"{url}whep/{sid}")
        got["whep_without"] = refused.value.status
        viewer = await whep_view(f"{url}whep/{sid}", token=token)
        got["whep_frames"] = len(await frames_of(viewer.remote, 3))
        await viewer.close()
        await call.close()
        got["ended"] = await until(lambda: not server.sessions and not server.viewers)
        return got

    got = serve(shared_job, scenario, token=token)
    for key in ("GET /", "GET /api/faces", "GET /api/status", "POST /whip", "POST /whep/abc",
                "DELETE /whip/sessions/a/b"):
        status, challenge, text = got[key]
        assert status == 401 and challenge == 'Bearer realm="facestream"', (key, got[key])
        assert "access token" in text and text.strip().count("\n") == 0, (key, text)
    assert got["wrong"] == (401, 'Bearer realm="facestream", error="invalid_token"')
    assert got["preflight"] == 204 and got["bearer"] == 200
    assert got["page"] == (200, True) and got["cookie"] == 200
    assert got["whip_without"] == 401 and got["whep_without"] == 401
    assert got["whip_frames"] == 3 and got["whep_frames"] == 3 and got["ended"]


def test_cors_preflight_and_exposed_location(shared_job: SwapJob, clip: list[np.ndarray]) -> None:
    async def scenario(server: FaceServer, url: str) -> dict[str, Any]:
        got: dict[str, Any] = {}
        preflight = {"Origin": "https://player.example", "Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": "authorization, content-type"}
        async with aiohttp.ClientSession() as http:
            for path in ("whip", "whep/abc", "whip/sessions/a/b"):
                async with http.options(url + path, headers=preflight) as r:
                    got[path] = (r.status, dict(r.headers))
            async with http.post(url + "whip", data=b"junk", headers={**SDP, "Origin": "https://x.example"}) as r:
                got["error"] = dict(r.headers)
        call = await whip_publish(f"{url}whip", PacedTrack(clip))
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}whep/{session_of(call.location)}", data=b"v=0", headers=SDP) as r:
                got["whep_error"] = dict(r.headers)
        await call.close()
        return got

    got = serve(shared_job, scenario)
    status, headers = got["whip"]
    assert status == 204 and headers["Access-Control-Allow-Origin"] == "*"
    assert "POST" in headers["Access-Control-Allow-Methods"] and headers["Accept-Post"] == "application/sdp"
    allowed = headers["Access-Control-Allow-Headers"].lower()
    assert "authorization" in allowed and "content-type" in allowed
    assert "Location" in headers["Access-Control-Expose-Headers"]
    assert got["whep/abc"][0] == 204 and "POST" in got["whep/abc"][1]["Access-Control-Allow-Methods"]
    status, headers = got["whip/sessions/a/b"]
    assert status == 204 and "DELETE" in headers["Access-Control-Allow-Methods"]
    for errors in (got["error"], got["whep_error"]):  # refusals readable from another origin too
        assert errors["Access-Control-Allow-Origin"] == "*"


AUDIO_ONLY = ("v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n"
              "c=IN IP4 127.0.0.1\r\na=candidate:1 1 udp 1 127.0.0.1 9 typ host\r\na=sendonly\r\n")


def test_malformed_whip_and_whep_requests_get_a_one_line_4xx(shared_job: SwapJob, clip: list[np.ndarray]) -> None:
    async def scenario(server: FaceServer, url: str) -> dict[str, tuple[int, str, str]]:
        seen: dict[str, tuple[int, str, str]] = {}
        # A real offer without its candidates (a trickling client).
        from aiortc import RTCPeerConnection

        pc = RTCPeerConnection()
        pc.addTransceiver(PacedTrack(clip), direction="sendonly")
        offer = await pc.createOffer()  # before setLocalDescription: no candidates yet
        await pc.close()
        send = RTCPeerConnection()
        send.addTransceiver(PacedTrack(clip), direction="sendonly")
        await send.setLocalDescription(await send.createOffer())
        sendonly = send.localDescription.sdp
        await send.close()
        recv = RTCPeerConnection()
        recv.addTransceiver("video", direction="recvonly")
        await recv.setLocalDescription(await recv.createOffer())
        recvonly = recv.localDescription.sdp
        await recv.close()
        call = await whip_publish(f"{url}whip", PacedTrack(clip))
        sid = session_of(call.location)
        cases: list[tuple[str, str, str, bytes, dict[str, str]]] = [
            ("json content type", "POST", "whip", b'{"sdp": "v=0"}', {"Content-Type": "application/json"}),
            ("no content type", "POST", "whip", b"v=0", {}),
            ("empty", "POST", "whip", b"", SDP),
            ("garbage", "POST", "whip", b"\x00\x01garbage", SDP),
            ("not utf-8", "POST", "whip", b"v=0\r\n\xff\xfe", SDP),
            ("not sdp", "POST", "whip", b"hello world", SDP),
            ("broken sdp", "POST", "whip", b"v=0\r\nm=video x\r\na=candidate:zzz\r\n", SDP),
            ("audio only", "POST", "whip", AUDIO_ONLY.encode(), SDP),
            ("no candidates", "POST", "whip", offer.sdp.encode(), SDP),
            ("whip recvonly", "POST", "whip", recvonly.encode(), SDP),
            ("unknown face", "POST", "whip/nope", b"v=0", SDP),
            ("too large", "POST", "whip", b"v=0\r\n" + b"a=x\r\n" * 20000, SDP),
            ("unknown resource", "DELETE", "whip/sessions/nope/nope", b"", {}),
            ("wrong key", "DELETE", f"whip/sessions/{sid}/nope", b"", {}),
            ("patch", "PATCH", call.location.removeprefix(url), b"a=end-of-candidates", {}),
            ("get endpoint", "GET", "whip", b"", {}),
            ("unknown session", "POST", "whep/nope", recvonly.encode(), SDP),
            ("whep sendonly", "POST", f"whep/{sid}", sendonly.encode(), SDP),
            ("whep empty", "POST", f"whep/{sid}", b"", SDP),
            ("unknown viewer", "DELETE", f"whep/{sid}/viewers/nope", b"", {}),
        ]
        async with aiohttp.ClientSession() as http:
            for name, method, path, body, headers in cases:
                async with http.request(method, url + path, data=body, headers=headers) as r:
                    seen[name] = (r.status, r.content_type, await r.text())
        seen["still live"] = (200 if sid in server.sessions else 0, "", "")
        await call.close()
        return seen

    seen = serve(shared_job, scenario)
    expected = {"json content type": 415, "no content type": 415, "empty": 400, "garbage": 400,
                "not utf-8": 400, "not sdp": 400, "broken sdp": 400, "audio only": 400, "no candidates": 400,
                "whip recvonly": 400, "unknown face": 404, "too large": 413, "unknown resource": 404,
                "wrong key": 404, "patch": 405, "get endpoint": 405, "unknown session": 404,
                "whep sendonly": 400, "whep empty": 400, "unknown viewer": 404}
    assert {k: seen[k][0] for k in expected} == expected, seen
    for name in expected:
        status, kind, text = seen[name]
        assert kind == "text/plain" and text.endswith("\n") and text.count("\n") == 1, (name, text)
        assert "Traceback" not in text and len(text) < 300, (name, text)
    assert "application/sdp" in seen["json content type"][2]
    assert "no video" in seen["audio only"][2] and "ICE candidates" in seen["no candidates"][2]
    assert "video is recvonly" in seen["whip recvonly"][2] and "video is sendonly" in seen["whep sendonly"][2]
    assert seen["still live"][0] == 200  # none of it disturbed the live session


@pytest.mark.slow
def test_serve_token_file_protects_the_server(source_photo: Path, tmp_path: Path) -> None:
    import urllib.error
    import urllib.request

    token_file = tmp_path / "token.txt"
    token_file.write_text("from-a-file-42\n")
    with serve_process(source_photo, "--token-file", str(token_file)) as (proc, url):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "api/faces", timeout=10)
        assert refused.value.code == 401
        request = urllib.request.Request(url + "api/faces", headers={"Authorization": "Bearer from-a-file-42"})
        assert urllib.request.urlopen(request, timeout=10).status == 200


@pytest.mark.parametrize("args, message", [
    (["--token-file", "/nonexistent/token"], "--token-file '/nonexistent/token': no such file"),
    (["--token", ""], "--token: the token is empty"),
    (["--token", "two words"], "--token: the token must be printable ASCII without spaces"),
])
def test_a_bad_token_is_a_one_line_error(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from stream.cli.main import main

    code = main(["serve", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and err == [f"facestream: error: {message}"], err


@pytest.mark.slow
def test_live_output_whep_serves_the_run_to_viewers(source_photo: Path, tmp_path: Path,
                                                     source_identity: tuple[Identity, np.ndarray]) -> None:

    from stream.media.demo_clips import make_single_face_clip

    clip_path = tmp_path / "camera.mp4"
    make_single_face_clip(clip_path, seconds=12.0, fps=30, size=(640, 360))
    with live_whep_process(source_photo, str(clip_path), "--token", "live-token", "--quiet") as (proc, url):
        async def watch() -> dict[str, Any]:
            got: dict[str, Any] = {}
            with pytest.raises(SignallingError) as refused:
                await whep_view(f"{url}whep")
            got["without_token"] = refused.value.status
            first = await whep_view(f"{url}whep", token="live-token")  # the bare endpoint, and by name
            second = await whep_view(f"{url}whep/live", token="live-token")
            assert first.location.startswith(f"{url}whep/live/viewers/")
            got["first"] = await frames_of(first.remote, 20)
            got["second"] = await frames_of(second.remote, 20)
            with pytest.raises(SignallingError) as refused:
                await whep_view(f"{url}whep/other", token="live-token")
            got["other"] = refused.value.status
            got["delete"] = await first.delete()
            await first.pc.close()
            got["second_more"] = len(await frames_of(second.remote, 10))
            await second.close()
            return got

        got = asyncio.run(watch())
        out, err = proc.communicate(timeout=60)  # the clip ends: the run ends, the server with it
    assert proc.returncode == 0, err
    assert got["without_token"] == 401 and got["other"] == 404 and got["delete"] == 200 and got["second_more"] == 10
    identity, target = source_identity
    with av.open(str(clip_path)) as container:
        sent = next(container.decode(video=0)).to_ndarray(format="bgr24")
    before = closest(identity, sent, target)
    for key in ("first", "second"):
        frame = got[key][-1]
        assert (frame.width, frame.height) == (640, 360)
        after = closest(identity, frame.to_ndarray(format="bgr24"), target)
        assert after < before - 0.03, (key, before, after)


def test_a_malformed_whep_output_is_a_one_line_error(source_photo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from stream.cli.main import main

    code = main(["live", "--source", str(source_photo), "--input", "webcam:0", "--output", "whep:notaport"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and err == ["facestream: error: --output 'whep:notaport': expected whep, whep:PORT or "
                                 "whep:HOST:PORT"], err
    code = main(["live", "--source", str(source_photo), "--input", "webcam:0", "--output", "out.mp4",
                 "--token", "abc"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and err == ["facestream: error: --token and --token-file apply to --output whep only"], err
