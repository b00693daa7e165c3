"""A listening socket (serve's, a WHEP output's, live's probes' and metrics'), bound before
anything slow is loaded (light to import: a busy port is said at once, before aiohttp,
aiortc or the models)."""
from __future__ import annotations

import socket

from stream.errors import StreamError


def bind_socket(host: str, port: int, what: str = "serve") -> socket.socket:
    """A listening TCP socket on host:port (0: any free port). StreamError, in one line
    starting with `what`, when it cannot be bound."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _name, address = infos[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise StreamError(f"{what}: cannot listen on {host}:{port} ({getattr(exc, 'strerror', None) or exc})") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart within TIME_WAIT
        sock.bind(address)
        sock.listen(128)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise StreamError(f"{what}: cannot listen on {host}:{port} ({exc.strerror or exc})") from exc
    return sock
