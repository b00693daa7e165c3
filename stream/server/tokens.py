"""The access token's own checks, light to import (the command line reads a token file
before aiohttp is loaded): see stream.server.access for how requests carry it."""
from __future__ import annotations

from pathlib import Path

MAX_TOKEN_CHARS = 512


def check_token(token: str, where: str = "--token") -> str:
    """The token as given, or ValueError (one line) when it cannot be sent in a header."""
    if not token:
        raise ValueError(f"{where}: the token is empty")
    if len(token) > MAX_TOKEN_CHARS:
        raise ValueError(f"{where}: the token is {len(token)} characters; at most {MAX_TOKEN_CHARS} are taken")
    if any(not (c.isascii() and c.isprintable()) or c.isspace() for c in token):
        raise ValueError(f"{where}: the token must be printable ASCII without spaces")
    return token


def read_token_file(path: str) -> str:
    """The token in a file (its first line, surrounding whitespace removed); ValueError."""
    where = f"--token-file {path!r}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ValueError(f"{where}: no such file") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"{where}: not a text file") from exc
    except OSError as exc:
        raise ValueError(f"{where}: cannot read it ({exc.strerror or exc})") from exc
    lines = text.strip().splitlines()
    return check_token(lines[0].strip() if lines else "", where)
