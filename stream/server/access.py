"""The server's optional access token (`serve --token`/`--token-file`): when set, every
request but a CORS preflight must carry it.

Where a client puts it:
- `Authorization: Bearer TOKEN`, as WHIP and WHEP clients (OBS, players) send it;
- the `facestream_access` cookie, which the page's own requests carry: a browser opens
  the page once as `/?access_token=TOKEN` (RFC 6750's query parameter) and the answer
  sets the cookie (HttpOnly, SameSite=Strict), so the page's scripts never handle it;
- `?access_token=TOKEN` on any request.
"""
from __future__ import annotations

import secrets

from aiohttp import web

VISITOR = web.RequestKey("visitor", str)  # who asks (the visitor cookie), set by the server's middleware
ACCESS_COOKIE = "facestream_access"
QUERY_PARAMETER = "access_token"


def given_token(request: web.Request) -> tuple[str | None, bool]:
    """The token the request carries, if any, and whether it came in the query (to be kept
    in the cookie)."""
    auth = request.headers.get("Authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip(), False
    query = request.query.get(QUERY_PARAMETER)
    if query:
        return query, True
    return request.cookies.get(ACCESS_COOKIE), False


def same_token(given: str, token: str) -> bool:
    return secrets.compare_digest(given.encode("utf-8", "replace"), token.encode())


def challenge(error: str | None = None) -> dict[str, str]:
    """The WWW-Authenticate header of a 401 (RFC 6750)."""
    value = 'Bearer realm="facestream"'
    if error:
        value += f', error="{error}"'
    return {"WWW-Authenticate": value}


def keep_in_cookie(response: web.StreamResponse, token: str) -> None:
    response.set_cookie(ACCESS_COOKIE, token, httponly=True, samesite="Strict", path="/",
                        max_age=30 * 24 * 3600)
