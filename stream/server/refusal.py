"""A refusal of an HTTP request: its status, the one-line message the client gets and any
headers it needs (a 401's WWW-Authenticate). The server's middleware writes it as JSON
({"error"}) on the page's API and as one line of text on the WHIP/WHEP endpoints."""
from __future__ import annotations

from collections.abc import Mapping


class ApiError(Exception):
    """A refusal: the status and the one-line message the client gets; `reason`, when
    set, is what facestream_refusals_total counts it as (stream.ops.metrics.REASONS)."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None,
                 reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})
        self.reason = reason


def shown(text: str, limit: int = 64) -> str:
    """A client-supplied value quoted in a message: printable, and short."""
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return repr(clean if len(clean) <= limit else clean[:limit] + "...")
