"""Standard WHIP and WHEP clients (aiortc): what OBS or a WHEP player does, in a few lines,
knowing nothing of `facestream serve`'s JSON API. Used by the tests and the benchmark."""
from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

from aiortc import MediaStreamTrack

SDP_TYPE = "application/sdp"


class SignallingError(ConnectionError):
    """The server refused the offer: its status and its one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"HTTP {status}: {reason}")
        self.status = status
        self.reason = reason


@dataclass
class MediaCall:
    """A WHIP or WHEP client's session: its connection, the resource to DELETE, and a
    future of the video track it receives (a WHIP publisher offering sendonly gets none),
    and of the sound track (a publisher that sent sound and offered to receive gets it back)."""

    pc: Any
    location: str
    remote: asyncio.Future[MediaStreamTrack]
    token: str | None = None
    remote_audio: asyncio.Future[MediaStreamTrack] | None = None

    async def delete(self) -> int:
        """End the session on the server (DELETE its resource); the HTTP status."""
        import aiohttp

        async with aiohttp.ClientSession() as http:
            async with http.delete(self.location, headers=_auth(self.token)) as response:
                return response.status

    async def close(self, delete: bool = True) -> None:
        if delete:
            try:
                await self.delete()
            except OSError:
                pass
        await self.pc.close()


async def whip_publish(url: str, track: MediaStreamTrack, token: str | None = None, receive: bool = True,
                       ice_addresses: Sequence[str] | None = None,
                       audio: MediaStreamTrack | None = None) -> MediaCall:
    """Publish `track` to a WHIP endpoint (`url`, e.g. http://host:8080/whip); `receive`:
    offer sendrecv and take back the video the server sends (else sendonly, as OBS);
    `audio`: a sound track sent too (and, with `receive`, the server's sound taken back:
    `MediaCall.remote_audio`)."""
    from aiortc import RTCPeerConnection

    pc = RTCPeerConnection()
    remote = _remote_video(pc)
    remote_audio = _remote_track(pc, "audio")
    pc.addTransceiver(track, direction="sendrecv" if receive else "sendonly")
    if audio is not None:
        pc.addTransceiver(audio, direction="sendrecv" if receive else "sendonly")
    call = await _exchange(pc, url, token, remote, ice_addresses)
    call.remote_audio = remote_audio
    return call


async def whep_view(url: str, token: str | None = None, ice_addresses: Sequence[str] | None = None,
                    audio: bool = False) -> MediaCall:
    """Watch a WHEP endpoint's stream (`url`, e.g. http://host:8080/whep/SESSION); `audio`:
    offer to receive its sound too (`MediaCall.remote_audio`)."""
    from aiortc import RTCPeerConnection

    pc = RTCPeerConnection()
    remote = _remote_video(pc)
    remote_audio = _remote_track(pc, "audio")
    pc.addTransceiver("video", direction="recvonly")
    if audio:
        pc.addTransceiver("audio", direction="recvonly")
    call = await _exchange(pc, url, token, remote, ice_addresses)
    call.remote_audio = remote_audio
    return call


def _remote_video(pc: Any) -> asyncio.Future[MediaStreamTrack]:
    return _remote_track(pc, "video")


def _remote_track(pc: Any, kind: str) -> asyncio.Future[MediaStreamTrack]:
    """A future of the first track of `kind` the peer sends."""
    remote: asyncio.Future[MediaStreamTrack] = asyncio.get_running_loop().create_future()

    @pc.on("track")
    def _on_track(t: MediaStreamTrack) -> None:
        if t.kind == kind and not remote.done():
            remote.set_result(t)

    return remote


async def _exchange(pc: Any, url: str, token: str | None, remote: asyncio.Future[MediaStreamTrack],
                    ice_addresses: Sequence[str] | None) -> MediaCall:
    """One POST of the complete offer (candidates gathered), the answer set: RFC 9725's
    exchange without trickle."""
    import aiohttp
    from aiortc import RTCSessionDescription

    from stream.server.ice import restrict_gathering

    restrict_gathering(pc, ice_addresses)
    await pc.setLocalDescription(await pc.createOffer())
    headers = {"Content-Type": SDP_TYPE, **_auth(token)}
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(url, data=pc.localDescription.sdp.encode(), headers=headers) as response:
                text = await response.text()
                if response.status != 201:
                    raise SignallingError(response.status, text.strip())
                location = urljoin(url, response.headers["Location"])
        await pc.setRemoteDescription(RTCSessionDescription(sdp=text, type="answer"))
    except BaseException:
        await pc.close()
        raise
    return MediaCall(pc, location, remote, token)


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}
