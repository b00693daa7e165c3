"""What an RTSP server's answers mean to a user, in our words, for the RTSP input and output
alike; and the parts of an rtsp:// URL.

An answer that retrying will not change (a 4xx status, a refused connection, something
that is not an RTSP server) ends an open at once; silence, a dropped connection and a 5xx
status are retried until the open timeout (a server starting, a camera rebooting)."""
from __future__ import annotations

import base64
import hashlib
import os
import socket
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

import av

from stream.errors import reason_of

DEFAULT_PORTS = {"rtsp": 554, "rtsps": 322}


class RtspRefused(Exception):
    """The server gave an answer that retrying will not change; the text is ours, one line."""


def status_text(code: int, reason: str, has_credentials: bool = False) -> str:
    """Our words for an RTSP status that is not a success."""
    status = f"{code} {reason}".strip()
    if code == 404:
        return f"the server has no stream at this path ({status})"
    if code == 401:
        if has_credentials:
            return f"the server refused the user name and password in the URL ({status})"
        return f"the server wants a user name and password: rtsp://USER:PASSWORD@host/path ({status})"
    if code == 403:
        return f"the server forbids this path ({status})"
    if code in (405, 455, 501):
        return f"the server does not allow that on this path (one for reading, not publishing?) ({status})"
    if code == 461:
        return f"the server does not take RTP over TCP ({status})"
    if 500 <= code < 600:
        return f"the server failed ({status})"
    return f"the server refused ({status})"


def is_permanent(code: int) -> bool:
    """A status that retrying will not change: every 4xx (5xx are the server's trouble)."""
    return 400 <= code < 500


def refusal_of(exc: BaseException, has_credentials: bool = False) -> str | None:
    """Our words for an FFmpeg error that retrying will not change, else None."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (no server listens on that port)"
    if isinstance(exc, av.error.HTTPNotFoundError):
        return status_text(404, "Not Found")
    if isinstance(exc, av.error.HTTPUnauthorizedError):
        return status_text(401, "Unauthorized", has_credentials)
    if isinstance(exc, av.error.HTTPForbiddenError):
        return status_text(403, "Forbidden")
    if isinstance(exc, av.error.HTTPBadRequestError):
        return status_text(400, "Bad Request")
    if isinstance(exc, av.error.HTTPOtherClientError):
        return f"the server refused ({reason_of(exc)})"
    return None


def reason_after(exc: BaseException, waited: float, timeout: float, silence: str) -> str:
    """Our words for an FFmpeg error ending a wait of `waited` seconds out of `timeout`.

    When the wait ran out, FFmpeg's interrupt callback ended it and FFmpeg's text says
    nothing useful ("Immediate exit requested", "Invalid data found when processing
    input"): that is `silence` (e.g. "no answer within 10 s"). Otherwise FFmpeg's reason,
    as the cause in parentheses."""
    if isinstance(exc, av.error.ExitError) or waited >= timeout - 0.05:
        return silence
    if isinstance(exc, EOFError | av.error.EOFError):
        return "the server closed the connection"
    return f"connection failed ({reason_of(exc)})"


def redacted(url: str) -> str:
    """`url` with its password (if any) replaced by ***, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user, _, host = parts.netloc.rpartition("@")
    return parts._replace(netloc=f"{user.partition(':')[0]}:***@{host}").geturl()


def has_credentials(url: str) -> bool:
    """Whether `url` carries a user name (rtsp://user:password@host/path)."""
    return urlsplit(url).username is not None


@dataclass(frozen=True)
class RtspUrl:
    """An rtsp:// or rtsps:// URL taken apart: where to connect, what to ask for (without
    the credentials), and the credentials."""

    scheme: str
    host: str
    port: int
    request_url: str
    user: str | None
    password: str | None

    @classmethod
    def parse(cls, url: str) -> RtspUrl:
        parts = urlsplit(url)
        if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
            raise ValueError("not rtsp://host[:port]/path")
        try:
            port = parts.port or DEFAULT_PORTS[parts.scheme]
        except ValueError as exc:  # a port that is not a number, or out of range
            raise ValueError(f"bad port ({exc})") from None
        host = parts.hostname
        netloc = f"[{host}]" if ":" in host else host
        if parts.port:
            netloc += f":{parts.port}"
        request = f"{parts.scheme}://{netloc}{parts.path or '/'}" + (f"?{parts.query}" if parts.query else "")
        user = unquote(parts.username) if parts.username is not None else None
        password = unquote(parts.password) if parts.password is not None else None
        return cls(parts.scheme, host, port, request, user, password)


@dataclass(frozen=True)
class Challenge:
    """A server's WWW-Authenticate (Basic or Digest, RFC 2617 as RTSP uses it), and the
    Authorization header that answers it."""

    scheme: str  # "basic" or "digest"
    params: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, header: str) -> Challenge | None:
        scheme, _, rest = header.strip().partition(" ")
        if scheme.lower() not in ("basic", "digest"):
            return None
        params: dict[str, str] = {}
        for part in _split_params(rest):
            key, _, value = part.partition("=")
            params[key.strip().lower()] = value.strip().strip('"')
        return cls(scheme.lower(), params)

    def authorization(self, method: str, uri: str, user: str, password: str) -> str:
        if self.scheme == "basic":
            return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        realm, nonce = self.params.get("realm", ""), self.params.get("nonce", "")
        ha1 = _md5(f"{user}:{realm}:{password}")
        ha2 = _md5(f"{method}:{uri}")
        fields = {"username": user, "realm": realm, "nonce": nonce, "uri": uri}
        if "auth" in [q.strip() for q in self.params.get("qop", "").split(",")]:
            cnonce = os.urandom(8).hex()
            fields.update(qop="auth", nc="00000001", cnonce=cnonce)
            fields["response"] = _md5(f"{ha1}:{nonce}:00000001:{cnonce}:auth:{ha2}")
        else:
            fields["response"] = _md5(f"{ha1}:{nonce}:{ha2}")
        if "opaque" in self.params:
            fields["opaque"] = self.params["opaque"]
        bare = ("qop", "nc")  # the two values sent without quotes
        return "Digest " + ", ".join(f"{k}={v}" if k in bare else f'{k}="{v}"' for k, v in fields.items())


