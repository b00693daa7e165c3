"""Downloading model files on request: verified, resumed, from the next address on failure,
never a partial file.

A download goes to `<file>.part` in the destination folder and takes its final name only
once complete and verified (the sha256 a public source states, or the CRC32 the host
publishes beside the file), so an interrupted, truncated or corrupt download never leaves a
file that looks like a model. A connection that drops mid-file is resumed where it stopped
(an HTTP range request; a server that ignores ranges sends the file again). An address that
fails (down, wrong checksum, cut short) gives way to the next; Ctrl-C removes what was
being written.
"""
from __future__ import annotations

import hashlib
import http.client
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

from engines.catalog import Address, ModelEntry
from engines.errors import EngineError

CHUNK = 1 << 20
TIMEOUT_S = 30.0
RESUMES = 3  # a dropped connection is resumed this many times before the address is given up
USER_AGENT = "facestream-models/1"

Progress = Callable[[int, int | None], None]


class DownloadFailed(EngineError):
    """One address did not give a verified file; `reason` says why in a few words."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"download of {url!r} failed: {reason}")
        self.url = url
        self.reason = reason


class NotFetched(EngineError):
    """No address gave a verified file of one model (one line, every address's reason). A
    run that fetches several models goes on to the next one."""


class _Short(Exception):
    def __init__(self, done: int, total: int) -> None:
        self.done, self.total = done, total


def _open(url: str, start: int = 0) -> http.client.HTTPResponse:
    headers = {"User-Agent": USER_AGENT}
    if start:
        headers["Range"] = f"bytes={start}-"
    return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S)


def _total(resp: http.client.HTTPResponse, start: int) -> int | None:
    """The whole file's size: from Content-Range on a 206, Content-Length on a 200."""
    if resp.status == 206:
        match = re.match(r"bytes \d+-\d+/(\d+)", resp.headers.get("Content-Range", ""))
        return int(match.group(1)) if match else None
    length = resp.headers.get("Content-Length")
    return int(length) if length and length.isdigit() else None


def _download(url: str, part: Path, progress: Progress | None) -> None:
    """`url` into `part`, resuming a dropped connection where it stopped."""
    resumes = 0
    while True:
        have = part.stat().st_size if part.exists() else 0
        done, total = have, None
        try:
            with _open(url, have) as resp:
                if have and resp.status != 206:  # the server ignores ranges: the whole file again
                    have = done = 0
                total = _total(resp, have)
                with open(part, "ab" if have else "wb") as out:
                    while chunk := resp.read(CHUNK):
                        out.write(chunk)
                        done += len(chunk)
                        if progress is not None:
                            progress(done, total)
            if total is not None and done < total:
                raise _Short(done, total)
            return
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and have:  # nothing left to send: the part was whole, or stale
                part.unlink()
                continue
            raise DownloadFailed(url, f"HTTP {exc.code} {exc.reason}") from None
        except (_Short, http.client.IncompleteRead, ConnectionError, TimeoutError) as exc:
            resumes += 1
            if resumes > RESUMES:
                have_now = part.stat().st_size if part.exists() else 0
                said = f"stopped at {have_now} of {total} bytes" if total else f"stopped ({type(exc).__name__})"
                raise DownloadFailed(url, f"{said}, {RESUMES} resumes tried") from None
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
            raise DownloadFailed(url, str(reason)) from None


def _published_crc32(address: Address) -> str | None:
    """The CRC32 the host publishes for the file (8 hex digits), or the one the catalog states."""
    if address.crc32 or not address.checksum_url:
        return address.crc32
    try:
        with _open(address.checksum_url) as resp:
            text = resp.read(64).decode("ascii", "replace").strip().lower()
    except urllib.error.HTTPError as exc:
        raise DownloadFailed(address.checksum_url, f"its checksum file: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        raise DownloadFailed(address.checksum_url, f"its checksum file: {reason}") from None
    if not re.fullmatch(r"[0-9a-f]{8}", text):
        raise DownloadFailed(address.checksum_url, "its checksum file is not a CRC32 (8 hex digits)")
    return text


def digests(path: Path) -> tuple[str, str]:
    """The file's sha256 and CRC32 (8 hex digits), read once."""
    sha, crc = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            sha.update(chunk)
            crc = zlib.crc32(chunk, crc)
    return sha.hexdigest(), format(crc, "08x")


def _check(path: Path, url: str, sha256: str | None, crc32: str | None) -> str:
    """How the file was verified ("sha256", "CRC32"); DownloadFailed naming the mismatch."""
    got_sha, got_crc = digests(path)
    if sha256 and got_sha == sha256.lower():
        return "sha256"
    if crc32 and got_crc == crc32:
        return "CRC32"
    if sha256 and not crc32:
        raise DownloadFailed(url, f"sha256 {got_sha}, expected {sha256.lower()}")
    if crc32 and not sha256:
        raise DownloadFailed(url, f"CRC32 {got_crc}, expected {crc32}")
    raise DownloadFailed(url, f"neither checksum matches (sha256 {got_sha}, CRC32 {got_crc})")


def _extract(archive: Path, member: str, part: Path, url: str) -> None:
    try:
        with zipfile.ZipFile(archive) as zf:
            name = next((n for n in zf.namelist() if n == member or n.endswith("/" + member)), None)
            if name is None:
                raise DownloadFailed(url, f"the archive has no {member}")
            with zf.open(name) as src, open(part, "wb") as out:
                shutil.copyfileobj(src, out, CHUNK)
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise DownloadFailed(url, f"not a readable zip archive ({exc})") from None


def fetch_address(address: Address, dest: Path, progress: Progress | None = None,
                  archives: dict[str, Path] | None = None, require_check: bool = True) -> str:
    """Download the file at `address` to `dest`, verified. Returns how it was verified
    ("sha256", "CRC32", or "" when `require_check` is off and the address has no check).
    `archives`: zip archives already downloaded this run, by URL (kept for the caller to
    remove), so two members of one pack download it once. Raises DownloadFailed (one line);
    nothing is left at `dest` or beside it on any failure or on Ctrl-C."""
    if require_check and not address.verified:
        raise DownloadFailed(address.url, "no checksum to verify it against")
    part = dest.with_name(dest.name + ".part")
    own_archive: Path | None = None
    try:
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EngineError(f"models folder {str(dest.parent)!r} cannot be created: {exc.strerror}") from exc
        crc32 = _published_crc32(address)
        if address.member:
            archive = (archives or {}).get(address.url)
            if archive is None:
                fd, name = tempfile.mkstemp(prefix="facestream-", suffix=".zip.part", dir=dest.parent)
                os.close(fd)
                archive = own_archive = Path(name)
                own_archive.unlink()
                _download(address.url, own_archive, progress)
                if archives is not None:
                    archives[address.url], own_archive = own_archive, None
            _extract(archive, address.member, part, address.url)
        else:
            _download(address.url, part, progress)
        how = _check(part, address.url, address.sha256, crc32) if (address.sha256 or crc32) else ""
        os.replace(part, dest)
        return how
    finally:  # on success the part is already renamed; on any failure or Ctrl-C it goes
        part.unlink(missing_ok=True)
        if own_archive is not None:
            own_archive.unlink(missing_ok=True)


def fetch(url: str, dest: Path, sha256: str | None = None, progress: Progress | None = None) -> Path:
    """Download `url` to `dest` (a file path), checked against `sha256` when given. Raises
    EngineError with one line on failure."""
    fetch_address(Address(url, sha256=sha256), Path(dest), progress, require_check=False)
    return Path(dest)


def fetch_model(entry: ModelEntry, dest: Path, addresses: tuple[Address, ...],
                progress: Progress | None = None, archives: dict[str, Path] | None = None,
                tried: Callable[[Address, str], None] | None = None,
                require_check: bool = True) -> tuple[Address, str]:
    """`entry`'s file to `dest` from the first of `addresses` that gives a verified file
    (`require_check` off: an address with no checksum is taken as it comes, the user's own).
    `tried(address, reason)` is told of each address that failed before the next is tried.
    Returns the address used and how it was verified; NotFetched (one line, every address's
    reason) when none did."""
    failures = []
    for i, address in enumerate(addresses):
        try:
            return address, fetch_address(address, dest, progress, archives, require_check)
        except DownloadFailed as exc:
            failures.append(f"{address.host}: {exc.reason}")
            if tried is not None and i + 1 < len(addresses):
                tried(address, exc.reason)
    if not failures:
        raise NotFetched(f"model {entry.name!r}: the catalog has no address for {entry.file}; "
                         f"put it in the models folder yourself, or give --url")
    raise NotFetched(f"model {entry.name!r} ({entry.file}): no address gave a verified file "
                     f"({'; '.join(failures)})")
