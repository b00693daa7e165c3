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

from typing import Protocol

from aiohttp import web
from aiortc import RTCSessionDescription

from stream.server.access import VISITOR, same_token
from stream.server.faces import FaceEntry, FaceLibrary
from stream.server.peer import PeerSession
from stream.server.refusal import ApiError, shown
from stream.server.signalling import read_offer, sdp_created
from stream.server.whep import ViewerServer, WhepEndpoints


class PublishServer(ViewerServer, Protocol):
    """What the WHIP endpoint needs of the server (stream.server.app.FaceServer)."""

    library: FaceLibrary
    sessions: dict[str, PeerSession]

    async def start_session(self, sdp: str, face: FaceEntry, visitor: str | None,
                            via: str = "page") -> tuple[PeerSession, RTCSessionDescription]: ...

    async def end_session(self, session_id: str) -> None: ...


class MediaEndpoints(WhepEndpoints):
    """The WHIP and WHEP routes of a FaceServer."""

    def __init__(self, server: PublishServer) -> None:
        super().__init__(server)
        self.publish = server

    def add_routes(self, app: web.Application) -> None:
        router = app.router
        for path in ("/whip", "/whip/{face}"):
            router.add_post(path, self.whip)
            router.add_route("OPTIONS", path, self.preflight_endpoint)
        router.add_delete("/whip/sessions/{id}/{key}", self.whip_delete)
        router.add_route("OPTIONS", "/whip/sessions/{id}/{key}", self.preflight_resource)
        super().add_routes(app)

    async def whip(self, request: web.Request) -> web.Response:
        server = self.publish
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
        session = self.publish.sessions.get(sid)
        if session is None or session.via != "whip" or not same_token(key, session.token):
            raise ApiError(404, f"WHIP: no session at {shown(request.path)} (ended, or never started)")
        session.ended = "deleted by the WHIP client"
        del session  # not held here while it is closed and collected
        await self.publish.end_session(sid)
        return web.Response(status=200, text="ended\n", content_type="text/plain")
