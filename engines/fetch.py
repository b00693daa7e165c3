"""Downloading a model file on request: progress, sha256 check, never a partial file.

The download goes to `<file>.part` in the destination folder and is renamed to its final
name only once complete (and verified when a sha256 is given), so an interrupted or
truncated download never leaves a file that looks like a model.
"""
from __future__ import annotations

import hashlib
import http.client
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from engines.errors import EngineError

CHUNK = 1 << 20
TIMEOUT_S = 30.0


def fetch(url: str, dest: Path, sha256: str | None = None,
          progress: Callable[[int, int | None], None] | None = None) -> Path:
    """Download `url` to `dest` (a file path). Raises EngineError with one line on failure."""
    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EngineError(f"models folder {str(dest.parent)!r} cannot be created: {exc.strerror}") from exc
    part = dest.with_name(dest.name + ".part")
    digest = hashlib.sha256()
    done = 0
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp, open(part, "wb") as out:
            length = resp.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            while True:
                chunk = resp.read(CHUNK)
                if not chunk:
                    break
                out.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, total)
        if total is not None and done != total:
            raise EngineError(f"download of {url!r} stopped at {done} of {total} bytes")
        got = digest.hexdigest()
        if sha256 and got.lower() != sha256.lower():
            raise EngineError(f"download of {url!r} has sha256 {got}, expected {sha256.lower()}")
        os.replace(part, dest)
    except EngineError:
        part.unlink(missing_ok=True)
        raise
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        part.unlink(missing_ok=True)
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        raise EngineError(f"download of {url!r} failed: {reason}") from exc
    except BaseException:  # Ctrl-C: nothing partial stays behind
        part.unlink(missing_ok=True)
        raise
    return dest
