"""dlib's 128-d face embedding run from its ONNX file (engines.dlib.onnx_export) by an
inference runtime: the same network and weights as the numpy port (engines.dlib.resnet),
the same embedding to within float rounding (tests/test_dlib_onnx.py), about half its time.

ONNX Runtime on one thread ran a face in 5-6 ms where the numpy port took 9-11 on these
cores (tools/bench_dlib_onnx.py), both letting the GIL go, so the process's embedder
(`load_embedding`, behind engines.dlib.models.shared_model) is this one where ONNX Runtime
is installed, and the numpy port where it is not or the file cannot be made.

It is the numpy port's class with another `_forward`: the batching, the in-line split of a
batch over a helper thread and the warm-up are the port's (DlibResNet.embed_many, warm),
so both behave alike in the pipeline. Its runtime gets one intra-op thread: the pipeline's
stages already keep the cores busy (BLAS gets one thread too, stream.runtime.cores), and with
one thread ONNX Runtime keeps no worker pool that spins after each run beside them (as
OpenBLAS's second thread did); where the stages wait for a detection, the batch is split over
two threads of our own, as the port does (six faces: 16 ms against 32 on one thread).
"""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import numpy as np

from engines.backends.base import InferenceRuntime, RuntimeOptions
from engines.dlib.embedding_io import FILE_NAME, INPUT, OUTPUT, chips_to_blob
from engines.dlib.resnet import DlibResNet
from engines.errors import EngineError

log = logging.getLogger(__name__)

CACHE_FORMAT = 1  # raised when the exported graph changes: the cached files are made afresh
THREADS = 1  # ONNX Runtime's intra-op threads (see the module doc)


class OnnxDlibEmbedding(DlibResNet):
    """dlib's embedding network run by `runtime` (on dlib_embedder.onnx); `embed(chip)` and
    `embed_many(chips)` as DlibResNet's. The runtime is given, never built here."""

    def __init__(self, runtime: InferenceRuntime) -> None:
        # Not DlibResNet's: the weights are in the file the runtime runs, not read here.
        self.runtime = runtime
        self._warmed = False
        self._warm_lock = threading.Lock()

    def open(self) -> None:
        """Load the file into the runtime (a one-line EngineError when it cannot)."""
        self.runtime.open_expecting(f"dlib's face embedding network ({FILE_NAME})")

    def _forward(self, chips: np.ndarray) -> np.ndarray:
        # The runtime's runs keep nothing between calls (ONNX Runtime's session.run may be
        # called from several threads at once), as the port's.
        out = self.runtime.run({INPUT: chips_to_blob(chips)}, [OUTPUT])[OUTPUT]
        return np.asarray(out, np.float32)


def cache_dir() -> Path:
    """`$XDG_CACHE_HOME/facestream/dlib` (by default `~/.cache/facestream/dlib`), beside the
    shape predictor's cache (engines.dlib.shape)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "facestream" / "dlib"


def cached_onnx(source: str | os.PathLike[str]) -> Path:
    """The ONNX file of dlib's network in `source` (its .dat), exported into the cache once
    and named by the source's size and modification time (a reinstalled package makes a new
    one); an OSError when the cache cannot be written."""
    src = Path(source)
    st = src.stat()
    target = cache_dir() / f"{Path(FILE_NAME).stem}.{st.st_size}.{st.st_mtime_ns}.v{CACHE_FORMAT}.onnx"
    if not target.is_file():
        from engines.dlib.onnx_export import export_embedder  # onnx itself is imported only here

        export_embedder(target, src)
    return target


def checked_int8() -> Path | None:
    """`dlib_embedder_int8.onnx` where `facestream models quantize dlib_embedder` wrote one
    that passed the embedder budget against the export beside it (the models folders:
    $FACESTREAM_MODELS, the per-user one), on a CPU with INT8 instructions; None otherwise."""
    from engines.catalog import search_dirs
    from engines.cpu_features import cpu_features
    from engines.int8 import fresh_report, int8_path

    if not cpu_features().int8_fast:
        return None
    for folder in search_dirs(None):
        float_file = folder / FILE_NAME
        report = fresh_report(int8_path(float_file), float_file)
        if report is not None and report.usable:
            return int8_path(float_file)
    return None


def load_embedding(source: str | os.PathLike[str]) -> DlibResNet:
    """The process's embedding network for dlib's file `source`: run by ONNX Runtime (one
    thread, CPU) from the cached ONNX export where onnx and onnxruntime are installed and the
    file can be made and loaded (its INT8 twin where one passed its budget: `checked_int8`),
    else the numpy port (DlibResNet) reading `source` itself."""
    try:
        import onnxruntime  # noqa: F401  (a machine without it runs the numpy port)

        from engines.backends.registry import runtime_factory

        int8 = checked_int8()
        path = int8 or cached_onnx(source)
        if int8 is not None:
            log.info("dlib's embedding runs on %s (within the embedder's drift budget)", int8)
        model = OnnxDlibEmbedding(runtime_factory(RuntimeOptions(providers="cpu", intra_threads=THREADS))(path))
        model.open()
        return model
    except (ImportError, OSError, EngineError) as exc:
        log.info("dlib's embedding runs on the numpy port: %s", exc)
        return DlibResNet(str(source))
