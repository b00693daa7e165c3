"""`facestream serve`: a WebRTC swap server (aiohttp + aiortc) and its one page.

The browser sends its camera; each peer gets its own pipeline (source, rings, stages,
sink) on models loaded once and shared (`SwapJob.share`), and the swapped video comes back
on the same connection. The page chooses or uploads the source face and shows live
figures, polled from `/api/sessions/ID`.

HTTP API (JSON unless said; every refusal is 4xx with a one-line {"error"}):
- `GET /` the page;
- `GET /api/faces` the operator's faces and the visitor's own uploads; `POST /api/faces`
  (multipart field `photo`, repeated for several photos of one person: one face, made from
  them all); `GET /api/faces/ID.jpg`; `DELETE /api/faces/ID` (one's own);
- `POST /api/offer` {sdp, type, face} -> {sdp, type, session, token, codec};
- with the session's token (header `X-Session-Token`, or `?token=` for sendBeacon):
  `GET /api/sessions/ID` figures; `POST /api/sessions/ID/face` {face};
  `DELETE /api/sessions/ID` (or `POST /api/sessions/ID/close`);
- `GET /api/status`;
- `GET /healthz`, `GET /readyz` (no token, no cookie), `GET /metrics` (Prometheus; see
  stream.server.ops_routes).

WHIP and WHEP (stream.server.whip, .whep): `POST /whip[/FACE]` and `POST /whep/SESSION` with an
SDP offer, answered 201 with the SDP answer and the resource's `Location` to DELETE.
With an access token (`token`), every request but a CORS preflight must carry it
(stream.server.access).

A visitor is the holder of the `facestream_visitor` cookie (or `X-Visitor` header),
given on first contact: uploads are theirs unless the server shares them.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import re
import secrets
import socket
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any, cast

import cv2
import numpy as np
from aiohttp import web
from aiortc import RTCSessionDescription

from engines.errors import EngineError, NoFaceError
from engines.face import ImageBGR
from stream.errors import StreamError, reason_of
from stream.job.source_set import one_person, said_left_out
from stream.job.swap_job import SwapJob
from stream.media.image_header import FORMATS, ImageHeaderError, read_image_header
from stream.ops.listen import bind_socket
from stream.runtime.heap import give_back
from stream.server import CODECS, MAX_UPLOAD_PIXELS
from stream.server.access import VISITOR, challenge, given_token, keep_in_cookie, same_token
from stream.server.faces import FaceEntry, FaceLibrary, new_entry
from stream.server.guard import ConnectionBook, ConnectionLimits, GuardedSite
from stream.server.ops_routes import OPS_PATHS, ServeOps
from stream.server.peer import CONNECT_TIMEOUT_S, IDLE_TIMEOUT_S, OfferError, PeerSession, check_offer
from stream.server.refusal import ApiError
from stream.server.refusal import shown as _shown
from stream.server.signalling import MAX_VIEWERS, is_media_path, media_headers
from stream.server.viewer import Viewer
from stream.server.whip import MediaEndpoints
from stream.sinks.relay import FrameRelay

log = logging.getLogger(__name__)

MAX_UPLOAD_BYTES = 12 * 1024 * 1024
MAX_UPLOAD_VIEWS = 12  # photos of one person in one upload
UPLOAD_WORK_SIDE = 1600  # uploads are searched and kept at most this long a side
VISITOR_COOKIE = "facestream_visitor"
ENDED_KEPT = 256  # ended sessions remembered, to tell their page why
# After a session's end its memory is collected and returned once the coroutine that ended
# it has returned (one turn of the loop), before the next session allocates its own: 0.2 s
# later, a new session's rings went in around the old ones' and a server in a test process
# grew by 30-47 MB over 30 sessions, against none.
GIVE_BACK_AFTER_S = 0.0
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,64}")


class FaceServer:
    """The server's state: the job (models, shared), the face library, the sessions."""

    def __init__(self, job: SwapJob, max_peers: int = 4, codec: str = "vp8",
                 say: Callable[[str], None] | None = None, *,
                 ice_addresses: Sequence[str] | None = ("127.0.0.1",), share_uploads: bool = False,
                 max_upload_pixels: int = MAX_UPLOAD_PIXELS, connect_timeout: float = CONNECT_TIMEOUT_S,
                 idle_timeout: float = IDLE_TIMEOUT_S, library: FaceLibrary | None = None,
                 token: str | None = None, max_viewers: int = MAX_VIEWERS, name: str = "serve",
                 metrics_public: bool = False) -> None:
        """`ice_addresses`: where peers' ICE candidates are gathered (None: every
        interface); `share_uploads`: every visitor sees every upload; `max_upload_pixels`:
        larger pictures are refused from their header; `connect_timeout`, `idle_timeout`:
        a session not connected, or without video, that long is closed; `token`: when set,
        every request must carry it (see stream.server.access); `max_viewers`: WHEP viewers
        at once, all sessions together; `name`: the stream label of its metrics;
        `metrics_public`: /metrics needs no token."""
        if codec not in CODECS:
            raise ValueError(f"codec {codec!r}: choose one of {', '.join(CODECS)}")
        self.job = job
        self.max_peers = max_peers
        self.codec = codec
        self.ice_addresses = None if ice_addresses is None else list(ice_addresses)
        self.max_upload_pixels = max_upload_pixels
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self.library = library or FaceLibrary(share_uploads)
        self.sessions: dict[str, PeerSession] = {}
        self.token = token
        self.max_viewers = max_viewers
        self.viewers: dict[str, Viewer] = {}
        self.ended: collections.OrderedDict[str, tuple[str, str]] = collections.OrderedDict()
        self.sessions_started = 0
        self.say = say or (lambda line: None)  # one line per peer event, for the console
        self._upload_lock = asyncio.Lock()
        self.connections: ConnectionBook | None = None  # set by start_server
        self._collecting: asyncio.Future[None] | None = None  # the collection after a session's end
        self._collect_again = False
        self.ops = ServeOps(self, name, metrics_public)  # probes, metrics, drain

    # -- faces -----------------------------------------------------------------------

    @property
    def faces(self) -> dict[str, FaceEntry]:
        return self.library.entries

    def add_job_faces(self) -> None:
        """The job's --source photos, already prepared by job.open()."""
        for source, prepared in zip(self.job.source_sets, self.job.prepared):
            entry = new_entry(source.face, prepared, Path(source.path).name, owner=None)
            if len(source.views) > 1:
                entry.note = f"{len(source.views)} views of one person"
            self.library.add(entry)

    def face_from_upload(self, data: bytes, name: str, owner: str) -> FaceEntry:
        """Decode an uploaded photo (its size already checked), find its largest face and
        prepare it (blocking). The photo is not kept: only the prepared face and a
        thumbnail."""
        image = cast(ImageBGR | None, cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR))
        if image is None:
            raise ValueError(f"photo {name!r}: not a picture this server can read ({', '.join(FORMATS)})")
        image = _fit_within(image, UPLOAD_WORK_SIDE)
        notes = len(self.job.notes)
        try:
            face = self.job.find_face(name, "uploaded photo", image=image)
        finally:
            del self.job.notes[notes:]  # said to the uploader, not kept for the console
        return new_entry(face, self.job.prepare(face), name, owner)

    def face_from_uploads(self, photos: list[tuple[bytes, str]], owner: str) -> FaceEntry:
        """One face from several uploaded photos of one person (blocking): each photo's
        largest face, those of another person left out (said in the entry's note), prepared
        together (the classical swapper: the view nearest each target's pose; the neural
        ones: the mean identity). One photo: `face_from_upload`."""
        if len(photos) == 1:
            return self.face_from_upload(*photos[0], owner)
        views, faceless = [], []
        notes = len(self.job.notes)
        try:
            for data, name in photos:
                image = cast(ImageBGR | None, cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR))
                if image is None:
                    raise ValueError(f"photo {name!r}: not a picture this server can read ({', '.join(FORMATS)})")
                try:
                    views.append(self.job.find_face(name, "uploaded photo", image=_fit_within(image, UPLOAD_WORK_SIDE)))
                except NoFaceError:
                    faceless.append(name)
        finally:
            del self.job.notes[notes:]  # said to the uploader, not kept for the console
        if not views:
            raise NoFaceError(f"photos {', '.join(repr(n) for _, n in photos)}: no face found in any of them")
        said = [f"no face in {', '.join(faceless)}"] if faceless else []
        if len(views) > 1:
            embedder = self.job.models.embedder
            views, dropped = one_person(views, embedder, f"photos {', '.join(repr(v.path) for v in views)}",
                                        lambda v: v.path)
            if dropped:
                said.append(said_left_out(dropped, embedder.threshold, len(views)))
        entry = new_entry(views[0], self.job.prepare_set(views), f"{views[0].path} +{len(views) - 1}"
                          if len(views) > 1 else views[0].path, owner)
        entry.note = "; ".join([f"{len(views)} photos of one person"] + said)
        return entry

    def _face_json(self, entry: FaceEntry, visitor: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {"id": entry.id, "name": entry.name, "thumb": f"/api/faces/{entry.id}.jpg",
                               "uploaded": entry.uploaded, "mine": entry.uploaded and entry.owner == visitor,
                               "faces_found": entry.faces_found}
        notes = [f"{entry.faces_found} faces found; using the largest"] if entry.faces_found > 1 else []
        if entry.note:
            notes.append(entry.note)
        if notes:
            out["note"] = "; ".join(notes)
        return out

    # -- sessions --------------------------------------------------------------------

    async def end_session(self, session_id: str) -> None:
        session = self.sessions.pop(session_id, None)
        watching = [v for v in self.viewers.values() if v.stream == session_id]
        for viewer in watching:
            viewer.ended = viewer.ended or "the session ended"
        await asyncio.gather(*(self.end_viewer(v.id) for v in watching))
        if session is not None:
            self.ended[session_id] = (session.token, session.ended or "closed")
            while len(self.ended) > ENDED_KEPT:
                self.ended.popitem(last=False)
            await session.close()
            self.ops.retire(session)
            del session
            self._give_back_soon()

    def _give_back_soon(self) -> None:
        """A session or viewer has ended: free its objects (they hold each other in cycles)
        and hand the heap's free pages back (stream.runtime.heap), off the event loop, once
        the coroutines that ended it have returned (a handler or the session's own watch
        holds it until then): in a task, a turn of the loop later. Endings while it is
        pending share it; one while it runs gets another round."""
        self._collect_again = True
        if self._collecting is None or self._collecting.done():
            self._collecting = asyncio.ensure_future(self._give_back_rounds())

    async def _give_back_rounds(self) -> None:
        while self._collect_again:
            await asyncio.sleep(GIVE_BACK_AFTER_S)
            self._collect_again = False
            await asyncio.to_thread(give_back)

    def relay_of(self, stream: str) -> FrameRelay | None:
        """The swapped video of session `stream`, for its WHEP viewers."""
        session = self.sessions.get(stream)
        return session.relay if session is not None else None

    async def end_viewer(self, viewer_id: str) -> None:
        viewer = self.viewers.pop(viewer_id, None)
        if viewer is not None:
            await viewer.close()
            del viewer
            self._give_back_soon()

    async def close(self) -> None:
        await asyncio.gather(*(self.end_viewer(vid) for vid in list(self.viewers)))
        await asyncio.gather(*(self.end_session(sid) for sid in list(self.sessions)))
        if self._collecting is not None:
            await self._collecting

    # -- HTTP ------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_UPLOAD_BYTES, middlewares=[self._guard])
        app.router.add_get("/", self.page)
        app.router.add_get("/api/faces", self.list_faces)
        app.router.add_post("/api/faces", self.upload_face)
        app.router.add_get("/api/faces/{id}.jpg", self.face_thumb)
        app.router.add_delete("/api/faces/{id}", self.delete_face)
        app.router.add_post("/api/offer", self.offer)
        app.router.add_get("/api/sessions/{id}", self.session_state)
        app.router.add_post("/api/sessions/{id}/face", self.session_face)
        app.router.add_delete("/api/sessions/{id}", self.session_close)
        app.router.add_post("/api/sessions/{id}/close", self.session_close)
        app.router.add_get("/api/status", self.status)
        self.ops.add_routes(app)
        MediaEndpoints(self).add_routes(app)
        app.on_shutdown.append(lambda _app: self.close())
        return app

    @web.middleware
    async def _guard(self, request: web.Request,
                     handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        """Who the visitor is (a cookie given on first contact), and every refusal as a
        one-line JSON error: ours, aiohttp's (unknown path, wrong method, body too large)
        and, for a bug, a 500 that names nothing of the code."""
        given = request.cookies.get(VISITOR_COOKIE) or request.headers.get("X-Visitor") or ""
        fresh = not _TOKEN.fullmatch(given) and request.path not in OPS_PATHS  # probes get no cookie
        visitor = secrets.token_urlsafe(18) if fresh else given
        request[VISITOR] = visitor
        media = is_media_path(request.path)  # WHIP/WHEP: errors as one line of text, CORS
        keep_token = None
        try:
            keep_token = self._check_access(request)
            response = await handler(request)
        except ApiError as exc:
            self.ops.count_refusal(request, exc)
            response = _error(exc.status, exc.message, plain=media)
            response.headers.update(exc.headers)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            response = _error(exc.status, _http_message(request, exc), plain=media)
            if "Allow" in exc.headers:
                response.headers["Allow"] = exc.headers["Allow"]
        except Exception:  # a bug: logged with its traceback, the client gets one line
            log.exception("%s %s failed", request.method, request.path)
            response = _error(500, "internal error (the server's log has the details)", plain=media)
        if media:
            response.headers.update(media_headers(request))
        if keep_token is not None:
            keep_in_cookie(response, keep_token)
        if fresh:
            response.set_cookie(VISITOR_COOKIE, visitor, httponly=True, samesite="Strict", path="/",
                                max_age=30 * 24 * 3600)
        return response

    def _check_access(self, request: web.Request) -> str | None:
        """Refuse (401) a request without the server's token, when it has one; a CORS
        preflight needs none (browsers send it without credentials). Returns the token when
        it came in the query, to be kept in the page's cookie."""
        if self.token is None or request.method == "OPTIONS" or not self.ops.needs_token(request.path):
            return None
        given, in_query = given_token(request)
        if not given:
            raise ApiError(401, f"{request.method} {_shown(request.path)}: this server needs its access token "
                                "(Authorization: Bearer TOKEN, or ?access_token=TOKEN once in a browser)",
                           challenge(), reason="unauthorized")
        if not same_token(given, self.token):
            raise ApiError(401, f"{request.method} {_shown(request.path)}: wrong access token",
                           challenge("invalid_token"), reason="unauthorized")
        return given if in_query else None

    async def page(self, request: web.Request) -> web.Response:
        html = resources.files("stream.server").joinpath("web/index.html").read_text(encoding="utf-8")
        return web.Response(text=html, content_type="text/html")

    async def list_faces(self, request: web.Request) -> web.Response:
        visitor = request[VISITOR]
        return web.json_response({"faces": [self._face_json(f, visitor) for f in self.library.listed(visitor)],
                                  "default": self.library.default})

    def _visible_face(self, face_id: str, visitor: str | None) -> FaceEntry:
        entry = self.library.get(face_id, visitor)
        if entry is None:
            raise ApiError(404, f"face {_shown(face_id)}: not on this server (upload it first)")
        return entry

    async def face_thumb(self, request: web.Request) -> web.Response:
        entry = self._visible_face(request.match_info["id"], request[VISITOR])
        return web.Response(body=entry.thumb, content_type="image/jpeg")

    async def delete_face(self, request: web.Request) -> web.Response:
        face_id = request.match_info["id"]
        entry = self._visible_face(face_id, request[VISITOR])
        if not entry.uploaded:
            raise ApiError(403, f"face {_shown(face_id)}: one of the server's own faces; it cannot be deleted")
        if entry.owner != request[VISITOR]:
            raise ApiError(403, f"face {_shown(face_id)}: uploaded by another visitor; only they can delete it")
        self.library.remove(face_id)
        return web.json_response({"deleted": face_id})

    async def upload_face(self, request: web.Request) -> web.Response:
        if request.content_type != "multipart/form-data":
            raise ApiError(400, "upload: send the picture as multipart/form-data field 'photo'")
        try:
            form = await request.post()
        except web.HTTPException:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever a malformed body makes aiohttp raise
            log.debug("upload: unreadable form", exc_info=exc)
            raise ApiError(400, "upload: the multipart body could not be read") from exc
        fields = form.getall("photo", [])
        if not fields or not all(isinstance(f, web.FileField) for f in fields):
            raise ApiError(400, "upload: send the picture as multipart field 'photo' (a file)")
        if len(fields) > MAX_UPLOAD_VIEWS:
            raise ApiError(413, f"upload: {len(fields)} photos; one face is made from up to {MAX_UPLOAD_VIEWS}")
        photos = []
        for field in fields:
            assert isinstance(field, web.FileField)
            name = _file_name(field.filename)
            data = field.file.read()
            if not data:
                raise ApiError(422, f"photo {name!r}: the file is empty")
            try:
                header = read_image_header(data)
            except ImageHeaderError as exc:
                raise ApiError(422, f"photo {name!r}: {exc}") from exc
            if header.pixels > self.max_upload_pixels:
                raise ApiError(413, f"photo {name!r} is {header.width}x{header.height} ({header.pixels / 1e6:.0f} "
                                    f"megapixels); this server takes up to {self.max_upload_pixels / 1e6:g} "
                                    "megapixels")
            photos.append((data, name))
        try:
            async with self._upload_lock:  # one decode at a time: memory bounded by one upload
                entry = await asyncio.to_thread(self.face_from_uploads, photos, request[VISITOR])
        except (EngineError, ValueError, StreamError) as exc:
            raise ApiError(422, reason_of(exc)) from exc
        self.library.add(entry, in_use={s.face.id for s in self.sessions.values()})
        return web.json_response(self._face_json(entry, request[VISITOR]))

    async def offer(self, request: web.Request) -> web.Response:
        body = await _json_object(request, "offer", "{sdp, type, face}")
        sdp, kind, face_id = body.get("sdp"), body.get("type"), body.get("face")
        if not isinstance(sdp, str) or not sdp.strip():
            raise ApiError(400, "offer: 'sdp' must be the offer's SDP text")
        if kind != "offer":
            raise ApiError(400, "offer: 'type' must be \"offer\"")
        if face_id is not None and not isinstance(face_id, str):
            raise ApiError(400, "offer: 'face' must be a face id (a string), or left out for the default")
        face = self._visible_face(face_id or self.library.default or "", request[VISITOR])
        session, answer = await self.start_session(sdp, face, request[VISITOR])
        return web.json_response({"sdp": answer.sdp, "type": answer.type, "session": session.id,
                                  "token": session.token, "codec": session.codec})

    async def start_session(self, sdp: str, face: FaceEntry, visitor: str | None,
                            via: str = "page") -> tuple[PeerSession, RTCSessionDescription]:
        """A new peer session answering `sdp` (the page's offer, or a WHIP publisher's),
        within the server's peer limit and timeouts; ApiError for an offer it cannot take."""
        self.ops.check_new_session()
        try:
            check_offer(sdp)
        except OfferError as exc:
            raise ApiError(400, str(exc), reason="bad_offer") from exc
        if len(self.sessions) >= self.max_peers:
            raise ApiError(503, f"this server takes {self.max_peers} peers at once; all are in use", reason="full")
        session = PeerSession(self.job, face, self.codec, say=self.say, on_failed=self.end_session,
                              visitor=visitor, ice_addresses=self.ice_addresses,
                              connect_timeout=self.connect_timeout, idle_timeout=self.idle_timeout)
        session.via = via
        self.sessions[session.id] = session
        self.sessions_started += 1
        self.ops.watch(session)
        try:
            answer = await session.answer(RTCSessionDescription(sdp=sdp, type="offer"))
        except OfferError as exc:
            await self.end_session(session.id)
            raise ApiError(400, str(exc), reason="bad_offer") from exc
        except Exception as exc:  # noqa: BLE001 - aiortc's parse errors name its code, not the problem
            log.debug("offer refused", exc_info=exc)
            await self.end_session(session.id)
            raise ApiError(400, "offer: the SDP could not be used (not a WebRTC offer this server "
                                "can answer)", reason="bad_offer") from exc
        return session, answer

    def _session(self, request: web.Request) -> PeerSession:
        """The session named in the path, for the holder of its token; 404 for an unknown
        id, 403 for a missing or wrong token."""
        sid = request.match_info["id"]
        given = request.headers.get("X-Session-Token") or request.query.get("token") or ""
        session = self.sessions.get(sid)
        if session is None:
            ended = self.ended.get(sid)
            if ended is not None and _same(given, ended[0]):
                raise ApiError(404, f"session {sid}: ended ({ended[1]})")
            raise ApiError(404, f"session {_shown(sid)}: no such session")
        if not given:
            raise ApiError(403, f"session {sid}: send its token (X-Session-Token header or ?token=)")
        if not _same(given, session.token):
            raise ApiError(403, f"session {sid}: wrong token")
        return session

    async def session_state(self, request: web.Request) -> web.Response:
        return web.json_response(self._session(request).state())

    async def session_face(self, request: web.Request) -> web.Response:
        session = self._session(request)
        body = await _json_object(request, "face change", "{face}")
        face_id = body.get("face")
        if not isinstance(face_id, str):
            raise ApiError(400, "face change: 'face' must be a face id (a string)")
        session.set_face(self._visible_face(face_id, session.visitor))
        return web.json_response(session.state())

    async def session_close(self, request: web.Request) -> web.Response:
        session = self._session(request)
        session.ended = "closed by the client"
        sid = session.id
        del session  # not held here while it is closed and collected
        await self.end_session(sid)
        return web.json_response({"closed": sid})

    async def status(self, request: web.Request) -> web.Response:
        return web.json_response({"engine": self.job.models.name,
                                  "sessions": len(self.sessions), "max_peers": self.max_peers,
                                  "sessions_started": self.sessions_started,
                                  "viewers": len(self.viewers), "max_viewers": self.max_viewers,
                                  "faces": len(self.library.listed(request[VISITOR])),
                                  "connections": self._connection_figures(), "draining": self.ops.draining})

    def _connection_figures(self) -> dict[str, int] | None:
        book = self.connections
        if book is None:
            return None
        return {"open": book.open, "max": book.limits.max_connections,
                "max_per_client": book.limits.per_client, "refused": book.refused,
                "header_timeouts": book.timed_out}


def _error(status: int, message: str, plain: bool = False) -> web.Response:
    if plain:
        return web.Response(text=message + "\n", status=status, content_type="text/plain")
    return web.json_response({"error": message}, status=status)


async def _json_object(request: web.Request, what: str, shape: str) -> dict[str, Any]:
    try:
        body = await request.json()
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested past the parser
        raise ApiError(400, f"{what}: the body is not JSON (expected {shape})") from exc
    if not isinstance(body, dict):
        kind = {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(type(body), "a number")
        raise ApiError(400, f"{what}: expected a JSON object {shape}, got {kind}")
    return body


def _http_message(request: web.Request, exc: web.HTTPException) -> str:
    path = _shown(request.path)
    if exc.status == 404:
        return f"{path}: no such page"
    if exc.status == 405:
        return f"{request.method} {path}: not allowed (allowed: {exc.headers.get('Allow', 'none')})"
    if exc.status == 413:
        return f"{request.method} {path}: the body is larger than {MAX_UPLOAD_BYTES // 2**20} MB"
    return f"{request.method} {path}: {exc.reason}"


def _file_name(filename: str | None) -> str:
    name = Path(filename or "upload").name or "upload"
    name = "".join(c for c in name if c.isprintable())
    return name[:80] or "upload"


def _same(given: str, token: str) -> bool:
    return secrets.compare_digest(given.encode("utf-8", "replace"), token.encode())


def _fit_within(image: ImageBGR, side: int) -> ImageBGR:
    h, w = image.shape[:2]
    scale = side / max(h, w)
    if scale >= 1:
        return image
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return cast(ImageBGR, cv2.resize(image, size, interpolation=cv2.INTER_AREA))


def start_workers(loop: asyncio.AbstractEventLoop) -> ThreadPoolExecutor:
    """The event loop's worker threads (its default executor: aiortc's codecs and our
    blocking calls run there), all started now, as many as asyncio's default bound. Started
    lazily, they grew with the sessions' overlaps (5 threads, then 6 at the sixth); now a
    session adds none and leaves none."""
    workers = min(32, (os.cpu_count() or 1) + 4)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fs-worker")
    started = threading.Barrier(workers)
    for _ in range(workers):  # each waits for the others: the pool has to start them all
        pool.submit(started.wait, 10.0)
    loop.set_default_executor(pool)
    return pool


async def start_server(server: FaceServer, host: str, port: int, sock: socket.socket | None = None,
                       limits: ConnectionLimits | None = None) -> tuple[web.AppRunner, str]:
    """Serve on `sock` (or a socket bound to host:port now; 0: any free port), its
    connections within `limits` (default: ConnectionLimits()); returns the runner and the
    page's URL."""
    sock = sock or bind_socket(host, port)
    start_workers(asyncio.get_running_loop())
    limits = limits or ConnectionLimits()
    server.connections = ConnectionBook(limits)
    runner = web.AppRunner(server.app(), access_log=None, keepalive_timeout=limits.keepalive_timeout)
    await runner.setup()
    site = GuardedSite(runner, sock, server.connections)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise StreamError(f"serve: cannot listen on {host}:{port} ({exc.strerror or exc})") from exc
    bound_host, bound = sock.getsockname()[:2]
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else bound_host)
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return runner, f"http://{shown}:{bound}/"
