"""Still pictures lose nothing: alpha and 16-bit depth survive a swap where the output format
holds them (and a note says so where it does not), grey pictures work, and a failed write
leaves the earlier output as it was."""
from __future__ import annotations

import errno
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest

from stream.cli.main import main
from stream.config import load_config
from stream.errors import SinkError
from stream.job.runs import run_image
from stream.job.swap_job import SwapJob
from stream.media import image_io
from tests.fixtures import window_frame

ALPHA_NOTE = "alpha channel dropped"
DEPTH_NOTE = "16-bit depth reduced to 8 bits"
LOSSLESS = {".png", ".tif", ".bmp"}


def write_grey_alpha_png(path: Path, grey: np.ndarray, alpha: np.ndarray) -> None:
    """A PNG of colour type 4 (grey + alpha), which cv2.imwrite cannot make."""
    h, w = grey.shape
    rows = np.dstack([grey, alpha]).reshape(h, 2 * w)
    pixels = b"".join(b"\x00" + row.tobytes() for row in rows)  # filter type 0 on every row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", w, h, 8, 4, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(pixels))
                     + chunk(b"IEND", b""))


@dataclass(frozen=True)
class Still:
    """A test input: its file, the 8-bit BGR the swap sees, its alpha and 16-bit colour."""

    path: Path
    colour: np.ndarray
    alpha: np.ndarray | None = None
    deep: np.ndarray | None = None


def make_stills(folder: Path) -> dict[str, Still]:
    frame = window_frame(0)
    h, w = frame.shape[:2]
    # left edge fully transparent, right edge opaque
    alpha = np.tile(np.linspace(0, 255, w).round().astype(np.uint8), (h, 1))
    # 16 bits whose nearest 8-bit values are the frame's: x257 plus noise that stays under half a step
    noise = np.random.default_rng(7).integers(-100, 101, frame.shape)
    deep = np.clip(frame.astype(np.int32) * 257 + noise, 0, 65535).astype(np.uint16)
    grey = cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)
    grey3 = cv2.cvtColor(grey, cv2.COLOR_GRAY2BGR)
    alpha16 = alpha.astype(np.uint16) * 257
    stills = {
        "plain": Still(folder / "plain.png", frame),
        "rgba": Still(folder / "rgba.png", frame, alpha),
        "deep": Still(folder / "deep.png", frame, None, deep),
        "deep-tif": Still(folder / "deep.tif", frame, None, deep),
        "deep-rgba": Still(folder / "deep-rgba.png", frame, alpha16, deep),
        "grey": Still(folder / "grey.png", grey3),
        "grey-plain": Still(folder / "grey-plain.png", grey3),
        "grey-alpha": Still(folder / "grey-alpha.png", grey3, alpha),
    }
    for name, still in stills.items():
        if name == "grey-alpha":
            write_grey_alpha_png(still.path, grey, alpha)
            continue
        colour = still.deep if still.deep is not None else grey if name == "grey" else still.colour
        image = colour if still.alpha is None else np.dstack([colour, still.alpha])
        assert cv2.imwrite(str(still.path), image)
    return stills


@pytest.fixture(scope="module")
def stills(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Still]:
    return make_stills(tmp_path_factory.mktemp("stills"))


@pytest.fixture(scope="module")
def job(source_photo: Path) -> SwapJob:
    job = SwapJob(load_config(None), [str(source_photo)])
    job.open()
    return job


@pytest.fixture(scope="module")
def plain_swaps(job: SwapJob, stills: dict[str, Still], tmp_path_factory: pytest.TempPathFactory
                ) -> dict[str, np.ndarray]:
    """The 8-bit BGR swap of each colour picture, without alpha or depth: what every output
    of the same colour must hold."""
    folder = tmp_path_factory.mktemp("plain-swaps")
    out = {}
    for name, key in (("colour", "plain"), ("grey", "grey-plain")):
        path = folder / f"{name}.png"
        run_image(job, str(stills[key].path), str(path))
        out[name] = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    return out


def load(path: Path) -> np.ndarray:
    image = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    assert image is not None, path
    return image


# input, output suffix, channels written, dtype written, notes expected
CASES = [
    ("rgba", ".png", 4, np.uint8, ()),
    ("rgba", ".webp", 4, np.uint8, ()),
    ("rgba", ".tif", 4, np.uint8, ()),
    ("rgba", ".jpg", 3, np.uint8, (ALPHA_NOTE,)),
    ("rgba", ".bmp", 3, np.uint8, (ALPHA_NOTE,)),
    ("deep", ".png", 3, np.uint16, ()),
    ("deep", ".tiff", 3, np.uint16, ()),
    ("deep-tif", ".tif", 3, np.uint16, ()),
    ("deep-tif", ".png", 3, np.uint16, ()),
    ("deep", ".jpg", 3, np.uint8, (DEPTH_NOTE,)),
    ("deep", ".webp", 3, np.uint8, (DEPTH_NOTE,)),
    ("deep-rgba", ".png", 4, np.uint16, ()),
    ("deep-rgba", ".webp", 4, np.uint8, (DEPTH_NOTE,)),
    ("deep-rgba", ".jpg", 3, np.uint8, (ALPHA_NOTE, DEPTH_NOTE)),
    ("plain", ".jpg", 3, np.uint8, ()),
    ("grey", ".png", 3, np.uint8, ()),
    ("grey-alpha", ".png", 4, np.uint8, ()),
    ("grey-alpha", ".jpg", 3, np.uint8, (ALPHA_NOTE,)),
]


