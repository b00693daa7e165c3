"""The client side of WebRTC, as a browser would do it: a paced stand-in camera track, and
the offer/answer exchange with a `facestream serve`. Used by the benchmark and the tests,
and by anyone scripting a peer."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
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


async def call_server(base_url: str, track: MediaStreamTrack, face: str | None = None,
                      session: Any = None) -> tuple[Any, str, asyncio.Future[MediaStreamTrack]]:
    """Connect `track` to a `facestream serve` at `base_url` as a browser would: offer,
    answer, and a future of the swapped track coming back. Returns (pc, session id,
    remote track future). `session` is an aiohttp ClientSession to reuse."""
    import aiohttp
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    loop = asyncio.get_running_loop()
    remote: asyncio.Future[MediaStreamTrack] = loop.create_future()

    @pc.on("track")
    def _on_track(t: MediaStreamTrack) -> None:
        if t.kind == "video" and not remote.done():
            remote.set_result(t)

    pc.addTrack(track)
    await pc.setLocalDescription(await pc.createOffer())
    own = session is None
    http = aiohttp.ClientSession() if own else session
    try:
        async with http.post(base_url.rstrip("/") + "/api/offer",
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
    return pc, body["session"], remote
