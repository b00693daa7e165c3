"""The shape WHIP (RFC 9725) and WHEP share: an SDP offer POSTed as `application/sdp`,
answered 201 with the answer and a `Location`; CORS on every answer; refusals as one line
of text. Used by `serve`'s endpoints and by `live --output whep`'s own small server."""
from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiortc import RTCSessionDescription

from stream.server.access import challenge, given_token, same_token
from stream.server.peer import MAX_SDP_CHARS, OfferError, check_offer
from stream.server.refusal import ApiError, shown

log = logging.getLogger(__name__)

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


def preflight(methods: str, extra: dict[str, str]) -> web.Response:
    return web.Response(status=204, headers={
        "Allow": methods, "Access-Control-Allow-Methods": methods,
        "Access-Control-Allow-Headers": "Authorization, Content-Type, If-Match",
        "Access-Control-Max-Age": "86400", **extra})


def plain_error(status: int, message: str) -> web.Response:
    return web.Response(text=message + "\n", status=status, content_type="text/plain")


def media_middleware(token: str | None) -> Callable[..., Awaitable[web.StreamResponse]]:
    """For a server that has only these endpoints (`live --output whep`): the access
    token, refusals as one line of text (a bug: a one-line 500), CORS on every answer."""

    @web.middleware
    async def guard(request: web.Request,
                    handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        try:
            if token is not None and request.method != "OPTIONS":
                given, _ = given_token(request)
                if not given:
                    raise ApiError(401, f"{request.method} {shown(request.path)}: this server needs its access "
                                        "token (Authorization: Bearer TOKEN)", challenge())
                if not same_token(given, token):
                    raise ApiError(401, f"{request.method} {shown(request.path)}: wrong access token",
                                   challenge("invalid_token"))
            response = await handler(request)
        except ApiError as exc:
            response = plain_error(exc.status, exc.message)
            response.headers.update(exc.headers)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            response = plain_error(exc.status, f"{request.method} {shown(request.path)}: {exc.reason}")
            if "Allow" in exc.headers:
                response.headers["Allow"] = exc.headers["Allow"]
        except Exception:  # a bug: logged with its traceback, the client gets one line
            log.exception("%s %s failed", request.method, request.path)
            response = plain_error(500, "internal error (the server's log has the details)")
        response.headers.update(media_headers(request))
        return response

    return guard
