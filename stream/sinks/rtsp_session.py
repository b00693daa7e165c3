"""The publishing half of RTSP (RFC 2326) on one TCP connection: OPTIONS, ANNOUNCE, SETUP
(RTP interleaved in the connection) and RECORD, then RTP packets out.

Why not FFmpeg's rtsp muxer: PyAV runs its handshake (avformat_write_header) holding the
GIL and, for an output, without an interrupt callback, so a server that accepted the
connection and never answered froze every thread of the process, Ctrl-C included. Here
each step waits on the socket in short slices: a deadline, a stop request and Ctrl-C take
effect at once, and `abort()` from another thread ends a blocked send. FFmpeg still
encodes and packetizes (the sink's rtp muxer); this only carries the packets.
"""
from __future__ import annotations

import errno
import os
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field

from stream.media.interruptible import Cancelled, wait_for_call
from stream.media.rtsp import Challenge, RtspRefused, RtspUrl, is_permanent, status_text

SLICE_S = 0.1
MAX_HEADER = 64 * 1024  # an answer whose head is longer than this is not an RTSP server's
SEND_BUFFER = 256 * 1024  # so that a server that stops reading is noticed in seconds, not minutes
USER_AGENT = "facestream"



class MediaRefused(RtspRefused):
    """The server does not take the media announced (415 Unsupported Media Type): a server
    that takes one H.264 stream and no sound answers so."""

class RtspLost(Exception):
    """The connection failed or went silent; the text is ours, one line. Worth retrying."""


@dataclass
class Answer:
    code: int
    reason: str
    headers: dict[str, str] = field(default_factory=dict)

    def header(self, name: str) -> str:
        return self.headers.get(name.lower(), "")


