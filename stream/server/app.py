"""`facestream serve`: a WebRTC swap server (aiohttp + aiortc) and its one page.

The browser sends its camera; each peer gets its own pipeline (source, rings, stages,
sink) on models loaded once and shared (`SwapJob.share`), and the swapped video comes back
on the same connection. The page chooses or uploads the source face and shows live
figures, polled from `/api/sessions/ID`.

HTTP API (JSON unless said):
- `GET /` the page;
- `GET /api/faces`, `POST /api/faces` (multipart field `photo`), `GET /api/faces/ID.jpg`;
- `POST /api/offer` {sdp, type, face} -> {sdp, type, session};
- `GET /api/sessions/ID` figures; `POST /api/sessions/ID/face` {face};
  `DELETE /api/sessions/ID` (or `POST /api/sessions/ID/close`, for sendBeacon).
"""
from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from aiohttp import web
from aiortc import RTCSessionDescription

from engines.errors import EngineError
from stream.errors import StreamError, reason_of
from stream.job.swap_job import PhotoFace, SwapJob
from stream.server.faces import FaceEntry, thumbnail
from stream.server.peer import CODECS, PeerSession

MAX_UPLOAD_BYTES = 12 * 1024 * 1024
MAX_FACES = 32  # uploaded faces kept (the oldest upload goes first)