@pytest.mark.parametrize("name,suffix,channels,dtype,notes", CASES,
                         ids=[f"{c[0]}-to-{c[1][1:]}" for c in CASES])
def test_a_still_keeps_what_its_output_format_holds(job: SwapJob, stills: dict[str, Still],
                                                    plain_swaps: dict[str, np.ndarray], tmp_path: Path,
                                                    name: str, suffix: str, channels: int, dtype: type,
                                                    notes: tuple[str, ...]) -> None:
    still = stills[name]
    out_path = tmp_path / f"out{suffix}"
    result = run_image(job, str(still.path), str(out_path))
    out = load(out_path)
    assert out.shape == still.colour.shape[:2] + (channels,) and out.dtype == dtype

    # the swap ran: faces changed a meaningful share of the picture
    plain = plain_swaps["grey" if name.startswith("grey") else "colour"]
    changed = np.any(plain != still.colour, axis=2)
    assert changed.mean() > 0.02

    colour = out[..., :3]
    if dtype == np.uint16:  # untouched pixels keep their 16 bits, swapped ones are the 8-bit result x257
        assert np.array_equal(colour[~changed], still.deep[~changed])
        assert np.array_equal(colour[changed], plain[changed].astype(np.uint16) * 257)
    elif suffix in LOSSLESS:
        assert np.array_equal(colour, plain)
    else:  # lossy: inside the swapped area the output is the swap, not the input
        to_swap = np.abs(colour.astype(np.int16) - plain)[changed].mean()
        to_input = np.abs(colour.astype(np.int16) - still.colour)[changed].mean()
        assert to_swap < to_input / 3, (to_swap, to_input)

    if channels == 4:
        expected = still.alpha if out.dtype == still.alpha.dtype else (still.alpha // 257).astype(np.uint8)
        assert np.array_equal(out[..., 3], expected)

    lost = [n for n in result.notes if n.startswith((ALPHA_NOTE, DEPTH_NOTE))]
    assert len(lost) == len(notes) and all(any(n.startswith(want) for n in lost) for want in notes), lost
    assert all(suffix in n for n in lost)
    assert [p.name for p in tmp_path.iterdir()] == [out_path.name]  # no partial file left behind


@pytest.mark.parametrize("name,suffix,needles", [
    ("rgba", ".jpg", ["note: alpha channel dropped: .jpg has none; write .png to keep it"]),
    ("deep", ".jpg", ["note: 16-bit depth reduced to 8 bits: .jpg"]),
    ("rgba", ".png", []),
])
def test_the_cli_prints_what_was_lost(source_photo: Path, stills: dict[str, Still], tmp_path: Path,
                                      capsys: pytest.CaptureFixture, name: str, suffix: str,
                                      needles: list[str]) -> None:
    out = tmp_path / f"out{suffix}"
    assert main(["swap", "--source", str(source_photo), "--input", str(stills[name].path),
                 "--output", str(out), "-q"]) == 0
    printed = capsys.readouterr().out
    for needle in needles:
        assert printed.count(needle) == 1, printed
    if not needles:
        assert ALPHA_NOTE not in printed and DEPTH_NOTE not in printed


def _fail(*_args: object, **_kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


# each step of the write, failing as a full disk makes it fail
FAILING_STEPS: list[tuple[str, Callable[[pytest.MonkeyPatch], None]]] = [
    ("write", lambda mp: mp.setattr(os, "write", _fail)),
    ("fsync", lambda mp: mp.setattr(os, "fsync", _fail)),
    ("replace", lambda mp: mp.setattr(os, "replace", _fail)),
]


@pytest.mark.parametrize("existing", [True, False], ids=["over-an-output", "new-output"])
@pytest.mark.parametrize("step,fail", FAILING_STEPS, ids=[s[0] for s in FAILING_STEPS])
def test_a_failed_write_says_why_and_leaves_the_folder_as_it_was(
        job: SwapJob, stills: dict[str, Still], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        step: str, fail: Callable[[pytest.MonkeyPatch], None], existing: bool) -> None:
    out = tmp_path / "out.png"
    old = b"an earlier, good output"
    if existing:
        out.write_bytes(old)
    fail(monkeypatch)
    with pytest.raises(SinkError) as err:
        run_image(job, str(stills["rgba"].path), str(out))
    monkeypatch.undo()
    message = str(err.value)
    assert "\n" not in message
    assert str(out) in message and "No space left on device" in message, message
    assert sorted(p.name for p in tmp_path.iterdir()) == (["out.png"] if existing else [])
    if existing:
        assert out.read_bytes() == old


def test_a_write_replaces_an_earlier_output_whole(stills: dict[str, Still], tmp_path: Path) -> None:
    out = tmp_path / "out.png"
    out.write_bytes(b"x" * 2_000_000)  # longer than the new picture: nothing of it may remain
    os.chmod(out, 0o640)
    image_io.write_image(out, stills["rgba"].colour)
    assert np.array_equal(load(out), stills["rgba"].colour)
    assert os.stat(out).st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["out.png"]
