"""The model catalog and `facestream models [fetch]`, against a local HTTP server."""
from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines.catalog import CATALOG, entry, find, locate, search_dirs
from engines.errors import EngineError, ModelNotFound
from engines.fetch import fetch
from stream.cli.main import main
from tests.fixtures.http_files import QuietHandler, http_server

PAYLOAD = os.urandom(3 * (1 << 20) + 12345)  # a few chunks and a ragged tail


class Handler(QuietHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path == "/model.onnx":
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAYLOAD)))
            self.end_headers()
            self.wfile.write(PAYLOAD)
        elif self.path == "/cut.onnx":  # promises the whole file, sends half, hangs up
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAYLOAD)))
            self.end_headers()
            self.wfile.write(PAYLOAD[: len(PAYLOAD) // 2])
            self.wfile.flush()
            self.close_connection = True
        else:
            self.send_error(404)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with http_server(Handler) as url:
        yield url


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("FACESTREAM_MODELS", raising=False)


def test_fetch_verifies_and_lands_under_the_final_name(server: str, tmp_path: Path) -> None:
    seen: list[tuple[int, int | None]] = []
    dest = tmp_path / "m" / "inswapper_128.onnx"
    sha = hashlib.sha256(PAYLOAD).hexdigest()
    fetch(f"{server}/model.onnx", dest, sha, lambda d, t: seen.append((d, t)))
    assert dest.read_bytes() == PAYLOAD
    assert seen[-1] == (len(PAYLOAD), len(PAYLOAD)) and len(seen) > 1
    assert not dest.with_name(dest.name + ".part").exists()


@pytest.mark.parametrize("path, sha, needle", [
    ("/model.onnx", "0" * 64, "sha256 [0-9a-f]{64}, expected 0{64}"),
    ("/cut.onnx", None, "stopped at|failed"),
    ("/missing.onnx", None, "Not Found"),
])
def test_failed_fetch_leaves_nothing(server: str, tmp_path: Path, path: str, sha: str | None,
                                     needle: str) -> None:
    dest = tmp_path / "m" / "w600k_r50.onnx"
    with pytest.raises(EngineError, match=needle) as err:
        fetch(f"{server}{path}", dest, sha)
    assert "\n" not in str(err.value)
    assert list(dest.parent.iterdir()) == []  # neither the final name nor a .part


def test_search_order_and_missing_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, env, user = tmp_path / "first", tmp_path / "env", tmp_path / "xdg" / "facestream" / "models"
    monkeypatch.setenv("FACESTREAM_MODELS", str(env))
    assert search_dirs(first) == [first, env, user]
    with pytest.raises(ModelNotFound) as err:
        find("inswapper_128", first)
    assert "inswapper_128.onnx" in str(err.value) and str(env) in str(err.value)
    assert f"`facestream models fetch inswapper_128 --models-dir {first}` downloads it" in str(err.value)
    with pytest.raises(ModelNotFound, match=r"\(`facestream models fetch 2dfan4` downloads it\)$"):
        find("2dfan4")  # no folder of the user's: the fetch puts it where the search looks
    for folder in (user, env, first):  # each earlier folder wins once it holds the file
        folder.mkdir(parents=True)
        (folder / "inswapper_128.onnx").write_bytes(b"x")
        assert locate("inswapper_128", first) == folder / "inswapper_128.onnx"


def test_unknown_model_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="scrfd_10g"):
        entry("nosuch")


def test_models_command_lists_and_fetches(server: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture) -> None:
    folder = tmp_path / "models"
    assert main(["models", "--models-dir", str(folder)]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in CATALOG) and "missing: put det_10g.onnx" in out
    sha = hashlib.sha256(PAYLOAD).hexdigest()
    assert main(["models", "--models-dir", str(folder), "fetch", "scrfd_10g",
                 "--url", f"{server}/model.onnx", "--sha256", sha]) == 0
    assert (folder / "det_10g.onnx").read_bytes() == PAYLOAD
    assert main(["models", "--models-dir", str(folder)]) == 0
    assert f"found: {folder / 'det_10g.onnx'}" in capsys.readouterr().out
    assert main(["models", "fetch", "scrfd_10g", "--url", f"{server}/model.onnx", "--sha256", "1" * 64,
                 "--models-dir", str(tmp_path / "other")]) == 1
    assert "expected " + "1" * 64 in capsys.readouterr().err
    assert not (tmp_path / "other" / "det_10g.onnx").exists()
