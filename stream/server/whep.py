"""WHEP egress: a viewer POSTs its offer (recvonly) to `/whep/STREAM` and gets the stream's
swapped video (its relay's newest frames), `201` + `Location`; `DELETE` ends it. The
streams are `serve`'s sessions (a WHIP publisher's or a page's), or the one of a `live`
run with `--output whep`."""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from aiohttp import web
from aiortc import RTCSessionDescription

from stream.server.peer import OfferError
from stream.server.refusal import ApiError, shown
from stream.server.signalling import ENDPOINT_METHODS, RESOURCE_METHODS, SDP_TYPE, preflight, read_offer, sdp_created
from stream.server.viewer import Viewer
from stream.sinks.relay import FrameRelay


class ViewerServer(Protocol):
    """What the WHEP endpoint needs of its server."""

    viewers: dict[str, Viewer]
    max_viewers: int
    codec: str
    ice_addresses: list[str] | None
    connect_timeout: float
    say: Callable[[str], None]

    def relay_of(self, stream: str) -> FrameRelay | None: ...

    async def end_viewer(self, viewer_id: str) -> None: ...


class WhepEndpoints:
    """`POST /whep/{session}`, `DELETE /whep/{session}/viewers/{viewer}`, their preflights."""

    def __init__(self, server: ViewerServer, default_stream: str | None = None) -> None:
        """`default_stream`: the stream a bare `POST /whep` watches (None: no such route)."""
        self.server = server
        self.default_stream = default_stream

    def add_routes(self, app: web.Application) -> None:
        router = app.router
        if self.default_stream is not None:
            router.add_post("/whep", self.whep)
            router.add_route("OPTIONS", "/whep", self.preflight_endpoint)
        router.add_post("/whep/{session}", self.whep)
        router.add_route("OPTIONS", "/whep/{session}", self.preflight_endpoint)
        router.add_delete("/whep/{session}/viewers/{viewer}", self.whep_delete)
        router.add_route("OPTIONS", "/whep/{session}/viewers/{viewer}", self.preflight_resource)

    async def preflight_endpoint(self, request: web.Request) -> web.Response:
        return preflight(ENDPOINT_METHODS, {"Accept-Post": SDP_TYPE})

    async def preflight_resource(self, request: web.Request) -> web.Response:
        return preflight(RESOURCE_METHODS, {})

    async def whep(self, request: web.Request) -> web.Response:
        server = self.server
        sid = request.match_info.get("session") or self.default_stream or ""
        relay = server.relay_of(sid)
        if relay is None:
            raise ApiError(404, f"WHEP: no live session {shown(sid)}")
        sdp = await read_offer(request, "WHEP", ("recvonly", "sendrecv"))
        if len(server.viewers) >= server.max_viewers:
            raise ApiError(503, f"WHEP: this server takes {server.max_viewers} viewers at once; all are in use",
                           {"Retry-After": "10"}, reason="viewers_full")
        viewer = Viewer(sid, relay, server.codec, ice_addresses=server.ice_addresses,
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