class FaceServer:
    """The server's state: the job (models, shared), the face library, the sessions."""

    def __init__(self, job: SwapJob, max_peers: int = 4, codec: str = "vp8",
                 say: Callable[[str], None] | None = None) -> None:
        if codec not in CODECS:
            raise ValueError(f"codec {codec!r}: choose one of {', '.join(CODECS)}")
        self.job = job
        self.max_peers = max_peers
        self.codec = codec
        self.faces: dict[str, FaceEntry] = {}
        self.default_face: str | None = None
        self.sessions: dict[str, PeerSession] = {}
        self.sessions_started = 0
        self.say = say or (lambda line: None)  # one line per peer event, for the console
        self._upload_lock = asyncio.Lock()

    # -- faces -----------------------------------------------------------------------

    def add_face(self, face: PhotoFace, prepared: object, name: str, uploaded: bool) -> FaceEntry:
        entry = FaceEntry(uuid.uuid4().hex[:10], name, face, prepared, thumbnail(face), uploaded)
        self.faces[entry.id] = entry
        uploads = [f for f in self.faces.values() if f.uploaded]
        if len(uploads) > MAX_FACES:
            in_use = {s.face.id for s in self.sessions.values()}
            for old in uploads:
                if old.id not in in_use:
                    del self.faces[old.id]
                    break
        if self.default_face is None:
            self.default_face = entry.id
        return entry

    def add_job_faces(self) -> None:
        """The job's --source photos, already prepared by job.open()."""
        for face, prepared in zip(self.job.sources, self.job.prepared):
            self.add_face(face, prepared, Path(face.path).name, uploaded=False)

    def face_from_upload(self, data: bytes, name: str) -> FaceEntry:
        """Decode an uploaded photo, find its largest face and prepare it (blocking)."""
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if image is None:
            raise ValueError(f"{name!r} is not a picture this server can read (JPEG, PNG, WebP, BMP)")
        face = self.job.find_face(name, "uploaded photo", image=image)
        return self.add_face(face, self.job.prepare(face), name, uploaded=True)

    def _face_json(self, entry: FaceEntry) -> dict[str, Any]:
        return {"id": entry.id, "name": entry.name, "thumb": f"/api/faces/{entry.id}.jpg",
                "uploaded": entry.uploaded}

    # -- sessions --------------------------------------------------------------------

    async def end_session(self, session_id: str) -> None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            await session.close()

    async def close(self) -> None:
        await asyncio.gather(*(self.end_session(sid) for sid in list(self.sessions)))

    # -- HTTP ------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_UPLOAD_BYTES)
        app.router.add_get("/", self.page)
        app.router.add_get("/api/faces", self.list_faces)
        app.router.add_post("/api/faces", self.upload_face)
        app.router.add_get("/api/faces/{id}.jpg", self.face_thumb)
        app.router.add_post("/api/offer", self.offer)
        app.router.add_get("/api/sessions/{id}", self.session_state)
        app.router.add_post("/api/sessions/{id}/face", self.session_face)
        app.router.add_delete("/api/sessions/{id}", self.session_close)
        app.router.add_post("/api/sessions/{id}/close", self.session_close)
        app.router.add_get("/api/status", self.status)
        app.on_shutdown.append(lambda _app: self.close())
        return app

    async def page(self, request: web.Request) -> web.Response:
        html = resources.files("stream.server").joinpath("web/index.html").read_text(encoding="utf-8")
        return web.Response(text=html, content_type="text/html")

    async def list_faces(self, request: web.Request) -> web.Response:
        return web.json_response({"faces": [self._face_json(f) for f in self.faces.values()],
                                  "default": self.default_face})

    async def face_thumb(self, request: web.Request) -> web.Response:
        entry = self.faces.get(request.match_info["id"])
        if entry is None:
            raise web.HTTPNotFound(text="no such face")
        return web.Response(body=entry.thumb, content_type="image/jpeg")

    async def upload_face(self, request: web.Request) -> web.Response:
        try:
            form = await request.post()
        except ValueError as exc:  # aiohttp's "too large" and malformed bodies
            return _error(400, f"upload: {exc}")
        field = form.get("photo")
        if field is None or not hasattr(field, "file"):
            return _error(400, "upload: send the picture as multipart field 'photo'")
        data = field.file.read()
        name = Path(field.filename or "upload").name
        try:
            async with self._upload_lock:
                entry = await asyncio.to_thread(self.face_from_upload, data, name)
        except (EngineError, ValueError, StreamError) as exc:
            return _error(422, reason_of(exc))
        return web.json_response(self._face_json(entry))

    async def offer(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            offer = RTCSessionDescription(sdp=body["sdp"], type=body["type"])
        except (ValueError, KeyError, TypeError):
            return _error(400, "offer: expected JSON {sdp, type, face}")
        face = self.faces.get(body.get("face") or self.default_face or "")
        if face is None:
            return _error(404, f"face {body.get('face')!r}: not on this server (upload it first)")
        if len(self.sessions) >= self.max_peers:
            return _error(503, f"this server takes {self.max_peers} peers at once; all are in use")
        session = PeerSession(self.job, face, self.codec, say=self.say, on_failed=self.end_session)
        self.sessions[session.id] = session
        self.sessions_started += 1
        try:
            answer = await session.answer(offer)
        except Exception as exc:  # noqa: BLE001 - a bad offer is the peer's problem, said in one line
            await self.end_session(session.id)
            return _error(400, f"offer: {reason_of(exc)}")
        return web.json_response({"sdp": answer.sdp, "type": answer.type, "session": session.id,
                                  "codec": session.codec})

    def _session(self, request: web.Request) -> PeerSession:
        session = self.sessions.get(request.match_info["id"])
        if session is None:
            raise web.HTTPNotFound(text="no such session (it ended)")
        return session

    async def session_state(self, request: web.Request) -> web.Response:
        return web.json_response(self._session(request).state())

    async def session_face(self, request: web.Request) -> web.Response:
        session = self._session(request)
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "expected JSON {face}")
        face = self.faces.get(str(body.get("face")))
        if face is None:
            return _error(404, f"face {body.get('face')!r}: not on this server")
        session.set_face(face)
        return web.json_response(session.state())

    async def session_close(self, request: web.Request) -> web.Response:
        await self.end_session(request.match_info["id"])
        return web.json_response({"closed": request.match_info["id"]})

    async def status(self, request: web.Request) -> web.Response:
        return web.json_response({"engine": self.job.models.name,
                                  "sessions": len(self.sessions), "max_peers": self.max_peers,
                                  "sessions_started": self.sessions_started, "faces": len(self.faces)})


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


async def start_server(server: FaceServer, host: str, port: int) -> tuple[web.AppRunner, str]:
    """Listen on host:port (0: any free port); returns the runner and the page's URL."""
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise StreamError(f"serve: cannot listen on {host}:{port} ({exc.strerror or exc})") from exc
    sockets = getattr(site._server, "sockets", None) or []  # the bound port, when 0 was asked
    bound = sockets[0].getsockname()[1] if sockets else port
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    return runner, f"http://{shown}:{bound}/"
