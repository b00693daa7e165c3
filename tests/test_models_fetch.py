"""`facestream models fetch` by name, against local HTTP servers holding synthetic files:
verified by a sha256 or by the CRC32 published beside the file, the next address when one is
down or sends a bad file, a dropped connection resumed, Ctrl-C, and never a partial file."""
from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import signal
import socket
import subprocess
import sys
import time
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines.catalog import CATALOG, DEFAULT_SET, Address, entry
from engines.errors import EngineError
from engines.fetch import fetch_model
from stream.cli.main import main
from stream.cli.progress import Progress
from tests.fixtures.http_files import QuietHandler, http_server

ROOT = Path(__file__).resolve().parent.parent
# One synthetic body per catalog file (the real ones cannot be downloaded here).
BODIES = {e.file: os.urandom((1 << 20) + 1000 * i + 7) for i, e in enumerate(CATALOG.values())}


def crc(data: bytes) -> str:
    return format(zlib.crc32(data), "08x")


def pack(*files: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for file in files:
            zf.writestr(f"buffalo_l/{file}", BODIES[file])
    return buf.getvalue()


PACK = pack("det_10g.onnx", "w600k_r50.onnx")


class Handler(QuietHandler):
    """/good/F: the file, its `.hash` beside it, ranges honoured; /bad/F: other bytes under a
    true `.hash`; /nohash/F: no `.hash`; /cut/F: the first answer to each client stops half
    way; /cutall/F: every answer does; /norange/F: ranges ignored, the first answer cut;
    /slow/F: a trickle (for Ctrl-C); /pack.zip: a zip of two files."""

    requests: list[tuple[str, str | None]] = []
    cut_once: set[str] = set()

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        Handler.requests.append((self.path, self.headers.get("Range")))
        kind, _, name = self.path.strip("/").partition("/")
        if self.path == "/pack.zip":
            return self._send(PACK)
        stem, dot, ext = name.rpartition(".")
        if ext == "hash":
            file = next((f for f in BODIES if f.rsplit(".", 1)[0] == stem), None)
            if file is None or kind == "nohash":
                return self.send_error(404)
            return self._send(crc(BODIES[file]).encode())
        body = BODIES.get(name)
        if body is None:
            return self.send_error(404)
        if kind == "bad":
            return self._send(bytes(reversed(body)))
        if kind == "slow":
            return self._send(body, trickle=True)
        if kind == "cutall" or (kind in ("cut", "norange") and self.path not in Handler.cut_once):
            Handler.cut_once.add(self.path)
            return self._send(body, cut=True, honour_range=kind != "norange")
        return self._send(body, honour_range=kind != "norange")

    def _send(self, body: bytes, cut: bool = False, trickle: bool = False, honour_range: bool = True) -> None:
        start = 0
        rng = self.headers.get("Range")
        if rng and honour_range:
            start = int(rng.split("=")[1].split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        data = body[start:]
        if cut:
            data = data[: len(data) // 2]
        if trickle:
            for i in range(0, len(data), 16384):
                self.wfile.write(data[i:i + 16384])
                self.wfile.flush()
                time.sleep(0.05)
            return
        self.wfile.write(data)
        if cut:
            self.wfile.flush()
            self.close_connection = True


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with http_server(Handler) as url:
        yield url


@pytest.fixture
def closed_port() -> str:
    """The address of a port nothing listens on: a mirror that is down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/good"


@pytest.fixture(autouse=True)
def stated_checksums_of_the_synthetic_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the catalog states a file's CRC32 (2dfan4, xseg_1 ...), the synthetic body's own
    stands in for it here: a mirror is checked against what the catalog states."""
    for name, item in CATALOG.items():
        if any(a.crc32 for a in item.addresses):
            addresses = tuple(dataclasses.replace(a, crc32=crc(BODIES[item.file])) if a.crc32 else a
                              for a in item.addresses)
            monkeypatch.setitem(CATALOG, name, dataclasses.replace(item, addresses=addresses))


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("FACESTREAM_MODELS", raising=False)
    monkeypatch.delenv("FACESTREAM_MODEL_MIRRORS", raising=False)
    Handler.requests.clear()
    Handler.cut_once.clear()


def fetch_cli(*args: str) -> int:
    return main(["models", "fetch", *args])


def test_a_model_by_name_from_a_mirror_verified_by_its_published_crc32(
        server: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = tmp_path / "models"
    assert fetch_cli("inswapper_128", "--mirror", f"{server}/good", "--models-dir", str(folder)) == 0
    assert (folder / "inswapper_128.onnx").read_bytes() == BODIES["inswapper_128.onnx"]
    assert sorted(p.name for p in folder.iterdir()) == ["inswapper_128.onnx"]
    out = capsys.readouterr().out
    licence, fetched = out.index("licence: non-commercial"), out.index("fetched inswapper_128")
    assert licence < fetched  # the licence is printed before the download
    assert "CRC32 verified" in out and "1 fetched, 0 already present" in out


def test_no_name_gets_the_default_set_and_all_gets_every_model(server: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    folder = tmp_path / "models"
    assert fetch_cli("--mirror", f"{server}/good", "--models-dir", str(folder)) == 0
    assert sorted(p.name for p in folder.iterdir()) == sorted(entry(n).file for n in DEFAULT_SET)
    assert set(DEFAULT_SET) == {"scrfd_10g", "arcface_w600k_r50", "inswapper_128", "2dfan4"}
    capsys.readouterr()
    assert fetch_cli("--all", "--mirror", f"{server}/good", "--models-dir", str(folder)) == 0
    out = capsys.readouterr().out
    assert sorted(p.name for p in folder.iterdir()) == sorted(e.file for e in CATALOG.values())
    assert f"{len(CATALOG) - len(DEFAULT_SET)} fetched, {len(DEFAULT_SET)} already present" in out
    assert all(BODIES[p.name] == p.read_bytes() for p in folder.iterdir())


def test_a_mirror_that_is_down_gives_way_to_the_next(server: str, closed_port: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    folder = tmp_path / "models"
    assert fetch_cli("2dfan4", "--mirror", closed_port, "--mirror", f"{server}/good", "--models-dir", str(folder)) == 0
    assert (folder / "2dfan4.onnx").read_bytes() == BODIES["2dfan4.onnx"]
    err = capsys.readouterr().err
    assert "trying the next address" in err and closed_port.split("/")[2] in err


@pytest.mark.parametrize("kind, needle", [
    ("bad", r"CRC32 [0-9a-f]{8}, expected [0-9a-f]{8}"),  # the wrong bytes
    ("nohash", "its checksum file: HTTP 404"),  # nothing to verify against: not taken
    ("cutall", r"stopped at \d+ of \d+ bytes, 3 resumes tried"),  # cut short every time
])
def test_a_bad_download_is_one_line_and_leaves_no_file(server: str, tmp_path: Path, capsys: pytest.CaptureFixture,
                                                       kind: str, needle: str) -> None:
    folder = tmp_path / "models"
    assert fetch_cli("gfpgan_1.4", "--mirror", f"{server}/{kind}", "--models-dir", str(folder)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("facestream: error: model 'gfpgan_1.4' (gfpgan_1.4.onnx): no address gave a verified")
    assert pytest.importorskip("re").search(needle, err[-1]), err[-1]
    assert list(folder.iterdir()) == []  # neither the file nor a .part


def test_one_bad_model_of_several_does_not_stop_the_others(server: str, tmp_path: Path, capsys: pytest.CaptureFixture,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`fetch --all` or several names: a model no address gives is said in one line and the
    rest are still fetched; the run ends with the summary and one error line, exit 1."""
    item = CATALOG["2dfan4"]
    stated = tuple(dataclasses.replace(a, crc32="a948738e") if a.crc32 else a for a in item.addresses)
    monkeypatch.setitem(CATALOG, "2dfan4", dataclasses.replace(item, addresses=stated))  # the mirror's differs
    folder = tmp_path / "models"
    names = ["gfpgan_1.4", "2dfan4", "codeformer"]
    assert fetch_cli(*names, "--mirror", f"{server}/good", "--models-dir", str(folder)) == 1
    captured = capsys.readouterr()
    assert sorted(p.name for p in folder.iterdir()) == ["codeformer.onnx", "gfpgan_1.4.onnx"]  # no .part
    assert "models: 2 fetched, 0 already present, 1 not fetched" in captured.out
    err = captured.err.strip().splitlines()
    assert err[-1].startswith("facestream: error: model '2dfan4' (2dfan4.onnx): no address gave a verified file")
    assert "expected a948738e" in err[-1] and not any("trying the next address" in line for line in err)
    # two that fail: each said as it happens, then one line naming both
    monkeypatch.setitem(CATALOG, "gfpgan_1.4", dataclasses.replace(CATALOG["gfpgan_1.4"], addresses=stated))
    assert fetch_cli(*names, "--force", "--mirror", f"{server}/good", "--models-dir", str(folder)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("facestream: error: models fetch: 2 of 3 models not fetched (gfpgan_1.4, 2dfan4): "
                       "each one's reasons are above")
    assert sum(line.startswith("  model '") for line in err) == 2
    assert (folder / "gfpgan_1.4.onnx").read_bytes() == BODIES["gfpgan_1.4.onnx"]  # the file it had is kept


def test_a_download_in_a_log_is_a_line_a_quarter() -> None:
    """Not on a terminal, the bar is a line at each quarter it passes: one line for a step
    over several quarters, and 100% only once the file is whole."""
    log = io.StringIO()
    bar = Progress(0, label="m.onnx: ", stream=log, unit="bytes")
    for done in (100_000, 900_000, 950_000, 999_999, 1_000_000):
        bar.update(done=done, total=1_000_000)
    bar.close()
    percents = [line.split("(")[1].split(")")[0].strip() for line in log.getvalue().splitlines()]
    assert percents == ["90%", "100%"]


def test_a_folder_of_models_is_a_mirror(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A copy of the files on this machine (a share, a disk from another machine): its path or
    its file:// URL, checked as any mirror is (here by the .hash beside each file)."""
    share = tmp_path / "share"
    share.mkdir()
    for name in ("gfpgan_1.4", "codeformer"):
        body = BODIES[entry(name).file]
        (share / entry(name).file).write_bytes(body)
        (share / f"{name}.hash").write_text(crc(body))
    folder = tmp_path / "models"
    assert fetch_cli("gfpgan_1.4", "--mirror", str(share), "--models-dir", str(folder)) == 0
    assert fetch_cli("codeformer", "--mirror", share.as_uri(), "--models-dir", str(folder)) == 0
    assert all((folder / entry(n).file).read_bytes() == BODIES[entry(n).file] for n in ("gfpgan_1.4", "codeformer"))
    assert capsys.readouterr().out.count("CRC32 verified") == 2
    (share / "gfpgan_1.4.hash").write_text("00000000")
    assert fetch_cli("gfpgan_1.4", "--force", "--mirror", str(share), "--models-dir", str(folder)) == 1
    assert "CRC32" in capsys.readouterr().err and (folder / "gfpgan_1.4.onnx").exists()  # the good copy stays


@pytest.mark.parametrize("kind", ["cut", "norange"])
def test_a_dropped_connection_is_resumed_or_restarted(server: str, tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "models"
    assert fetch_cli("2dfan4", "--mirror", f"{server}/{kind}", "--models-dir", str(folder)) == 0
    assert (folder / "2dfan4.onnx").read_bytes() == BODIES["2dfan4.onnx"]
    gets = [r for p, r in Handler.requests if p == f"/{kind}/2dfan4.onnx"]
    half = (len(BODIES["2dfan4.onnx"])) // 2
    # the second request asks for the rest; the server that ignores ranges sends it all again
    assert gets == [None, f"bytes={half}-"]


def test_ctrl_c_mid_download_stops_in_one_line_and_leaves_nothing(server: str, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")}
    proc = subprocess.Popen([sys.executable, "-m", "stream.cli.main", "models", "fetch", "inswapper_128",
                             "--mirror", f"{server}/slow", "--models-dir", str(folder)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not list(folder.glob("*.part")):
        time.sleep(0.05)
    assert list(folder.glob("*.part")), "the download did not start"
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (out, err)
    assert [line for line in err.splitlines() if line.strip() and "MB" not in line] == ["facestream: interrupted"]
    assert list(folder.iterdir()) == []


def test_a_mirror_cannot_override_a_checksum_the_catalog_states(server: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture) -> None:
    item = CATALOG["2dfan4"]
    stated = tuple(dataclasses.replace(a, crc32="a948738e") if a.crc32 else a for a in item.addresses)
    monkeypatch.setitem(CATALOG, "2dfan4", dataclasses.replace(item, addresses=stated))  # the published value
    folder = tmp_path / "models"
    assert fetch_cli("2dfan4", "--mirror", f"{server}/good", "--models-dir", str(folder)) == 1
    assert "expected a948738e" in capsys.readouterr().err  # the mirror's own .hash is not asked
    assert list(folder.iterdir()) == []
    assert not any(p.endswith(".hash") for p, _ in Handler.requests)


def test_present_files_are_kept_unless_forced(server: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "2dfan4.onnx").write_bytes(b"mine")
    assert fetch_cli("2dfan4", "--mirror", f"{server}/good", "--models-dir", str(folder)) == 0
    assert (folder / "2dfan4.onnx").read_bytes() == b"mine" and "already in" in capsys.readouterr().out
    assert fetch_cli("2dfan4", "--force", "--mirror", f"{server}/good", "--models-dir", str(folder)) == 0
    assert (folder / "2dfan4.onnx").read_bytes() == BODIES["2dfan4.onnx"]


def test_the_publishers_pack_is_downloaded_once_for_two_of_its_files(server: str, tmp_path: Path) -> None:
    """insightface publishes its detector and embedder in a zip: each member is verified by
    its own sha256, and the pack is downloaded once for both."""
    archives: dict[str, Path] = {}
    for file in ("det_10g.onnx", "w600k_r50.onnx"):
        sha = hashlib.sha256(BODIES[file]).hexdigest()
        address = Address(f"{server}/pack.zip", sha256=sha, member=file)
        used, how = fetch_model(entry("scrfd_10g"), tmp_path / file, (address,), archives=archives)
        assert how == "sha256" and (tmp_path / file).read_bytes() == BODIES[file]
    assert [p for p, _ in Handler.requests] == ["/pack.zip"]
    assert all(p.exists() for p in archives.values())  # the caller removes them
    wrong = Address(f"{server}/pack.zip", sha256="0" * 64, member="det_10g.onnx")
    with pytest.raises(EngineError, match="sha256 [0-9a-f]{64}, expected 0{64}"):
        fetch_model(entry("scrfd_10g"), tmp_path / "x.onnx", (wrong,), archives=archives)
    assert not (tmp_path / "x.onnx").exists()
    assert set(tmp_path.glob("*.part")) == set(archives.values())  # only the kept pack


def test_the_catalog_orders_and_verifies_every_address() -> None:
    known = {"inswapper_128": "e4a3f08c753cb72d04e10aa0f7dbe3deebbf39567d4ead6dce08e98aa49e16af",
             "scrfd_10g": "5838f7fe053675b1c7a08b633df49e7af5495cee0493c7dcf6697200b85b5b91",
             "arcface_w600k_r50": "4c06341c33c2ca1f86781dab0e829f88ad5b64be9fba56e56bc9ebdefc619e43"}
    for name, item in CATALOG.items():
        assert item.addresses and item.licence, name
        assert all(a.verified for a in item.addresses), name
        if name in known:  # the original publisher first, with the sha256 public sources state
            first = item.addresses[0]
            assert first.url.startswith("https://github.com/deepinsight/insightface/releases/download/")
            assert first.sha256 == known[name]
    ff = [a for a in CATALOG["gfpgan_1.4"].addresses]
    assert [a.url for a in ff] == [
        "https://github.com/facefusion/facefusion-assets/releases/download/models-3.0.0/gfpgan_1.4.onnx",
        "https://huggingface.co/facefusion/models-3.0.0/resolve/main/gfpgan_1.4.onnx"]
    assert [a.checksum_url for a in ff] == [a.url.replace(".onnx", ".hash") for a in ff]


def test_models_lists_licences_and_what_the_default_set_lacks(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["models", "--models-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("licence: ") == len(CATALOG)
    assert "the default neural set lacks scrfd_10g, arcface_w600k_r50, inswapper_128, 2dfan4" in out


@pytest.mark.parametrize("args, needle", [
    (["nosuch"], "unknown model 'nosuch'"),
    (["inswapper_128", "--all"], "names or --all"),
    (["inswapper_128", "2dfan4", "--url", "http://x/y"], "exactly one"),
    (["inswapper_128", "--sha256", "00"], "goes with --url"),
    (["inswapper_128", "--mirror", "no/such/folder"], "--mirror 'no/such/folder': not an http://, https:// or"),
    (["inswapper_128", "--mirror", "ftp://host/models"], "--mirror 'ftp://host/models': not an http://"),
])
def test_bad_fetch_arguments_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture, args: list[str],
                                          needle: str) -> None:
    assert fetch_cli(*args, "--models-dir", str(tmp_path / "m")) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err
    assert not (tmp_path / "m").exists()


@pytest.mark.slow
def test_fetch_a_swapper_by_name_then_swap_with_it(tmp_path: Path, face_clip: Path, source_photo: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    """The issue's path: `models fetch hyperswap_1a_256` from a mirror (a synthetic file of its
    exact I/O, its CRC32 published beside it) downloads, verifies and places it, and a swap
    with `--swapper hyperswap_1a_256` runs on it."""
    from tests.fixtures import detector_and_embedder, make_hyperswap

    served = tmp_path / "served"
    served.mkdir()
    body = make_hyperswap(served / "hyperswap_1a_256.onnx").read_bytes()
    (served / "hyperswap_1a_256.hash").write_text(crc(body))
    models = tmp_path / "models"
    with http_server(folder=served) as url:
        assert fetch_cli("hyperswap_1a_256", "--mirror", url, "--models-dir", str(models)) == 0
    assert (models / "hyperswap_1a_256.onnx").read_bytes() == body
    assert "CRC32 verified" in capsys.readouterr().out
    detector_and_embedder(models)
    out = tmp_path / "out.mp4"
    assert main(["swap", "--engine", "neural", "--swapper", "hyperswap_1a_256", "--models-dir", str(models),
                 "--source", str(source_photo), "--input", str(face_clip), "--output", str(out),
                 "--x264-preset", "ultrafast", "-q"]) == 0
    assert "hyperswap_1a_256.onnx" in capsys.readouterr().out and out.stat().st_size > 0
