"""WHIP ingest (RFC 9725) and WHEP egress on `facestream serve`: the standard one-request
WebRTC signalling, so OBS, encoders and players that know nothing of our JSON API can
publish to the server and watch what it swaps.

- `POST /whip` (the default face) or `POST /whip/FACE` with an SDP offer
  (`Content-Type: application/sdp`): a peer session like the page's (same slots, same
  connect and idle timeouts), answered `201 Created` with the SDP answer and the session's
  resource in `Location`; the swapped video goes back on the same connection when the
  publisher offered to receive (sendrecv), and to WHEP viewers in any case.
  `DELETE` on the resource ends the session.
- `POST /whep/SESSION` with a viewer's offer (recvonly): a viewer of that session's
  swapped stream (a WHIP publisher's or a page's), `201` + `Location`; `DELETE` ends it.
- `OPTIONS` on any of these answers a CORS preflight; `PATCH` (trickle ICE, ICE restart)
  is not offered (405): offers and answers carry all their candidates.

Refusals are 4xx with one line of text; resources are named by unguessable ids (knowing
the Location is what allows deleting it). The server's access token, when set, is checked
by the server's middleware for every request here too.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Protocol

from aiohttp import web
from aiortc import RTCSessionDescription

from stream.server.access import VISITOR, same_token
from stream.server.faces import FaceEntry, FaceLibrary
from stream.server.peer import MAX_SDP_CHARS, OfferError, PeerSession, check_offer
from stream.server.refusal import ApiError, shown
from stream.server.viewer import Viewer

SDP_TYPE = "application/sdp"
MAX_VIEWERS = 8  # WHEP viewers at once, every session together: each is one more encode
ENDPOINT_METHODS = "POST, OPTIONS"
RESOURCE_METHODS = "DELETE, OPTIONS"
_PREFIXES = ("/whip", "/whep")
_DIRECTION = re.compile(r"a=(sendrecv|sendonly|recvonly|inactive)\s*$")


def is_media_path(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in _PREFIXES)


def media_headers(request: web.Request) -> dict[str, str]:
    """CORS for the WHIP/WHEP endpoints, on every answer (errors included, so a page on
    another origin can read them). Credentials are a bearer header, never cookies, so any
    origin may call."""
    return {"Access-Control-Allow-Origin": "*",
            "Access-Control-Expose-Headers": "Location, Accept-Post, Allow, Link, ETag, WWW-Authenticate"}


def video_direction(sdp: str) -> str:
    """The direction the offerer gives its first video section (sendrecv when unsaid)."""
    in_video, found = False, None
    for raw in sdp.splitlines():
        line = raw.strip()
        if line.startswith("m="):
            if in_video:
                break
            in_video = line.startswith("m=video ")
        elif in_video:
            match = _DIRECTION.match(line)
            if match:
                found = match.group(1)
    return found or "sendrecv"


async def read_offer(request: web.Request, what: str, directions: tuple[str, ...]) -> str:
    """The request's SDP offer, checked: the content type, text, an SDP with video sent the
    way `directions` allow, and its ICE candidates (no trickle). ApiError otherwise."""
    if request.content_type != SDP_TYPE:
        got = request.headers.get("Content-Type") or "none"
        raise ApiError(415, f"{what}: send the SDP offer as Content-Type: {SDP_TYPE} (got {shown(got)})",
                       {"Accept-Post": SDP_TYPE})
    if request.content_length is not None and request.content_length > MAX_SDP_CHARS:
        raise ApiError(413, f"{what}: the offer is {request.content_length} bytes; at most {MAX_SDP_CHARS} are taken")
    body = await request.content.read(MAX_SDP_CHARS + 1)
    if len(body) > MAX_SDP_CHARS:
        raise ApiError(413, f"{what}: the offer is over {MAX_SDP_CHARS} bytes")
    try:
        sdp = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"{what}: the offer is not UTF-8 text") from exc
    if not sdp.strip():
        raise ApiError(400, f"{what}: the body is empty (send the SDP offer)")
    if not sdp.lstrip().startswith("v=0"):
        raise ApiError(400, f"{what}: the body is not an SDP offer (it must start with v=0)")
    try:
        check_offer(sdp)
    except OfferError as exc:
        raise ApiError(400, f"{what}: {exc}") from exc
    direction = video_direction(sdp)
    if direction not in directions:
        raise ApiError(400, f"{what}: the offer's video is {direction}; this endpoint takes "
                            f"{' or '.join(directions)}")
    return sdp


def sdp_created(answer: RTCSessionDescription, location: str) -> web.Response:
    return web.Response(status=201, text=answer.sdp, content_type=SDP_TYPE, headers={"Location": location})


class MediaServer(Protocol):
    """What the endpoints need of the server (stream.server.app.FaceServer)."""

    library: FaceLibrary
    sessions: dict[str, PeerSession]
    viewers: dict[str, Viewer]
    max_viewers: int
    codec: str
    ice_addresses: list[str] | None
    connect_timeout: float
    say: Callable[[str], None]

    async def start_session(self, sdp: str, face: FaceEntry, visitor: str | None,
                            via: str = "page") -> tuple[PeerSession, RTCSessionDescription]: ...

    async def end_session(self, session_id: str) -> None: ...

    async def end_viewer(self, viewer_id: str) -> None: ...


class MediaEndpoints:
    """The WHIP and WHEP routes of a FaceServer."""

    def __init__(self, server: MediaServer) -> None:
        self.server = server

    def add_routes(self, app: web.Application) -> None:
        router = app.router
        for path in ("/whip", "/whip/{face}", "/whep/{session}"):
            router.add_post(path, self.whip if path.startswith("/whip") else self.whep)
            router.add_route("OPTIONS", path, self.preflight_endpoint)
        for path in ("/whip/sessions/{id}/{key}", "/whep/{session}/viewers/{viewer}"):
            router.add_delete(path, self.whip_delete if path.startswith("/whip") else self.whep_delete)
            router.add_route("OPTIONS", path, self.preflight_resource)

    async def preflight_endpoint(self, request: web.Request) -> web.Response:
        return _preflight(ENDPOINT_METHODS, {"Accept-Post": SDP_TYPE})

    async def preflight_resource(self, request: web.Request) -> web.Response:
        return _preflight(RESOURCE_METHODS, {})

    # -- WHIP ------------------------------------------------------------------------

    async def whip(self, request: web.Request) -> web.Response:
        server = self.server
        face_id = request.match_info.get("face") or server.library.default or ""
        face = server.library.get(face_id, request[VISITOR])
        if face is None:
            raise ApiError(404, f"WHIP: face {shown(face_id)} is not on this server "
                                "(POST /whip for the default face, or /whip/FACE with an id of GET /api/faces)")
        sdp = await read_offer(request, "WHIP", ("sendonly", "sendrecv"))
        session, answer = await server.start_session(sdp, face, request[VISITOR], via="whip")
        server.say(f"peer {session.id}: WHIP publisher, face {face.name}; watch it at /whep/{session.id}")
        return sdp_created(answer, f"/whip/sessions/{session.id}/{session.token}")

    async def whip_delete(self, request: web.Request) -> web.Response:
        sid, key = request.match_info["id"], request.match_info["key"]
        session = self.server.sessions.get(sid)
        if session is None or session.via != "whip" or not same_token(key, session.token):
            raise ApiError(404, f"WHIP: no session at {shown(request.path)} (ended, or never started)")
        session.ended = "deleted by the WHIP client"
        await self.server.end_session(sid)
        return web.Response(status=200, text="ended\n", content_type="text/plain")

    # -- WHEP ------------------------------------------------------------------------

    async def whep(self, request: web.Request) -> web.Response:
        server = self.server
        sid = request.match_info["session"]
        session = server.sessions.get(sid)
        if session is None:
            raise ApiError(404, f"WHEP: no live session {shown(sid)}")
        sdp = await read_offer(request, "WHEP", ("recvonly", "sendrecv"))
        if len(server.viewers) >= server.max_viewers:
            raise ApiError(503, f"WHEP: this server takes {server.max_viewers} viewers at once; all are in use",
                           {"Retry-After": "10"})
        viewer = Viewer(sid, session.relay, server.codec, ice_addresses=server.ice_addresses,
                        connect_timeout=server.connect_timeout, on_ended=server.end_viewer, say=server.say)
        server.viewers[viewer.id] = viewer
        try:
            answer = await viewer.answer(RTCSessionDescription(sdp=sdp, type="offer"))
        except OfferError as exc:
            await server.end_viewer(viewer.id)
            raise ApiError(400, f"WHEP: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - aiortc's parse errors name its code, not the problem
            await server.end_viewer(viewer.id)
            raise ApiError(400, "WHEP: the SDP could not be used (not a WebRTC offer this server can answer)") from exc
        server.say(f"{viewer.short}: watching ({len(server.viewers)} viewer(s) in all)")
        return sdp_created(answer, f"/whep/{sid}/viewers/{viewer.id}")

    async def whep_delete(self, request: web.Request) -> web.Response:
        sid, vid = request.match_info["session"], request.match_info["viewer"]
        viewer = self.server.viewers.get(vid)
        if viewer is None or viewer.stream != sid:
            raise ApiError(404, f"WHEP: no viewer at {shown(request.path)} (ended, or never started)")
        viewer.ended = "deleted by the WHEP client"
        await self.server.end_viewer(vid)
        return web.Response(status=200, text="ended\n", content_type="text/plain")


def _preflight(methods: str, extra: dict[str, str]) -> web.Response:
    return web.Response(status=204, headers={
        "Allow": methods, "Access-Control-Allow-Methods": methods,
        "Access-Control-Allow-Headers": "Authorization, Content-Type, If-Match",
        "Access-Control-Max-Age": "86400", **extra})
