"""tools/triton/env.py: the server environment is built once and reused, its build is
time-bounded and fails in one line, and the server gets the interpreter's LIBDIR."""
from __future__ import annotations

import fcntl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.triton import require_triton_env
from tools.triton.env import STAMP, TritonEnvError, ensure_env, read_facts, server_binary, server_environ

ENV_SCRIPT = Path(__file__).resolve().parent.parent / "tools" / "triton" / "env.py"


def test_a_built_env_is_reused_without_building(monkeypatch: pytest.MonkeyPatch) -> None:
    env = require_triton_env()
    monkeypatch.setenv("FACESTREAM_TRITON_PYTHON", "/nonexistent/python3")  # a build would fail at once
    assert ensure_env(env) == env
    assert server_binary(env).is_file()
    assert (server_binary(env).parent.parent / "backends" / "python" / "triton_python_backend_stub").is_file()


def test_the_server_runs_with_the_interpreters_libdir_and_the_envs_bin() -> None:
    env = require_triton_env()
    libdir = read_facts(env)["libdir"]
    assert (Path(libdir) / f"libpython{read_facts(env)['version']}.so.1.0").exists()
    environ = server_environ(env, {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/x"})
    assert environ["LD_LIBRARY_PATH"].split(":")[0] == libdir and environ["LD_LIBRARY_PATH"].endswith(":/opt/x")
    assert environ["PATH"] == f"{env / 'bin'}:/usr/bin"


def test_an_unusable_python_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FACESTREAM_TRITON_PYTHON", str(tmp_path / "no-python"))
    with pytest.raises(TritonEnvError, match=r"^Triton env: cannot run Python .*no-python") as err:
        ensure_env(tmp_path / "env")
    assert "\n" not in str(err.value) and not (tmp_path / "env" / STAMP).exists()


def test_a_build_held_by_another_process_is_waited_for_a_bounded_time(tmp_path: Path) -> None:
    env = tmp_path / "env"
    with open(tmp_path / "env.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another test session building the same env
        begun = time.monotonic()
        with pytest.raises(TritonEnvError, match="stayed locked for 1 s"):
            ensure_env(env, timeout=1)
        assert time.monotonic() - begun < 30  # gives up, where it used to wait for ever


def test_serve_without_a_repository_folder_is_one_line(tmp_path: Path) -> None:
    require_triton_env()
    proc = subprocess.run([sys.executable, str(ENV_SCRIPT), "serve", str(tmp_path / "missing")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == f"error: model repository {tmp_path / 'missing'}: not a folder\n"


def test_a_folder_that_is_not_a_venv_is_never_removed(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(TritonEnvError, match="exists and is not a virtualenv"):
        ensure_env(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"
