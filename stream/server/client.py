"""The client side of WebRTC, as a browser would do it: a paced stand-in camera track, and
the offer/answer exchange with a `facestream serve`. Used by the benchmark and the tests,
and by anyone scripting a peer."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import av
import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from stream.media.clock import VIDEO_TIME_BASE


class PacedTrack(MediaStreamTrack):
    """A video track that plays BGR pictures in a loop at `fps`, in real time: a stand-in
    camera for a WebRTC client (the benchmark's and the tests' peer). Subclasses with
    another supply of frames override `frame_at`."""

    kind = "video"

    def __init__(self, pictures: Sequence[np.ndarray] = (), fps: float = 30.0) -> None:
        super().__init__()
        self.frames = [av.VideoFrame.from_ndarray(p, format="bgr24").reformat(format="yuv420p")
                       for p in pictures]
        self.fps = fps
        self.sent = 0
        self._t0: float | None = None

    def frame_at(self, n: int) -> av.VideoFrame | None:
        """Frame `n` of the track; None ends it."""
        return self.frames[n % len(self.frames)] if self.frames else None

    async def recv(self) -> av.VideoFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._t0 is None:
            self._t0 = now
        due = self._t0 + self.sent / self.fps
        if due > now:
            await asyncio.sleep(due - now)
        frame = self.frame_at(self.sent)
        if frame is None:
            self.stop()
            raise MediaStreamError
        frame.pts = round(self.sent / self.fps / VIDEO_TIME_BASE)
        frame.time_base = VIDEO_TIME_BASE
        self.sent += 1
        return frame


@dataclass
class PeerCall:
    """A client's session on a `facestream serve`: its connection, the session id and the
    token that reading, changing or closing it needs, and a future of the swapped track."""

    pc: Any
    session: str
    token: str
    remote: asyncio.Future[MediaStreamTrack]
    base_url: str
    remote_audio: asyncio.Future[MediaStreamTrack] | None = None  # the sound sent back (see `audio`)

    @property
    def headers(self) -> dict[str, str]:
        return {"X-Session-Token": self.token}

    @property
    def url(self) -> str:
        return f"{self.base_url.rstrip('/')}/api/sessions/{self.session}"


async def open_session(base_url: str, track: MediaStreamTrack, face: str | None = None,
                       session: Any = None, visitor: str | None = None,
                       ice_addresses: Sequence[str] | None = None,
                       audio: MediaStreamTrack | None = None) -> PeerCall:
    """Connect `track` to a `facestream serve` at `base_url` as a browser would: offer
    (sent once ICE gathering is complete), answer, and a future of the swapped track
    coming back. `session`: an aiohttp ClientSession to reuse (its cookie is the visitor);
    `visitor`: a visitor token sent as the X-Visitor header instead; `ice_addresses`:
    gather this peer's candidates there only (None: aiortc's default); `audio`: a microphone
    track sent too, its sound coming back with the swapped video (`PeerCall.remote_audio`)."""
    import aiohttp
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

    from stream.server.ice import restrict_gathering

    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    loop = asyncio.get_running_loop()
    remote: asyncio.Future[MediaStreamTrack] = loop.create_future()
    remote_audio: asyncio.Future[MediaStreamTrack] = loop.create_future()

    @pc.on("track")
    def _on_track(t: MediaStreamTrack) -> None:
        wanted = remote if t.kind == "video" else remote_audio
        if not wanted.done():
            wanted.set_result(t)

    pc.addTrack(track)
    if audio is not None:
        pc.addTrack(audio)
    restrict_gathering(pc, ice_addresses)
    await pc.setLocalDescription(await pc.createOffer())
    own = session is None
    http = aiohttp.ClientSession() if own else session
    headers = {"X-Visitor": visitor} if visitor else {}
    try:
        async with http.post(base_url.rstrip("/") + "/api/offer", headers=headers,
                             json={"sdp": pc.localDescription.sdp, "type": pc.localDescription.type,
                                   "face": face}) as response:
            body = await response.json()
            if response.status != 200:
                await pc.close()
                raise ConnectionError(body.get("error", f"HTTP {response.status}"))
    finally:
        if own:
            await http.close()
    await pc.setRemoteDescription(RTCSessionDescription(sdp=body["sdp"], type=body["type"]))
    return PeerCall(pc, body["session"], body["token"], remote, base_url, remote_audio)


async def call_server(base_url: str, track: MediaStreamTrack, face: str | None = None,
                      session: Any = None) -> tuple[Any, str, asyncio.Future[MediaStreamTrack]]:
    """`open_session`, returning (pc, session id, remote track future) (the token is in
    `open_session`'s answer)."""
    call = await open_session(base_url, track, face, session)
    return call.pc, call.session, call.remote
