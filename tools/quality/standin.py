"""The neural engine's carry on the suite's clips, on the synthetic stand-in models (tools/synth:
inswapper_128's and ArcFace's I/O, seeded random weights): the PSNR of the face regions swapped
every N frames and carried between against the same run swapping every frame.

Each run is `facestream swap`'s pipeline (stream/job/assembly.py: tracker, selection, the
swap and composite stages, `CarriedSwapper` at N > 1), in this process, with the config's
`models.swap_every` set to N, and the neural swapper on the stand-in models in place of the
classical one. The stand-in's detector would find no faces (random weights), so the faces
are found and followed by the dlib engine's detector, landmarks and tracker, as the classical
suite's are. The runs are serial (repeatable: a file run's output does not depend on its
threads) and their frames stay in memory: no encoder's loss is in the figures.

The stand-in multiplies the target crop by a random per-pixel gain fixed in the crop's frame:
a grain far finer than a real swap's, which a carried crop must move sub-pixel true. Its PSNR
is a harsh reading of the carry's error; `identity=True` swaps each crop for itself (the
target's own face carried), which leaves only what the warp and the points do.
"""
from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np

from engines.backends.ort import OrtRuntime
from engines.models.adapters import InSwapperSwapper
from engines.models.arcface import ArcFaceEmbedder
from engines.models.inswapper import InSwapper
from engines.registry import build_engines
from stream.config import load_config
from stream.job.assembly import assemble
from stream.runtime.allocator import default_allocator
from stream.runtime.metrics import Metrics
from stream.runtime.slot import Slot
from stream.sources.file import FileSource
from tools.quality.cadence import CadenceRow, FacePsnr, face_mask
from tools.quality.clips import ClipFiles
from tools.quality.measure import MeasureError, Models
from tools.quality.truth import ClipTruth
from tools.synth.face_models import make_arcface, make_inswapper


class _IdentityInSwapper(InSwapper):
    """inswapper's pipeline with the model left out: each crop comes back as it went in."""

    def _run(self, tgt: np.ndarray, src: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        return tgt.copy()

    def forward_blob(self, blob: np.ndarray, latent: np.ndarray) -> np.ndarray:
        return blob.copy()


def standin_swapper(folder: Path, identity: bool = False) -> InSwapperSwapper:
    """The neural engine's swapper on stand-in models written into `folder` (the seeds
    tools/neural_seams.py uses), opened; `identity`: the model left out (see the module)."""
    make_arcface(folder / "w600k_r50.onnx", seed=1)
    make_inswapper(folder / "inswapper_128.onnx", seed=6, batch=None)
    kind = _IdentityInSwapper if identity else InSwapper
    swapper = InSwapperSwapper(kind(OrtRuntime(folder / "inswapper_128.onnx")),
                               ArcFaceEmbedder(OrtRuntime(folder / "w600k_r50.onnx")))
    swapper.open()
    return swapper


class FramesSink:
    """A run's frames as written, in memory, or each frame's face regions compared with a
    reference run's frames (`reference`, `truth`: then only the figures are kept). Serial
    runs only: a frame counts as carried when the run's count of carried faces rose while it
    went through the stages."""

    def __init__(self, metrics: Metrics, reference: list[np.ndarray] | None = None,
                 truth: ClipTruth | None = None) -> None:
        self.metrics = metrics
        self.reference = reference
        self.truth = truth
        self.frames: list[np.ndarray] = []
        self.figures = FacePsnr()
        self._carried = 0

    def write(self, slot: Slot) -> None:
        image = slot.image
        carried = self.metrics.faces_carried > self._carried
        self._carried = self.metrics.faces_carried
        if self.reference is None or self.truth is None:
            self.frames.append(image.copy())
            return
        i = self.figures.frames
        if i >= len(self.reference) or i >= len(self.truth.frames):
            raise MeasureError(f"frame {i}: past the every-frame run's {len(self.reference)} frames")
        self.figures.add(self.reference[i], image, face_mask(self.truth.frames[i], image.shape), carried)

    def close(self) -> None:
        pass


def run_clip(preset: str, overrides: tuple[str, ...], swapper: InSwapperSwapper, latent: object,
             clip: ClipFiles, every: int, sink: FramesSink) -> Metrics:
    """One serial run of `facestream swap --config preset --swap-every every` on `clip`, the
    stand-in swapping, into `sink`: its metrics."""
    config = load_config(None if preset == "default" else preset, [*overrides, f"models.swap_every={every}"])
    dlib = build_engines("dlib", detect=config.detect, swap=config.swap, models=config.models, mask=config.mask)
    for model in (dlib.detector, dlib.landmarker, dlib.embedder):
        model.open()
    engines = replace(dlib, name="neural", swapper=swapper)
    source = FileSource(clip.video)
    info = source.open()
    pipeline = assemble(config, engines, [latent], [], (info.height, info.width), source, sink, live=False,
                        allocator=default_allocator(prefer_pinned=False), metrics=sink.metrics)
    pipeline.runner.run(staged=False)
    return sink.metrics


def clip_rows(models: Models, swapper: InSwapperSwapper, clip: ClipFiles, cadences: tuple[int, ...],
              preset: str = "default", overrides: tuple[str, ...] = (), config: str = "default (stand-in)"
              ) -> list[CadenceRow]:
    """One clip run every frame and at each cadence N > 1 of `cadences`: a row for each N
    (its face regions' PSNR against every frame's, over all frames and over the frames with a
    carried face, and its worst frame)."""
    truth = ClipTruth.load(clip.truth)
    photo = cv2.imread(str(clip.source))
    if photo is None:
        raise MeasureError(f"{clip.source}: cannot read the source photo")
    boxes = models.detect(photo)
    if not boxes:
        raise MeasureError(f"{clip.source}: no face found in it")
    box = max(boxes, key=lambda b: (b[2] - b[0]) * (b[3] - b[1]))
    latent = swapper.prepare_source(photo, models.landmarks(photo, box))
    every_frame = FramesSink(Metrics())
    run_clip(preset, overrides, swapper, latent, clip, 1, every_frame)
    rows = []
    for n in (c for c in cadences if c > 1):
        sink = FramesSink(Metrics(), every_frame.frames, truth)
        m = run_clip(preset, overrides, swapper, latent, clip, n, sink)
        if sink.figures.frames != len(every_frame.frames):
            raise MeasureError(f"{clip.name}: {sink.figures.frames} frames at N={n}, "
                               f"{len(every_frame.frames)} every frame")
        f = sink.figures
        rows.append(CadenceRow(clip.name, config, n, f.psnr, f.worst, f.worst_frame, carried_psnr=f.carried_psnr,
                               swaps=m.swaps_made, carried=m.faces_carried))
    return rows


def run_standin(workdir: Path, models: Models, clips: list[ClipFiles], cadences: tuple[int, ...],
                presets: tuple[str, ...] = ("default",), overrides: tuple[str, ...] = (), identity: bool = False,
                on_row: Callable[[CadenceRow], None] | None = None) -> list[CadenceRow]:
    """`clip_rows` for each clip in each preset (its rows' config: `default (stand-in)`), the
    stand-in models written under `workdir`."""
    rows = []
    with tempfile.TemporaryDirectory(dir=workdir, prefix="standin-models-") as folder:
        swapper = standin_swapper(Path(folder), identity)
        for clip in clips:
            for preset in presets:
                label = f"{preset} ({'identity' if identity else 'stand-in'})"
                for row in clip_rows(models, swapper, clip, cadences, preset, overrides, label):
                    rows.append(row)
                    if on_row is not None:
                        on_row(row)
    return rows
