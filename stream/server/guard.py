"""What a client may hold of the server: connections in all and from one address, and the
time a request's headers may take to arrive.

aiohttp answers a request once its headers are in, but it sets no bound on how long they
may take, nor on how many connections are open: 50 sockets that sent `GET / HT` and then
nothing stayed open for good, each holding a descriptor. Here every connection is counted,
in all and by client address, when it opens; one over either limit gets a 503 and is
closed at once. A connection whose first request's headers are not complete within
`header_timeout` is closed. Between requests, an idle keep-alive connection is closed by
aiohttp's own `keepalive_timeout` (and a second request left half sent is closed with it).
"""
from __future__ import annotations

import asyncio
import collections
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from stream.server import HEADER_TIMEOUT_S, KEEPALIVE_TIMEOUT_S, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_CLIENT

_REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s")


@dataclass(frozen=True)
class ConnectionLimits:
    """`header_timeout`: seconds from a connection's opening to its first request's last
    header line; `keepalive_timeout`: seconds an idle connection is kept between requests;
    `max_connections`: open at once, all clients; `per_client`: open at once from one address."""

    header_timeout: float = HEADER_TIMEOUT_S
    keepalive_timeout: float = KEEPALIVE_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS
    per_client: int = MAX_CONNECTIONS_PER_CLIENT

    def __post_init__(self) -> None:
        for name in ("header_timeout", "keepalive_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name.replace('_', '-')} must be more than 0 seconds, got {getattr(self, name)}")
        if self.max_connections < 1 or self.per_client < 1:
            raise ValueError(f"connection limits must be at least 1, got {self.max_connections} in all and "
                             f"{self.per_client} a client")


class ConnectionBook:
    """The open connections, in all and by client address; the figures `status` shows."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.open = 0
        self.by_client: collections.Counter[str] = collections.Counter()
        self.refused = 0  # over a limit
        self.timed_out = 0  # headers not in within header_timeout

    def admit(self, client: str) -> str | None:
        """Count a new connection from `client`; the reason it is refused, or None."""
        if self.open >= self.limits.max_connections:
            why = f"this server takes {self.limits.max_connections} connections at once"
        elif self.by_client[client] >= self.limits.per_client:
            why = f"this server takes {self.limits.per_client} connections at once from one address"
        else:
            self.open += 1
            self.by_client[client] += 1
            return None
        self.refused += 1
        return why

    def release(self, client: str) -> None:
        self.open -= 1
        self.by_client[client] -= 1
        if self.by_client[client] <= 0:
            del self.by_client[client]


class GuardedProtocol(asyncio.Protocol):
    """aiohttp's request handler for one connection, behind the book's limits and the
    header deadline (the standard protocol calls are passed on)."""

    def __init__(self, inner: Any, book: ConnectionBook) -> None:
        self.inner = inner
        self.book = book
        self.client: str | None = None
        self.transport: asyncio.Transport | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._tail = b""  # the last bytes seen while the first request's headers come in

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        client = str(peer[0]) if isinstance(peer, tuple) and peer else "local"
        refused = self.book.admit(client)
        if refused is not None:
            body = (refused + "\n").encode()
            transport.write(_REFUSAL % (len(body), body))  # type: ignore[attr-defined]
            transport.close()
            return
        self.client = client
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(self.book.limits.header_timeout, self._headers_late)
        self.inner.connection_made(transport)

    def _headers_late(self) -> None:
        self._deadline = None
        self.book.timed_out += 1
        if self.transport is not None:
            self.transport.abort()  # a client sending nothing gets nothing: no response to write

    def data_received(self, data: bytes) -> None:
        if self.client is None:
            return
        if self._deadline is not None:
            seen = self._tail + data
            if b"\r\n\r\n" in seen or b"\n\n" in seen:
                self._deadline.cancel()
                self._deadline = None
                self._tail = b""
            else:
                self._tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.client is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.client is None:
            return
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self.book.release(self.client)
        self.client = None
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.client is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.client is not None:
            self.inner.resume_writing()


class GuardedSite(web.BaseSite):
    """An aiohttp site on a bound socket whose connections go through a `ConnectionBook`."""

    def __init__(self, runner: web.BaseRunner, sock: socket.socket, book: ConnectionBook) -> None:
        super().__init__(runner)
        self.sock = sock
        self.book = book
        host, port = sock.getsockname()[:2]
        self._shown = f"http://{host}:{port}"

    @property
    def name(self) -> str:
        return self._shown

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        factory: Callable[[], asyncio.Protocol] = lambda: GuardedProtocol(server(), self.book)  # noqa: E731
        self._server = await asyncio.get_running_loop().create_server(factory, sock=self.sock)
