"""`facestream models [fetch]`: what the catalog's files are, where they were found, their
licences, and downloading them by name, verified."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from stream.cli.parser import CliError
from stream.cli.progress import Progress

if TYPE_CHECKING:
    from engines.catalog import ModelEntry


def _size(n: int | None) -> str:
    return f"{n / 1e6:.0f} MB" if n else "size not published"


def _names(args: argparse.Namespace) -> list[str]:
    from engines.catalog import CATALOG, DEFAULT_SET, entry

    if args.all and args.names:
        raise CliError("models fetch: give names or --all, not both")
    names = list(CATALOG) if args.all else list(dict.fromkeys(args.names)) or list(DEFAULT_SET)
    for name in names:
        entry(name)  # an unknown name is one line listing the known ones
    if args.url and len(names) != 1:
        raise CliError("models fetch --url: name exactly one model")
    if args.sha256 and not args.url:
        raise CliError("models fetch --sha256 goes with --url (the catalog's files carry their own checksums)")
    return names


MIRROR_SCHEMES = ("http://", "https://", "file://")


def _mirror(text: str) -> str:
    """A mirror as a URL: http(s) and file URLs as given, a folder's path as its file:// URL;
    anything else is one line naming it."""
    if text.lower().startswith(MIRROR_SCHEMES):
        return text
    if "://" not in text and Path(text).is_dir():
        return Path(text).resolve().as_uri()
    raise CliError(f"models fetch --mirror {text!r}: not an http://, https:// or file:// URL, nor a folder")


def _fetch_one(args: argparse.Namespace, item: ModelEntry, dest: Path, mirrors: list[str],
               archives: dict[str, Path]) -> None:
    from engines.catalog import Address, mirror_addresses
    from engines.fetch import fetch_model

    if args.url:
        addresses: tuple[Address, ...] = (Address(args.url, sha256=args.sha256),)
    elif mirrors:
        addresses = mirror_addresses(item, mirrors)
    else:
        addresses = item.addresses
    print(f"{item.name} ({item.file}, {_size(item.size)}): licence: {item.licence or 'not stated'}")
    bar = Progress(0, label=f"{item.file}: ", unit="bytes")

    def progress(done: int, total: int | None) -> None:
        bar.update(done=done, total=total)

    def tried(address: Address, reason: str) -> None:
        nonlocal bar
        bar.close()
        print(f"  {address.host}: {reason}; trying the next address", file=sys.stderr)
        bar = Progress(0, label=f"{item.file}: ", unit="bytes")  # the next address's download, from its start

    try:  # the user's own --url without --sha256 is taken unverified, as they asked
        address, how = fetch_model(item, dest, addresses, progress, archives, tried, require_check=not args.url)
    finally:
        bar.close()
    checked = f"{how} verified" if how else "not verified: no checksum given"
    print(f"fetched {item.name} to {dest} (from {address.host}, {checked})")


def cmd_models_fetch(args: argparse.Namespace) -> int:
    from engines.catalog import entry, user_models_dir
    from engines.fetch import NotFetched

    names = _names(args)
    folder = Path(args.fetch_dir or args.models_dir or user_models_dir())
    mirrors = [_mirror(m) for m in args.mirrors or [m.strip() for m in os.environ.get(
        "FACESTREAM_MODEL_MIRRORS", "").split(",") if m.strip()]]
    archives: dict[str, Path] = {}
    fetched, kept, failed = [], [], []
    try:
        for name in names:
            item = entry(name)
            dest = folder / item.file
            if dest.is_file() and not args.force:
                kept.append(name)
                print(f"{name}: already in {folder} (--force fetches it again)")
                continue
            try:
                _fetch_one(args, item, dest, mirrors, archives)
            except NotFetched as exc:  # the others are still worth having: said now, and at the end
                if len(names) > 1:
                    print(f"  {exc}", file=sys.stderr)
                failed.append((name, exc))
                continue
            fetched.append(name)
    finally:
        for archive in archives.values():
            archive.unlink(missing_ok=True)
    print(f"models: {len(fetched)} fetched, {len(kept)} already present"
          + (f", {len(failed)} not fetched" if failed else "") + f", in {folder}")
    if len(failed) == 1:
        raise failed[0][1]
    if failed:
        raise CliError(f"models fetch: {len(failed)} of {len(names)} models not fetched "
                       f"({', '.join(n for n, _ in failed)}): each one's reasons are above")
    return 0


def _int8_line(float_file: Path) -> None:
    """The INT8 twin of a found file, with its drift and speed, when there is one."""
    from engines.int8 import fresh_report, int8_path, read_report

    twin = int8_path(float_file)
    if not twin.is_file():
        return
    report = fresh_report(twin, float_file)
    if report is None:
        stale = read_report(twin) is not None
        print(f"  {'':<24} {'int8':<10} {twin.name}: {'stale (the float file changed since)' if stale else 'no report'}"
              f": `facestream models quantize` writes it again")
        return
    figures = ", ".join(f"{k} {v:.4g}" for k, v in report.measures.items() if k in report.budget)
    speeds = "; ".join(f"{kind} {one['fp32_ms']:.3g} -> {one['int8_ms']:.3g} ms "
                       f"({one['fp32_ms'] / one['int8_ms']:.1f}x)" for kind, one in report.speed.items()
                       if isinstance(one, dict) and one.get("fp32_ms") and one.get("int8_ms"))
    print(f"  {'':<24} {'int8':<10} {twin.name}: {report.status()}; {figures}"
          + (f"; {speeds} on {report.speed.get('cpu', 'its CPU')}" if speeds else ""))


def cmd_models(args: argparse.Namespace) -> int:
    from engines.catalog import CATALOG, DEFAULT_SET, locate, search_dirs

    if args.models_command == "fetch":
        return cmd_models_fetch(args)
    if args.models_command == "quantize":
        from stream.cli.quantize_command import cmd_models_quantize

        return cmd_models_quantize(args)
    dirs = search_dirs(args.models_dir)
    print("folders searched: " + ", ".join(str(d) for d in dirs))
    missing = []
    for name, item in CATALOG.items():
        found = locate(name, args.models_dir)
        where = f"found: {found}" if found else f"missing: put {item.file} in {dirs[0]}"
        if not found and name in DEFAULT_SET:
            missing.append(name)
        size = _size(found.stat().st_size if found else item.size)
        print(f"  {name:<24} {item.kind:<10} {where}")
        print(f"  {'':<24} {'':<10} {size}; licence: {item.licence or 'not stated'}")
        if found:
            _int8_line(found)
    for folder in dirs:  # the embedded default's embedding, when its ONNX export was made here
        from engines.dlib.embedding_io import FILE_NAME

        if (folder / FILE_NAME).is_file():
            print(f"  {'dlib_embedder':<24} {'embedder':<10} found: {folder / FILE_NAME} (made by "
                  f"`models quantize dlib_embedder`)")
            _int8_line(folder / FILE_NAME)
    if missing:
        print(f"the default neural set lacks {', '.join(missing)}: `facestream models fetch` gets them")
    return 0