def _split_params(text: str) -> list[str]:
    """Comma-separated key=value pairs, commas inside quotes kept."""
    parts, current, quoted = [], "", False
    for char in text:
        if char == '"':
            quoted = not quoted
        if char == "," and not quoted:
            parts.append(current)
            current = ""
        else:
            current += char
    return [p for p in parts + [current] if p.strip()]


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def server_answer(url: str, timeout: float) -> bytes:
    """The first bytes a server at `url`'s address answers an RTSP OPTIONS request with,
    within `timeout` seconds: b"RTSP/1.0 ..." from an RTSP server (a 401 too), something
    else from another kind of server, b"" for silence or a connection closed unanswered.
    OSError when the connection cannot be made (ConnectionRefusedError: nothing listens
    there). For rtsps:// (TLS) nothing is asked: b"RTSP/" once the connection is made."""
    target = RtspUrl.parse(url)
    with socket.create_connection((target.host, target.port), timeout=timeout) as sock:
        if target.scheme == "rtsps":
            return b"RTSP/"
        sock.sendall(f"OPTIONS {target.request_url} RTSP/1.0\r\nCSeq: 1\r\n"
                     "User-Agent: facestream\r\n\r\n".encode())
        try:
            return sock.recv(64)
        except TimeoutError:
            return b""


# The longest keyframe interval believed: a camera measured further apart (a dynamic GOP,
# an odd stream) is still given up on after twice this.
MAX_GOP_S = 30.0


def first_picture_wait(open_timeout: float, gop_s: float | None) -> float:
    """Seconds to wait, from the server's answer, for a stream's first picture: two keyframe
    intervals (`gop_s`; a join may miss one keyframe: a failed attempt used it, or it was
    lost on the way) and never less than `open_timeout`; `open_timeout` when the interval
    is not known."""
    if gop_s is None or gop_s <= 0:
        return open_timeout
    return max(open_timeout, 2.0 * min(gop_s, MAX_GOP_S))


@dataclass
class Join:
    """One wait for a stream's first picture: what it saw, its deadline and its note.

    The keyframe interval is the one measured on an earlier connection (`gop_s`), else the
    time between two keyframes seen in this wait; while neither is known, the stream is
    taken to send them up to `open_timeout` apart (what the open timeout is there to
    cover), so the wait is twice the open timeout. (A server may hold its answer to the
    stream's description until its next keyframe, as GStreamer's RTSP server relaying a
    publisher does: nothing tells such a wait from a longer silence.)"""

    connected: float  # time.monotonic() of the server's answer
    open_timeout: float
    gop_s: float | None = None
    attempts: int = 0
    answered: float | None = None  # when the last attempt's stream description came
    packets: int = 0  # video packets before the first picture
    keyframes: list[float] = field(default_factory=list)  # when key packets came, before it
    before_key: int = 0  # packets before the first key packet
    undecodable: int = 0  # packets the decoder refused before it (no reference yet)

    def saw(self, keyframe: bool, now: float) -> None:
        """A video packet came at `now`, before the first picture."""
        self.packets += 1
        if keyframe:
            self.keyframes.append(now)
        elif not self.keyframes:
            self.before_key += 1

    def gop(self) -> float:
        """The keyframe interval this wait goes by (see the class), or None."""
        if self.gop_s:
            return self.gop_s
        if len(self.keyframes) >= 2:
            return self.keyframes[-1] - self.keyframes[-2]
        return self.open_timeout

    def wait(self) -> float:
        return first_picture_wait(self.open_timeout, self.gop())

    def deadline(self) -> float:
        return self.connected + self.wait()

    def longest(self) -> float:
        """The latest the deadline can move to, whatever comes."""
        return self.connected + first_picture_wait(self.open_timeout, MAX_GOP_S)

    def failure(self) -> str:
        """Our words for no picture within the wait."""
        seen = (f" ({self.packets} frame(s) came, {len(self.keyframes)} keyframe(s))" if self.packets else "")
        return (f"connected, waiting for a keyframe: no picture within {self.wait():.3g} s{seen} "
                "(a camera sending keyframes further apart needs a longer --open-timeout)")

    def note(self, first: float) -> str:
        """One line: how long the first picture took, and why."""
        took = first - self.connected
        why: list[str] = []
        if self.before_key:
            why.append(f"joined between keyframes ({self.before_key} frame(s) before the first keyframe)")
        elif self.answered is not None and self.answered - self.connected >= 0.5:
            why.append("joined between keyframes (the server held its answer until its next keyframe)")
        if self.attempts > 1:
            why.append(f"{self.attempts} attempts")
        if self.undecodable:
            why.append(f"{self.undecodable} frame(s) without a reference skipped")
        gop = f" (keyframes about {self.gop_s:.3g} s apart)" if self.gop_s else ""
        return f"first picture after {took:.1f} s" + (f": {', '.join(why)}{gop}" if why else gop)
