"""The probes and the scrape: `GET /healthz` (the process and its event loop answer),
`GET /readyz` (200 "ready", or 503 with the one-line reason it is not) and `GET /metrics`
(Prometheus's text format). `serve` adds them to its own app; `live` serves them from
`OpsServer`, a small aiohttp loop on a thread of its own, on --health-port and
--metrics-port."""
from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry

from stream.errors import StreamError
from stream.ops.metrics import CONTENT_TYPE, exposition

PROBES = ("/healthz", "/readyz")
METRICS_PATH = "/metrics"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def healthz(request: web.Request) -> web.Response:
    """Alive: answered by the event loop itself, whatever the pipelines are doing."""
    return web.Response(text="ok\n", content_type="text/plain")


def readyz_handler(not_ready: Callable[[], str | None]) -> Handler:
    """200 "ready" while `not_ready()` is None; 503 and its reason otherwise."""

    async def handler(request: web.Request) -> web.Response:
        why = not_ready()
        if why is None:
            return web.Response(text="ready\n", content_type="text/plain")
        return web.Response(text=f"not ready: {why}\n", status=503, content_type="text/plain")

    return handler


def scrape_handler(registry: CollectorRegistry) -> Handler:
    """The registry's figures, as Prometheus scrapes them."""

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=exposition(registry), headers={"Content-Type": CONTENT_TYPE})

    return handler


def bind_port(host: str, port: int, flag: str) -> socket.socket:
    """A listening socket for `flag`'s port, bound now (before the models load), or a
    one-line StreamError naming the flag."""
    from stream.ops.listen import bind_socket

    try:
        return bind_socket(host, port, what=f"{flag} {port}")
    except StreamError:
        raise
    except OverflowError as exc:  # a port past 65535 reaching the socket
        raise StreamError(f"{flag} {port}: not a port number") from exc


class OpsServer:
    """`live`'s probe and metrics endpoints: one aiohttp loop on a thread, listening on the
    sockets given (health: /healthz and /readyz; metrics: /metrics), started once the
    pipeline is being set up and stopped (the thread joined) when the run is over."""

    def __init__(self, health: socket.socket | None, scrape: socket.socket | None,
                 not_ready: Callable[[], str | None], registry: CollectorRegistry) -> None:
        self.health = health
        self.scrape = scrape
        self.not_ready = not_ready
        self.registry = registry
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._failed: BaseException | None = None

    def urls(self) -> list[str]:
        """Where each endpoint is, for the console."""
        out = []
        for sock, paths in ((self.health, PROBES), (self.scrape, (METRICS_PATH,))):
            if sock is not None:
                host, port = sock.getsockname()[:2]
                out += [f"http://{_shown_host(host)}:{port}{path}" for path in paths]
        return out

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fs-ops", daemon=True)
        self._thread.start()
        self._started.wait(10.0)
        if self._failed is not None:
            failed, self._failed = self._failed, None
            self.stop()
            raise StreamError(f"ops endpoints: {failed}") from failed

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop has just finished on its own
                pass
        if self._thread is not None:
            self._thread.join(10.0)
            self._thread = None
        for sock in (self.health, self.scrape):
            if sock is not None:
                sock.close()

    def _app(self, sock: socket.socket) -> web.Application:
        app = web.Application()
        if sock is self.health:
            app.router.add_get("/healthz", healthz)
            app.router.add_get("/readyz", readyz_handler(self.not_ready))
        if sock is self.scrape:
            app.router.add_get(METRICS_PATH, scrape_handler(self.registry))
        return app

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        runners: list[web.AppRunner] = []
        try:
            for sock in (self.health, self.scrape):
                if sock is not None:
                    runner = web.AppRunner(self._app(sock), access_log=None)
                    await runner.setup()
                    runners.append(runner)
                    await web.SockSite(runner, sock).start()
        except Exception as exc:  # noqa: BLE001 - said by start(), in the main thread
            self._failed = exc
        self._started.set()
        try:
            if self._failed is None:
                await self._stop.wait()
        finally:
            for runner in runners:
                await runner.cleanup()


def _shown_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host