class PublishSession:
    """One ANNOUNCE/RECORD session. `start()` connects and goes through the handshake;
    then `send()` carries RTP and RTCP packets; `close()` says TEARDOWN and hangs up.

    Errors are `RtspRefused` (an answer that retrying will not change: 4xx, a refused
    connection, not an RTSP server) and `RtspLost` (silence past the deadline, a dropped
    connection, a send that did not complete within its timeout: a stalled server)."""

    def __init__(self, url: str, stop: threading.Event) -> None:
        self.url = RtspUrl.parse(url)
        self.stop = stop
        self._sock: socket.socket | None = None
        self._buffer = b""
        self._cseq = 0
        self._session = ""
        self._auth: Challenge | None = None  # once the server asked for credentials
        self._channels = [(0, 1)]  # (RTP, RTCP) interleaved channels of each stream
        self._keepalive_s = 30.0
        self._next_keepalive = 0.0
        self.recording = False

    # -- the handshake -----------------------------------------------------------------

    def start(self, media_sdp: str, timeout: float) -> None:
        """Connect and ANNOUNCE `media_sdp` (the m= sections and their attributes, the
        n-th with `a=control:streamid=n`: video, then audio when there is sound), SETUP
        each stream (RTP interleaved on channels 2n and 2n+1) and RECORD, all within
        `timeout` seconds."""
        deadline = time.monotonic() + timeout
        self._connect(deadline, timeout)
        self._request("OPTIONS", self.url.request_url, deadline, timeout)
        self._request("ANNOUNCE", self.url.request_url, deadline, timeout,
                      body=self._sdp(media_sdp), content_type="application/sdp")
        streams = max(1, sum(1 for line in media_sdp.splitlines() if line.startswith("m=")))
        self._channels = []
        for n in range(streams):
            control = self.url.request_url.rstrip("/") + f"/streamid={n}"
            answer = self._request("SETUP", control, deadline, timeout,
                                   extra={"Transport": f"RTP/AVP/TCP;unicast;interleaved={2 * n}-{2 * n + 1};"
                                                       "mode=record"})
            self._setup_answered(answer, n)
        self._request("RECORD", self.url.request_url, deadline, timeout, extra={"Range": "npt=0.000-"})
        self.recording = True
        self._next_keepalive = time.monotonic() + self._keepalive_s

    def _setup_answered(self, answer: Answer, n: int) -> None:
        """The session and keep-alive of a SETUP's answer, and stream `n`'s channels."""
        session = answer.header("Session")
        self._session = session.split(";")[0].strip()
        for param in session.split(";")[1:]:
            key, _, value = param.strip().partition("=")
            if key.lower() == "timeout" and value.strip().isdigit() and int(value) > 0:
                self._keepalive_s = max(int(value) / 2, 1.0)
        channels = (2 * n, 2 * n + 1)
        for param in answer.header("Transport").split(";"):
            key, _, value = param.strip().partition("=")
            first, _, second = value.partition("-")
            if key.lower() == "interleaved" and first.isdigit():
                channels = (int(first), int(second) if second.isdigit() else int(first) + 1)
        self._channels.append(channels)

    def _connect(self, deadline: float, timeout: float) -> None:
        silence = f"no answer within {timeout:g} s (the connection was not accepted)"
        try:
            infos = wait_for_call(lambda: socket.getaddrinfo(self.url.host, self.url.port, type=socket.SOCK_STREAM),
                                  max(deadline - time.monotonic(), 0.0), self.stop, name="fs-resolve")
        except TimeoutError:
            raise RtspLost(f"cannot resolve {self.url.host!r} within {timeout:g} s") from None
        except socket.gaierror as exc:
            raise RtspRefused(f"unknown host {self.url.host!r} ({exc.strerror})") from None
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
            code = sock.connect_ex(address)
            while code in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY):
                self._check(deadline, silence)
                _, writable, _ = select.select([], [sock], [], min(SLICE_S, max(deadline - time.monotonic(), 0.0)))
                if writable:  # connected, or failed: SO_ERROR says which
                    code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                raise OSError(code, os.strerror(code))
            if self.url.scheme == "rtsps":
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.url.host)
        except ConnectionRefusedError:
            sock.close()
            raise RtspRefused("connection refused (no server listens on that port)") from None
        except (TimeoutError, socket.timeout):
            sock.close()
            raise RtspLost(silence) from None
        except ssl.SSLError as exc:
            sock.close()
            raise RtspRefused(f"TLS failed ({exc.reason or exc})") from None
        except OSError as exc:
            sock.close()
            raise RtspLost(f"cannot connect ({exc.strerror or exc})") from None
        except BaseException:
            sock.close()
            raise
        self._sock = sock

    def _check(self, deadline: float, silence: str) -> None:
        if self.stop.is_set():
            raise Cancelled()
        if time.monotonic() >= deadline:
            raise RtspLost(silence)

    def _sdp(self, media: str) -> str:
        assert self._sock is not None
        peer = self._sock.getpeername()[0]
        family = "IP6" if ":" in peer else "IP4"
        head = ["v=0", f"o=- 0 0 IN {family} {peer}", "s=facestream", f"c=IN {family} {peer}", "t=0 0"]
        return "\r\n".join(head + media.strip().splitlines()) + "\r\n"

    def _request(self, method: str, url: str, deadline: float, timeout: float, body: str = "",
                 content_type: str = "", extra: dict[str, str] | None = None) -> Answer:
        silence = f"no answer within {timeout:g} s (the server took the connection but did not answer {method})"
        for _ in range(2):  # once more after a 401 with credentials at hand
            self._cseq += 1
            headers = {"CSeq": str(self._cseq), "User-Agent": USER_AGENT, **(extra or {})}
            if self._session:
                headers["Session"] = self._session
            if self._auth is not None:
                headers["Authorization"] = self._auth.authorization(method, url, self.url.user or "",
                                                                    self.url.password or "")
            if body:
                headers["Content-Type"] = content_type
                headers["Content-Length"] = str(len(body.encode()))
            text = f"{method} {url} RTSP/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            self._send_all((text + "\r\n" + body).encode(), deadline, silence)
            answer = self._read_answer(deadline, silence)
            if answer.code == 401 and self._auth is None and self.url.user is not None:
                self._auth = Challenge.parse(answer.header("WWW-Authenticate"))
                if self._auth is not None:
                    continue
            break
        if 200 <= answer.code < 300:
            return answer
        text = status_text(answer.code, answer.reason, self.url.user is not None)
        if answer.code == 415:
            raise MediaRefused(text)
        raise (RtspRefused if is_permanent(answer.code) else RtspLost)(text)

    def _read_answer(self, deadline: float, silence: str) -> Answer:
        while True:
            if self._buffer.startswith(b"$"):  # interleaved data (RTCP from the server): not ours to read
                if len(self._buffer) >= 4 and len(self._buffer) >= 4 + int.from_bytes(self._buffer[2:4], "big"):
                    self._buffer = self._buffer[4 + int.from_bytes(self._buffer[2:4], "big"):]
                    continue
            else:
                end = self._buffer.find(b"\r\n\r\n")
                if end >= 0:
                    answer, length = _parse_head(self._buffer[:end].decode("latin-1"))
                    if len(self._buffer) >= end + 4 + length:
                        self._buffer = self._buffer[end + 4 + length:]
                        if answer.header("CSeq") in ("", str(self._cseq)):
                            return answer
                        continue  # a late answer to an earlier request
                elif len(self._buffer) > MAX_HEADER:
                    raise RtspRefused("not an RTSP server (an endless answer)")
                if self._buffer and not self._buffer.startswith(b"RTSP/"[:len(self._buffer)]):
                    first = self._buffer.strip().split(b"\n", 1)[0].strip()[:60].decode("latin-1", "replace")
                    raise RtspRefused(f"not an RTSP server (it answered {first!r})")
            self._buffer += self._receive(deadline, silence)

    def _receive(self, deadline: float, silence: str) -> bytes:
        assert self._sock is not None
        while True:
            self._check(deadline, silence)
            self._sock.settimeout(min(SLICE_S, max(deadline - time.monotonic(), 0.001)))
            try:
                data = self._sock.recv(65536)
            except (TimeoutError, socket.timeout):
                continue
            except OSError as exc:
                raise RtspLost(f"connection lost ({exc.strerror or exc})") from None
            if not data:
                raise RtspLost("the server closed the connection")
            return data

    def _send_all(self, data: bytes, deadline: float, silence: str) -> None:
        assert self._sock is not None
        self._check(deadline, silence)
        self._sock.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            self._sock.sendall(data)
        except (TimeoutError, socket.timeout):
            raise RtspLost(silence) from None
        except OSError as exc:
            if self.stop.is_set():
                raise Cancelled() from None
            raise RtspLost(f"connection lost ({exc.strerror or exc})") from None

    # -- recording ---------------------------------------------------------------------

    def send(self, packets: list[bytes], timeout: float, stream: int = 0) -> None:
        """Send RTP/RTCP `packets` of `stream` (0: video, 1: audio) interleaved; `RtspLost`
        when they are not all taken within `timeout` seconds (the server stopped reading)
        or the server hung up."""
        framed = bytearray()
        rtp, rtcp = self._channels[stream]
        for packet in packets:
            channel = rtcp if 200 <= packet[1] <= 204 else rtp  # RTCP by type
            framed += b"$" + bytes((channel,)) + len(packet).to_bytes(2, "big") + packet
        now = time.monotonic()
        if now >= self._next_keepalive:  # the session would otherwise time out on some servers
            self._next_keepalive = now + self._keepalive_s
            self._cseq += 1
            framed += (f"OPTIONS {self.url.request_url} RTSP/1.0\r\nCSeq: {self._cseq}\r\n"
                       f"User-Agent: {USER_AGENT}\r\nSession: {self._session}\r\n\r\n").encode()
        self._send_all(bytes(framed), now + timeout, f"stalled: the server took no data for {timeout:g} s")
        self._drain()

    def _drain(self) -> None:
        """Read and drop what the server sends while we record (RTCP reports, answers to
        keep-alives), so its side never blocks; notice a hang-up."""
        assert self._sock is not None
        self._sock.settimeout(0.0)
        try:
            while True:
                data = self._sock.recv(65536)
                if not data:
                    raise RtspLost("the server closed the connection")
        except (BlockingIOError, ssl.SSLWantReadError):
            pass
        except OSError as exc:
            raise RtspLost(f"connection lost ({exc.strerror or exc})") from None

    def abort(self) -> None:
        """From any thread: end the connection now, so a blocked send or wait returns."""
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        """TEARDOWN if it goes out at once (not after a stall), then hang up."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        try:
            if self.recording:
                self._cseq += 1
                sock.settimeout(0.0)
                sock.send((f"TEARDOWN {self.url.request_url} RTSP/1.0\r\nCSeq: {self._cseq}\r\n"
                           f"User-Agent: {USER_AGENT}\r\nSession: {self._session}\r\n\r\n").encode())
        except OSError:
            pass
        finally:
            self.recording = False
            sock.close()


def _parse_head(head: str) -> tuple[Answer, int]:
    lines = head.split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("RTSP/") or not code.isdigit():
        raise RtspRefused(f"not an RTSP server (it answered {lines[0][:60]!r})")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length", "0")
    return Answer(int(code), reason.strip(), headers), int(length) if length.isdigit() else 0
