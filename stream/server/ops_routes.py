"""`serve` as a service: its probes (`GET /healthz`, `GET /readyz`), its Prometheus
figures (`GET /metrics`), its refusals counted by reason, and the drain that SIGTERM
starts (ready no more, new sessions refused with 503 "draining").

The probes need no access token and give no visitor cookie (a kubelet calls them every
few seconds); /metrics needs the token of a server that has one unless `metrics_public`."""
from __future__ import annotations

import weakref
from typing import Any, Protocol

from aiohttp import web

from stream.ops.health import METRICS_PATH, PROBES, healthz, readyz_handler, scrape_handler
from stream.ops.metrics import StreamMetrics, registry_of
from stream.ops.models import time_models
from stream.server.guard import ConnectionBook
from stream.server.refusal import ApiError
from stream.server.signalling import is_media_path

OPS_PATHS = (*PROBES, METRICS_PATH)
# Refusals of these requests that name no reason of their own count as "bad_request".
_SESSION_POSTS = ("/api/offer",)


class OpsServer(Protocol):
    """What the ops routes read of the server (stream.server.app.FaceServer)."""

    job: Any
    sessions: dict[str, Any]
    viewers: dict[str, Any]
    max_peers: int
    connections: ConnectionBook | None


class ServeOps:
    """The server's readiness, drain state and metrics (labelled `name`)."""

    def __init__(self, server: OpsServer, name: str = "serve", metrics_public: bool = False) -> None:
        self.server = server
        self.metrics_public = metrics_public
        self.draining = False
        self.metrics = metrics = StreamMetrics(name)
        self.registry = registry_of(metrics)
        metrics.sessions = lambda: len(server.sessions)
        metrics.viewers = lambda: len(server.viewers)
        metrics.not_ready = self.not_ready
        metrics.draining = lambda: self.draining
        metrics.refused_elsewhere["connections"] = self._connections_refused
        time_models(server.job.models, getattr(server.job, "enhancer", None), metrics)

    def _connections_refused(self) -> int:
        book = self.server.connections
        return book.refused if book is not None else 0

    def not_ready(self) -> str | None:
        """Why the server should get no new session now, or None."""
        if self.draining:
            return "draining (the server is stopping)"
        server = self.server
        if len(server.sessions) >= server.max_peers:
            return f"full ({len(server.sessions)} of {server.max_peers} peer sessions in use)"
        return None

    def start_drain(self) -> None:
        self.draining = True

    def check_new_session(self) -> None:
        """Refuse a new session while draining (503, counted as "draining")."""
        if self.draining:
            raise ApiError(503, "this server is draining (stopping): it takes no new session",
                           {"Retry-After": "5"}, reason="draining")

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz_handler(self.not_ready))
        app.router.add_get(METRICS_PATH, scrape_handler(self.registry))

    def needs_token(self, path: str) -> bool:
        """Whether a request on `path` must carry the server's token (when it has one)."""
        if path in PROBES:
            return False
        return not (path == METRICS_PATH and self.metrics_public)

    def watch(self, session: Any) -> None:
        """A new session: its pipeline's figures count from now on (held weakly: a session
        ended is never kept alive by its figures)."""
        held = weakref.ref(session)

        def pipeline_of() -> Any:
            live = held()
            return live.pipeline if live is not None else None

        self.metrics.watch(session.id, pipeline_of)

    def retire(self, session: Any) -> None:
        """The session has closed (its pipeline stopped): its last figures go into the totals."""
        self.metrics.retire(session.id)

    def count_refusal(self, request: web.Request, exc: ApiError) -> None:
        reason = exc.reason
        if reason is None and exc.status in (400, 413, 415, 422) and request.method == "POST" \
                and (request.path in _SESSION_POSTS or is_media_path(request.path)):
            reason = "bad_request"
        if reason is not None:
            self.metrics.refuse(reason)
