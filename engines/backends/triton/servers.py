"""The Triton servers one process talks to: their URLs, one gRPC client each, which are up,
requests spread over those (round robin), and a server that goes away retried with backoff.

An outage is one log line when a server stops answering and one when it is back; between
the two a background thread probes it (0.5 s doubling to 4 s) and requests go to the other
servers, or wait for one to return until their deadline. `tritonclient` is imported only
when a `TritonServers` is made, so importing engines never imports it.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from engines.backends.addresses import normalize_url
from engines.errors import EngineError

log = logging.getLogger(__name__)

BACKOFF_S = (0.5, 1.0, 2.0, 4.0)  # between probes of a server that went away; the last repeats
PROBE_TIMEOUT_S = 2.0  # one health probe waits this long at most
# gRPC's own reconnect backoff grows to two minutes by default: a server back after an
# outage would then wait for the channel's next attempt. Ours probes at its own pace.
CHANNEL_ARGS = [
    ("grpc.max_send_message_length", 2**31 - 1),
    ("grpc.max_receive_message_length", 2**31 - 1),
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


def status_of(error: BaseException) -> str:
    """A tritonclient error's gRPC status ("StatusCode.UNAVAILABLE"), or ""."""
    status = getattr(error, "status", None)
    return str(status() or "") if callable(status) else ""


def is_gone(error: BaseException) -> bool:
    """Whether a tritonclient error means the server is not there (as opposed to a refusal
    of this request by a server that answered)."""
    return status_of(error) == "StatusCode.UNAVAILABLE"


def is_going(error: BaseException) -> bool:
    """A server that no longer has a model it served: one shutting down (it unloads its
    models, answering NOT_FOUND, before its port closes) or an operator's unload."""
    return status_of(error) == "StatusCode.NOT_FOUND"


def reason(error: BaseException) -> str:
    """A tritonclient or gRPC error as one short line."""
    message = getattr(error, "message", None)
    text = message() if callable(message) else str(error)
    text = (text or type(error).__name__).strip().splitlines()[0]
    return text


class Server:
    """One Triton server: its URL, gRPC client, and whether it is up."""

    def __init__(self, url: str, connect: Callable[[str], Any]) -> None:
        self.url = url
        self._connect = connect
        self.client: Any = connect(url)
        self.up = True
        self.requests = 0  # requests sent to it
        self.down_since = 0.0
        self.why = ""
        # tritonclient's async_infer keeps the call it starts in an attribute of the client
        # and reads it back to attach the callback: two threads submitting at once could
        # swap their calls. Submitting is quick (the wait for the answer is not under it).
        self.submit_lock = threading.Lock()

    def reconnect(self) -> None:
        fresh = self._connect(self.url)
        with self.submit_lock:
            old, self.client = self.client, fresh
        _close_quietly(old)

    def close(self) -> None:
        _close_quietly(self.client)


class TritonServers:
    """The servers of one URL list, shared by the runtimes a factory makes (so an outage is
    reported once, not once per model). `pick` returns an up server in turn, waiting for
    one to come back until a deadline; `mark_down` starts the probing of one that went away."""

    def __init__(self, urls: list[str], timeout: float) -> None:
        if not urls:
            raise ValueError("at least one Triton URL is needed")
        try:
            import tritonclient.grpc as grpcclient  # type: ignore[import-untyped]
        except ImportError as exc:
            raise EngineError("the Triton runtime needs tritonclient's gRPC client: "
                              "pip install 'facestream[triton]' (or 'tritonclient[grpc]')") from exc

        def connect(url: str) -> Any:
            return grpcclient.InferenceServerClient(url, channel_args=CHANNEL_ARGS)

        self.timeout = timeout
        self.servers = [Server(normalize_url(u), connect) for u in dict.fromkeys(urls)]
        self.outages = 0  # servers lost so far (each loss counts once, however long)
        self.models: set[str] = set()  # the models in use: a server is back when it serves them all
        self._next = 0
        self._cond = threading.Condition()
        self._closed = threading.Event()
        self._prober: threading.Thread | None = None

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def describe(self) -> str:
        return ", ".join(self.urls)

    def pick(self, deadline: float) -> Server:
        """The next up server (round robin), waiting until `deadline` for one to return;
        a one-line EngineError naming the servers and why when none did."""
        with self._cond:
            while True:
                if self._closed.is_set():
                    raise EngineError(f"triton {self.describe()}: closed")
                up = [s for s in self.servers if s.up]
                if up:
                    server = up[self._next % len(up)]
                    self._next += 1
                    return server
                left = deadline - time.monotonic()
                if left <= 0:
                    why = "; ".join(f"{s.url}: {s.why}" for s in self.servers)
                    raise EngineError(f"triton: no server answered within {self.timeout:g} s ({why})")
                self._cond.wait(min(left, 0.5))

    def mark_down(self, server: Server, error: BaseException) -> None:
        """`server` did not answer: say so once (until it is back) and probe it in the background."""
        with self._cond:
            if not server.up:
                return
            server.up = False
            server.down_since = time.monotonic()
            server.why = reason(error)
            self.outages += 1
            others = sum(s.up for s in self.servers)
            then = (f"requests go to the other {others} server(s)" if others else
                    f"requests wait up to {self.timeout:g} s for it")
            log.warning("triton %s: unavailable (%s); retrying, %s", server.url, server.why, then)
            if self._prober is None or not self._prober.is_alive():
                self._prober = threading.Thread(target=self._probe_loop, name="fs-triton-probe", daemon=True)
                self._prober.start()

    def _probe_loop(self) -> None:
        """Probe the servers that are down, with backoff, until all are up or we close."""
        attempts: dict[str, int] = {}
        while not self._closed.is_set():
            with self._cond:
                down = [s for s in self.servers if not s.up]
            if not down:
                return
            for server in down:
                attempt = attempts.get(server.url, 0)
                if self._ready(server):
                    attempts.pop(server.url, None)
                    with self._cond:
                        server.up = True
                        log.warning("triton %s: back after %.1f s", server.url, time.monotonic() - server.down_since)
                        self._cond.notify_all()
                else:
                    attempts[server.url] = attempt + 1
            wait = min(BACKOFF_S[min(attempts.get(s.url, 0), len(BACKOFF_S) - 1)] for s in down)
            self._closed.wait(wait)

    def _ready(self, server: Server) -> bool:
        try:
            server.reconnect()  # a fresh channel: the old one may sit in gRPC's own backoff
            client = server.client
            if not client.is_server_ready(client_timeout=PROBE_TIMEOUT_S):
                server.why = "not ready"
                return False
            for model in sorted(self.models):
                if not client.is_model_ready(model, client_timeout=PROBE_TIMEOUT_S):
                    server.why = f"model {model!r} not ready"
                    return False
            return True
        except Exception as exc:  # any failure is "not back yet"; the reason is kept for the error
            server.why = reason(exc)
            return False

    def close(self) -> None:
        self._closed.set()
        with self._cond:
            self._cond.notify_all()
        if self._prober is not None and self._prober is not threading.current_thread():
            self._prober.join(timeout=PROBE_TIMEOUT_S + 1)
        for server in self.servers:
            server.close()


def _close_quietly(client: Any) -> None:
    try:
        client.close()
    except Exception:  # closing a channel to a server that is gone may complain; nothing to do
        log.debug("closing a Triton client failed", exc_info=True)
