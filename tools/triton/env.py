"""The Triton server's environment: a virtualenv of its own, built from requirements.txt (at the
versions of constraints.txt, the lock), cached.

nvidia-pytriton's wheel bundles a real `tritonserver` with the Python backend; it pins
numpy<2, so it cannot share the project's venv. `ensure_env()` builds the venv once (pip
from PyPI) under `~/.cache/facestream/triton-env-<hash>` (the hash covers requirements.txt,
constraints.txt and the interpreter; `$FACESTREAM_TRITON_ENV` names another folder) and reuses it after.

    python tools/triton/env.py                  # build if needed, print the env's path
    python tools/triton/env.py serve REPO       # run the bundled tritonserver on REPO

Facts the server needs (the issue measured them): the Python backend's stub must match
the env's Python version (the wheel ships one per version; we copy it into the backend
folder, as pytriton does), and under a Python that is not the system's, the stub needs
`LD_LIBRARY_PATH` to reach that interpreter's LIBDIR (its libpython), otherwise a model
fails to load with `'_thread.RLock' object has no attribute '_recursion_count'`.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

REQUIREMENTS = Path(__file__).resolve().with_name("requirements.txt")
CONSTRAINTS = REQUIREMENTS.with_name("constraints.txt")  # every package pinned (tools/lock.sh)
STAMP = ".facestream-ready"  # written last: an env without it is a broken build, rebuilt
INSTALL_TIMEOUT_S = float(os.environ.get("FACESTREAM_TRITON_INSTALL_TIMEOUT", "900"))
STUB_VERSIONS = ((3, 8), (3, 13))  # the stubs nvidia-pytriton 0.7.0 ships


class TritonEnvError(RuntimeError):
    """The server environment could not be built or is unusable (one line, says why)."""


def base_python() -> str:
    """The interpreter the env is built with: `$FACESTREAM_TRITON_PYTHON`, else the one
    under the current venv (the project's Python)."""
    chosen = os.environ.get("FACESTREAM_TRITON_PYTHON")
    if chosen:
        return chosen
    return getattr(sys, "_base_executable", None) or sys.executable


def _python_facts(python: str) -> dict[str, str]:
    code = ("import json, sys, sysconfig; print(json.dumps({'version': '%d.%d' % sys.version_info[:2], "
            "'libdir': sysconfig.get_config_var('LIBDIR') or '', 'executable': sys.executable}))")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise TritonEnvError(f"Triton env: cannot run Python {python!r} ({exc})") from exc
    facts: dict[str, str] = json.loads(out)
    major, minor = (int(p) for p in facts["version"].split("."))
    if not STUB_VERSIONS[0] <= (major, minor) <= STUB_VERSIONS[1]:
        raise TritonEnvError(f"Triton env: Python {facts['version']} ({python}) has no Python-backend stub in "
                             f"nvidia-pytriton; use 3.8 to 3.13 (set FACESTREAM_TRITON_PYTHON)")
    return facts


def default_env_dir(python: str | None = None) -> Path:
    """Where the env lives: `$FACESTREAM_TRITON_ENV`, else a cache folder named by the hash
    of requirements.txt, constraints.txt and the interpreter's real path."""
    chosen = os.environ.get("FACESTREAM_TRITON_ENV")
    if chosen:
        return Path(chosen)
    digest = hashlib.sha256(REQUIREMENTS.read_bytes())
    if CONSTRAINTS.is_file():
        digest.update(CONSTRAINTS.read_bytes())
    digest.update(os.path.realpath(python or base_python()).encode())
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "facestream" / f"triton-env-{digest.hexdigest()[:12]}"


@contextlib.contextmanager
def _locked(path: Path, timeout: float) -> Iterator[None]:
    """An exclusive lock on `path` (two test sessions never build one env at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TritonEnvError(f"Triton env: {path} stayed locked for {timeout:.0f} s") from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(cmd: list[str], what: str, deadline: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TritonEnvError(f"Triton env: out of time before {what}")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=left)
    except subprocess.TimeoutExpired:
        raise TritonEnvError(f"Triton env: {what} took longer than {INSTALL_TIMEOUT_S:.0f} s") from None
    except OSError as exc:
        raise TritonEnvError(f"Triton env: {what} failed ({exc})") from exc
    if proc.returncode:
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines()
                 if ln.strip() and not ln.startswith("WARNING: Location")]
        raise TritonEnvError(f"Triton env: {what} failed ({lines[-1] if lines else f'exit {proc.returncode}'})")


def read_facts(env: Path) -> dict[str, str]:
    """What the build recorded: the env's Python version and its LIBDIR."""
    try:
        facts: dict[str, str] = json.loads((env / STAMP).read_text())
    except (OSError, ValueError) as exc:
        raise TritonEnvError(f"Triton env {env} is not built (run: python tools/triton/env.py)") from exc
    return facts


def ensure_env(env: Path | None = None, timeout: float = INSTALL_TIMEOUT_S) -> Path:
    """The server env's folder, built first if it is missing or unfinished.

    Raises TritonEnvError (one line) when the interpreter is unsuitable, pip fails, or the
    build takes longer than `timeout` seconds."""
    python = base_python()
    env = env or default_env_dir(python)
    if (env / STAMP).is_file():
        return env
    deadline = time.monotonic() + timeout
    with _locked(env.with_name(env.name + ".lock"), timeout):
        if (env / STAMP).is_file():  # another process built it while we waited
            return env
        facts = _python_facts(python)
        if env.exists():  # an unfinished build (no stamp) is started over; anything else is not ours
            if any(env.iterdir()) and not (env / "pyvenv.cfg").is_file():
                raise TritonEnvError(f"Triton env: {env} exists and is not a virtualenv; name an empty or new "
                                     f"folder (FACESTREAM_TRITON_ENV)")
            shutil.rmtree(env)
        _run([python, "-m", "venv", str(env)], "creating the venv", deadline)
        lock = ["-c", str(CONSTRAINTS)] if CONSTRAINTS.is_file() else []
        _run([str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              "-r", str(REQUIREMENTS), *lock], f"pip install -r {REQUIREMENTS}", deadline)
        root = _server_root(env)
        stub = root / "python_backend_stubs" / facts["version"] / "triton_python_backend_stub"
        if not stub.is_file():
            raise TritonEnvError(f"Triton env: no Python-backend stub for Python {facts['version']} in {root}")
        shutil.copy2(stub, root / "backends" / "python" / "triton_python_backend_stub")
        (env / STAMP).write_text(json.dumps(facts))
    return env


def _server_root(env: Path) -> Path:
    found = sorted(env.glob("lib/python3*/site-packages/pytriton/tritonserver"))
    if not found:
        raise TritonEnvError(f"Triton env {env}: nvidia-pytriton's tritonserver is not installed")
    return found[0]


def server_binary(env: Path) -> Path:
    """The bundled `tritonserver` executable."""
    return _server_root(env) / "bin" / "tritonserver"


def backend_dir(env: Path) -> Path:
    """The folder of server backends (the Python backend, with its stub)."""
    return _server_root(env) / "backends"


def server_environ(env: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment the server runs in: the env's bin first on PATH (the Python backend's
    stub finds its interpreter, and so the env's site-packages, there), LD_LIBRARY_PATH to
    the interpreter's LIBDIR and to the wheel's own libraries."""
    out = dict(os.environ if base is None else base)
    libs = [read_facts(env)["libdir"], str(_server_root(env).parent.parent / "nvidia_pytriton.libs")]
    if out.get("LD_LIBRARY_PATH"):
        libs.append(out["LD_LIBRARY_PATH"])
    out["LD_LIBRARY_PATH"] = ":".join(p for p in libs if p)
    out["PATH"] = f"{env / 'bin'}:{out.get('PATH', '/usr/bin:/bin')}"
    return out


def server_command(env: Path, repo: Path, http_port: int = 8000, grpc_port: int = 8001,
                   host: str = "127.0.0.1") -> list[str]:
    """The command line that serves `repo` with the bundled server (metrics off: the wheel's
    build has no metrics port to give)."""
    root = _server_root(env)
    return [str(server_binary(env)), f"--model-repository={repo}", f"--backend-directory={backend_dir(env)}",
            f"--cache-directory={root / 'caches'}", f"--http-address={host}", f"--http-port={http_port}",
            f"--grpc-address={host}", f"--grpc-port={grpc_port}", "--allow-metrics=false",
            "--disable-auto-complete-config", "--log-info=false"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="run the bundled tritonserver on a model repository")
    serve.add_argument("repo", type=Path)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--http-port", type=int, default=8000)
    serve.add_argument("--grpc-port", type=int, default=8001)
    args = parser.parse_args(argv)
    try:
        env = ensure_env()
    except TritonEnvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.command != "serve":
        print(env)
        return 0
    if not (args.repo / "").is_dir():
        print(f"error: model repository {args.repo}: not a folder", file=sys.stderr)
        return 2
    cmd = server_command(env, args.repo.resolve(), args.http_port, args.grpc_port, args.host)
    os.execve(cmd[0], cmd, server_environ(env))
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
