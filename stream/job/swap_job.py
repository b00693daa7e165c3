"""A swap job: what outlives one input — the models, and the source (and reference) faces
prepared once. The runs themselves are in `stream.job.runs`."""
from __future__ import annotations

import logging
from dataclasses import replace

import cv2
import numpy as np

from engines.catalog import find
from engines.errors import NoFaceError
from engines.face import ImageBGR, Keypoints5
from engines.frame_views import FrameViews
from engines.protocols import Enhancer, PointDetector
from engines.quantize.choose import ChoosingFactory
from engines.registry import EngineSet, build_engines
from stream.config import Config
from stream.job.photo_face import PhotoFace
from stream.job.run_plan import plan_run
from stream.job.shared_models import exclusive, share_engines, shared
from stream.job.source_set import SourceSet, load_source_set
from stream.job.vram_plan import VramPlan
from stream.media.image_io import read_image
from stream.runtime.allocator import Allocator, default_allocator
from stream.runtime.cores import set_blas_threads

log = logging.getLogger(__name__)

__all__ = ["PhotoFace", "SwapJob"]


class SwapJob:
    """Everything a swap run needs that outlives one input: models, source faces.

    `open()` loads the models (their runtimes get the job's host allocator: pinned memory
    when CUDA is present) and prepares every source and reference face once. Each source is
    one person: a photo, a folder of photos or a video (stream.job.source_set); `sources`
    holds each one's first view, `source_sets` all of them."""

    def __init__(self, config: Config, sources: list[str], references: list[str] | None = None,
                 allocator: Allocator | None = None) -> None:
        if not sources:
            raise ValueError("at least one source photo is needed")
        self.config = config
        self.source_paths = list(sources)
        self.reference_paths = list(references or [])
        # page-locked memory is CUDA's: OpenVINO (CPU, Intel GPU, NPU) gains nothing from it
        self.allocator = allocator or default_allocator(prefer_pinned=config.runtime.kind != "openvino")
        self.engines: EngineSet | None = None
        self.sources: list[PhotoFace] = []
        self.source_sets: list[SourceSet] = []
        self.prepared: list[object] = []
        self.reference_embeddings: list[np.ndarray] = []
        self.enhancer: Enhancer | None = None
        self.notes: list[str] = []
        self.plan: VramPlan | None = None  # the VRAM plan of a GPU run, once open

    @property
    def models(self) -> EngineSet:
        """The loaded models; an error before `open()`."""
        if self.engines is None:
            raise RuntimeError("SwapJob.open() must be called before its models are used")
        return self.engines

    def open(self) -> None:
        """Load the models and prepare every source (and reference) face once."""
        cfg = self.config
        cv2.setNumThreads(cfg.pipeline.cv_threads or -1)  # -1: back to OpenCV's own choice
        set_blas_threads(cfg.pipeline.blas_threads)
        planned = plan_run(cfg)  # on a GPU: fits the run to the card, or ends it here in one line
        self.plan = planned.plan
        self.notes.extend(planned.notes)
        runtimes = ChoosingFactory(cfg.runtime, self.allocator, cfg.models.precision)
        self.engines = build_engines(cfg.engine, detect=cfg.detect, swap=cfg.swap, models=cfg.models, mask=cfg.mask,
                                     runtime=runtimes)
        self.notes.append(self.engines.note)
        if getattr(self.engines.swapper, "cuts_occluders", False) and "occlusion" in cfg.mask.types \
                and not cfg.track.occlusion:
            # A swapper that cuts the tracker's occluders (the classical one) has that finder as
            # its occlusion mask: asked for, it runs whatever the preset says (`fast`: off).
            self.config = cfg = replace(cfg, track=replace(cfg.track, occlusion=True))
        self.engines.open()
        if cfg.enhance.enabled:  # loaded only when asked for
            from engines.models.enhancers import enhancer_profile
            from engines.models.gfpgan import GfpganEnhancer

            model_file = find(cfg.enhance.model, cfg.models.dir)
            enhancer = GfpganEnhancer(runtimes(model_file), every=cfg.enhance.every,
                                      profile=enhancer_profile(cfg.enhance.model))
            enhancer.open()
            self.enhancer = enhancer
            self.notes.append(f"enhancer: {model_file.name}, every {cfg.enhance.every} frame(s) per face")
        self.notes.extend(runtimes.notes)  # Triton: which models run locally; the INT8 files chosen
        for path in self.source_paths:
            source = load_source_set(path, self.find_face, self.engines.embedder, self.notes)
            self.source_sets.append(source)
            self.sources.append(source.face)
            self.prepared.append(self.prepare_set(source.views))
        for photo in self.reference_paths:
            face = self.find_face(photo, "reference photo")
            self.reference_embeddings.append(self.engines.embedder.forward(face.image, face.landmarks))

    def find_face(self, path: str, what: str, image: ImageBGR | None = None) -> PhotoFace:
        """The largest face of a photo (read from `path` unless `image` is given);
        NoFaceError when there is none."""
        models = self.models
        image = read_image(path) if image is None else image
        frame = FrameViews(image)
        points: list[Keypoints5 | None]
        if isinstance(models.detector, PointDetector):
            found = models.detector.forward_points(frame)
            dets, points = [(box, score) for box, score, _ in found], [k for _, _, k in found]
        else:
            dets = models.detector.forward(frame)
            points = [None] * len(dets)
        if not dets:  # photos are often small: the engine's photo detector looks harder
            dets = models.photo_detector.forward(frame)
            points = [None] * len(dets)
        if not dets:
            raise NoFaceError(f"{what} {path!r}: no face found")
        i = max(range(len(dets)), key=lambda j: (dets[j][0][2] - dets[j][0][0]) * (dets[j][0][3] - dets[j][0][1]))
        if len(dets) > 1:
            self.notes.append(f"{what} {path!r} has {len(dets)} faces; using the largest")
        landmarks = models.landmarker.forward(frame, dets[i][0])
        return PhotoFace(path, image, landmarks, len(dets), points[i])

    def share(self) -> None:
        """Let several pipelines run on this job's models at once (a server's peers): each
        model method then runs under its own lock, so one call of a kind at a time while
        different stages still overlap. Call after open()."""
        self.engines = share_engines(self.models)
        if self.enhancer is not None:
            self.enhancer = shared(self.enhancer)

    def prepare(self, face: PhotoFace) -> object:
        """The swapper's per-source preparation of `face` (safe beside running pipelines)."""
        models = self.models
        with exclusive(models.embedder, "forward"):  # the swapper may use the embedder inside
            return models.swapper.prepare_source(face.image, face.points(self.config.track.points))

    def prepare_set(self, views: tuple[PhotoFace, ...] | list[PhotoFace]) -> object:
        """The swapper's preparation of one source person: of its one photo exactly as
        `prepare`; of several views, `prepare_views` (the neural swappers: the mean identity;
        the classical one: each target face warped from its nearest view)."""
        if len(views) == 1:
            return self.prepare(views[0])
        models = self.models
        which = self.config.track.points
        with exclusive(models.embedder, "forward"):
            return models.swapper.prepare_views([(v.image, v.points(which)) for v in views])

    def model_calls(self) -> dict[str, int]:
        """Calls of each model so far (the models live as long as the job)."""
        calls = self.models.calls()
        if self.enhancer is not None:
            calls["enhance"] = self.enhancer.calls
        return calls
