"""dlib's embedding network exported to ONNX by our own code (engines.dlib.onnx_export) and
run by ONNX Runtime (engines.dlib.onnx_embedding): the numpy port's embedding, a file made
the same byte for byte each time, made once into a models folder, and the numpy port where
ONNX Runtime is missing."""
from __future__ import annotations

import sys
from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest

from engines.backends.base import RuntimeOptions
from engines.backends.ort import OrtRuntime
from engines.dlib import onnx_export
from engines.dlib.embedder import DlibEmbedder
from engines.dlib.embedding_io import FIRST_CONV, INPUT, LAST_GEMM, OUTPUT, chips_to_blob
from engines.dlib.landmarker import DlibLandmarker
from engines.dlib.models import model_path, shared_model
from engines.dlib.onnx_embedding import OnnxDlibEmbedding, load_embedding
from engines.dlib.onnx_export import export_embedder
from engines.dlib.resnet import DlibResNet
from engines.frame_views import FrameViews
from stream.cli.quantize_command import embedder_onnx
from stream.media.demo_clips import astronaut, group_picture

# Float sums in another order (ONNX Runtime's kernels against numpy's BLAS, each picking its
# code by the CPU's instruction set): about 3e-7 apart on AVX2; dlib's threshold is 0.6.
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def faces() -> list[tuple[np.ndarray, np.ndarray]]:
    """(picture, 68 points) of each face HOG finds in the installed pictures."""
    hog, _ = shared_model("hog")
    lm = DlibLandmarker()
    out = []
    for bgr in (astronaut(), group_picture()):
        for r in hog(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), 1):
            out.append((bgr, lm.forward(FrameViews(bgr), (r.left(), r.top(), r.right() + 1, r.bottom() + 1))))
    assert len(out) == 8  # the astronaut, the mission patch HOG takes for one, t1.jpg's six
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_embedder(tmp_path_factory.mktemp("onnx") / "dlib_embedder.onnx", model_path("embedding"))


@pytest.fixture(scope="module")
def chips(faces: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    emb = DlibEmbedder()
    return np.stack([emb.chip(bgr, points) for bgr, points in faces])


def test_the_onnx_file_gives_the_numpy_ports_embedding(exported: Path, chips: np.ndarray) -> None:
    """Every installed face, one at a time and as one batch of eight, within TOLERANCE of the
    numpy port; the distinct people stay distinct by dlib's threshold."""
    port = DlibResNet(model_path("embedding"))
    want = np.stack([port.embed(chip) for chip in chips])
    runtime = OrtRuntime(exported, RuntimeOptions(providers="cpu", intra_threads=1))
    runtime.open()
    assert [(i.name, i.shape) for i in runtime.inputs] == [(INPUT, (None, 3, 150, 150))]
    assert [(o.name, o.shape) for o in runtime.outputs] == [(OUTPUT, (None, 128))]
    batch = runtime.run({INPUT: chips_to_blob(chips)})[OUTPUT]
    assert batch.shape == (len(chips), 128) and batch.dtype == np.float32
    assert np.abs(batch - want).max() < TOLERANCE
    model = OnnxDlibEmbedding(runtime)
    one = np.stack([model.embed(chip) for chip in chips])
    assert np.abs(one - want).max() < TOLERANCE
    assert np.abs(model.embed_many(chips) - want).max() < TOLERANCE  # in line: two threads
    assert model.embed_many(chips[:0]).shape == (0, 128)
    dists = [np.linalg.norm(a - b) for i, a in enumerate(one) for b in one[i + 1:]]
    assert min(dists) > 0.6


def test_the_graph_is_the_networks_with_dlibs_zero_padded_adds(exported: Path) -> None:
    """Dynamic batch, the normalisation inside, the named first convolution and last Gemm a
    quantiser leaves in float, and a Pad wherever dlib's add meets operands of two sizes."""
    model = onnx.load(str(exported))
    onnx.checker.check_model(model)
    ops = [n.op_type for n in model.graph.node]
    assert ops[:2] == ["Sub", "Mul"]
    by_name = {n.name: n.op_type for n in model.graph.node}
    assert by_name[FIRST_CONV] == "Conv" and by_name[LAST_GEMM] == "Gemm"
    assert ops.count("Conv") == 1 + 2 * 14 and ops.count("Add") == 14
    # Shortcut channels 32->64, 64->128, 128->256; residual 3->4 and 1->2 pixels a side.
    pads = sorted(n.name for n in model.graph.node if n.op_type == "Pad")
    assert pads == ["block10.residual_pad", "block10.shortcut_pad", "block13.residual_pad",
                    "block3.shortcut_pad", "block7.shortcut_pad"]
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param and [d.dim_value for d in dims[1:]] == [3, 150, 150]


def test_the_export_is_the_same_bytes_each_time(exported: Path, tmp_path: Path) -> None:
    again = export_embedder(tmp_path / "again.onnx", model_path("embedding"))
    assert again.read_bytes() == exported.read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["again.onnx"]  # no temporary file left


def test_the_quantize_command_makes_the_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Path] = []
    real = onnx_export.export_embedder

    def counting(path: Path, source: Path) -> Path:
        made.append(Path(path))
        return real(path, source)

    monkeypatch.setattr(onnx_export, "export_embedder", counting)
    folder = tmp_path / "models"
    first = embedder_onnx(folder)
    assert first == folder / "dlib_embedder.onnx" and first.is_file()
    assert embedder_onnx(folder) == first
    assert made == [first]


def test_the_chip_blob_is_the_embedders_chip(faces: list[tuple[np.ndarray, np.ndarray]]) -> None:
    bgr, points = faces[0]
    chip = DlibEmbedder().chip(bgr, points)
    blob = chips_to_blob(chip[None])
    assert blob.shape == (1, 3, 150, 150) and blob.dtype == np.float32
    assert np.array_equal(blob[0], chip.transpose(2, 0, 1))
    with pytest.raises(ValueError, match=r"face chips are .* got \(150, 150, 3\)"):
        chips_to_blob(blob[0].transpose(1, 2, 0))


def test_onnx_runtime_runs_it_where_installed_else_the_numpy_port(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = model_path("embedding")
    model = load_embedding(source)
    assert isinstance(model, OnnxDlibEmbedding)
    assert len(list((tmp_path / "cache").rglob("*.onnx"))) == 1
    # A cache that cannot be written: the numpy port.
    (tmp_path / "blocked").write_text("a file, not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "blocked"))
    assert type(load_embedding(source)) is DlibResNet
    # No ONNX Runtime (an import of it fails): the numpy port.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    assert type(load_embedding(source)) is DlibResNet
