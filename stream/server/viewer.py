"""One WHEP viewer: a peer connection that sends a session's swapped video (its relay's
newest frames) and receives nothing. It ends when its peer does not connect in time, when
its connection fails or closes, when it is deleted, or when the session it watches ends."""
from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable

from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from stream.server.ice import restrict_gathering
from stream.server.peer import CONNECT_TIMEOUT_S, WATCH_PERIOD_S, OfferError, prefer_codec
from stream.sinks.relay import FrameRelay, RelayTrack
from stream.sinks.webrtc_sound import DelayedSoundTrack

log = logging.getLogger(__name__)


class Viewer:
    """A WHEP viewer of `relay` (the stream named `stream`)."""

    def __init__(self, stream: str, relay: FrameRelay, codec: str = "vp8",
                 ice_addresses: list[str] | None = None, connect_timeout: float = CONNECT_TIMEOUT_S,
                 on_ended: Callable[[str], Awaitable[None]] | None = None,
                 say: Callable[[str], None] | None = None) -> None:
        self.id = secrets.token_urlsafe(18)  # the resource's name: unguessable, it is the capability
        self.stream = stream
        self.relay = relay
        self.codec_wanted = codec
        self.ice_addresses = ice_addresses
        self.connect_timeout = connect_timeout
        self.on_ended = on_ended
        self.say = say or (lambda line: None)
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.track: RelayTrack | None = None
        self.sound: DelayedSoundTrack | None = None
        self.closed = False
        self.ended: str | None = None
        self._watch: asyncio.Task[None] | None = None

    @property
    def short(self) -> str:
        return f"viewer {self.id[:6]} of {self.stream}"

    async def answer(self, offer: RTCSessionDescription) -> RTCSessionDescription:
        pc = self.pc
        pc.on("connectionstatechange", self._on_state)
        await pc.setRemoteDescription(offer)
        video = [t for t in pc.getTransceivers() if t.kind == "video"]
        if not video:
            raise OfferError("offer: the SDP has no video (m=video) section")
        self.track = self.relay.track()
        pc.addTrack(self.track)
        audio = [t for t in pc.getTransceivers() if t.kind == "audio"]
        feed = self.relay.sound
        if audio and feed is not None and getattr(audio[0], "_offerDirection", None) in ("sendonly", "sendrecv"):
            self.sound = feed.track()  # the session's sound, held as its pictures are
            pc.addTrack(self.sound)
        prefer_codec(video[0], self.codec_wanted)
        restrict_gathering(pc, self.ice_addresses)
        await pc.setLocalDescription(await pc.createAnswer())
        self._watch = asyncio.ensure_future(self._watch_connect())
        return pc.localDescription

    async def _watch_connect(self) -> None:
        start = time.monotonic()
        while not self.closed and self.pc.connectionState != "connected":
            if time.monotonic() - start > self.connect_timeout:
                return await self._end(f"not connected within {self.connect_timeout:g} s")
            await asyncio.sleep(WATCH_PERIOD_S)

    async def _on_state(self) -> None:
        if self.pc.connectionState in ("failed", "closed") and not self.closed:
            await self._end(f"the connection {self.pc.connectionState}")

    async def _end(self, why: str) -> None:
        self.ended = self.ended or why
        self.say(f"{self.short}: closed, {why}")
        if self.on_ended is not None:
            await self.on_ended(self.id)
        else:
            await self.close()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._watch is not None and self._watch is not asyncio.current_task():
            self._watch.cancel()
        if self.track is not None:
            self.track.stop()
        if self.sound is not None:
            self.sound.stop()
        await self.pc.close()
