"""ArcFace identity embedding (w600k_r50.onnx and compatible exports): 512-d, cosine metric.

Pre- and post-processing follow insightface's `ArcFaceONNX` exactly: a 112 crop aligned
to arcface_112_v2 by a similarity fit on five points, RGB, (x - 127.5) / 127.5 (or raw
0..255 for an MXNet export whose graph normalises its own input, detected as insightface
does). The raw output is returned; compare embeddings only after L2 normalisation.
"""
from __future__ import annotations

import logging
import os
from typing import TypeAlias

import cv2
import numpy as np
import numpy.typing as npt

from engines.backends.base import InferenceRuntime, TensorSpec
from engines.errors import EngineError
from engines.face import ImageBGR
from engines.geometry.face_align import as_kps5, estimate_norm, warp_crop
from engines.models.base import OnnxModel

log = logging.getLogger(__name__)

Embedding: TypeAlias = npt.NDArray[np.float32]  # (512,)
Blob: TypeAlias = npt.NDArray[np.float32]  # (N, 3, 112, 112)

INPUT_SIZE = 112
EMBEDDING_DIM = 512
TEMPLATE = "arcface_112_v2"
# Euclidean distance between L2-normalised embeddings that still means "same person":
# 1.2 is a cosine similarity of 0.28, insightface's usual verification threshold.
SAME_PERSON = 1.2


def _is_float(spec: TensorSpec) -> bool:
    return spec.dtype in ("tensor(float)", "tensor(float16)")


def graph_normalizes_input(path: str | os.PathLike[str]) -> bool:
    """Whether the model subtracts and scales its input itself (an MXNet-converted ArcFace).

    insightface's rule, kept as is: a node named Sub*/_minus* and one named Mul*/_mul*
    among the graph's first 8 nodes. Such models take raw 0..255 RGB.
    """
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    names = [node.name for node in model.graph.node[:8]]
    has_sub = any(n.startswith("Sub") or n.startswith("_minus") for n in names)
    has_mul = any(n.startswith("Mul") or n.startswith("_mul") for n in names)
    return has_sub and has_mul


class ArcFaceEmbedder(OnnxModel):
    """ArcFace behind the embedder protocol: image + five keypoints in, raw 512-d embedding out."""

    name = "arcface"
    threshold = SAME_PERSON

    def __init__(self, runtime: InferenceRuntime) -> None:
        self.path = runtime.path
        super().__init__(runtime)
        self.input_name = ""
        self.output_name = ""
        self.input_mean = 127.5
        self.input_std = 127.5
        self.batch: int | None = None  # the model's fixed batch size, None when dynamic
        self._dtype: type[np.floating] = np.float32

    def open(self) -> None:
        """Load the model and check its I/O: one input [N,3,112,112], one output [N,512]."""
        if not self.open_runtime("an ArcFace embedder ONNX file"):
            return
        ins, outs = self.runtime.inputs, self.runtime.outputs
        expected = f"one float input [N,3,{INPUT_SIZE},{INPUT_SIZE}] and one output [N,{EMBEDDING_DIM}]"
        found = (f"inputs {[(i.name, list(i.shape)) for i in ins]}, "
                 f"outputs {[(o.name, list(o.shape)) for o in outs]}")
        ok = (len(ins) == 1 and len(outs) == 1 and _is_float(ins[0])
              and len(ins[0].shape) == 4 and tuple(ins[0].shape[1:]) == (3, INPUT_SIZE, INPUT_SIZE)
              and len(outs[0].shape) == 2 and outs[0].shape[1] == EMBEDDING_DIM)
        if not ok:
            self.runtime.close()
            raise EngineError(f"model file {str(self.path)!r} is not an ArcFace embedder: "
                              f"expected {expected}, found {found}")
        self.input_name, self.output_name = ins[0].name, outs[0].name
        self.batch = ins[0].shape[0]
        self._dtype = np.float16 if ins[0].dtype == "tensor(float16)" else np.float32
        if graph_normalizes_input(self.path):
            self.input_mean, self.input_std = 0.0, 1.0
        log.info("%s: ArcFace input %s, mean %s, std %s", self.path.name, ins[0].name,
                 self.input_mean, self.input_std)

    def prepare_crops(self, image_bgr: ImageBGR, kps5_list: list[npt.NDArray[np.floating]]) -> list[ImageBGR]:
        """The 112x112 BGR crops aligned to arcface_112_v2, one per keypoint set."""
        return [warp_crop(image_bgr, estimate_norm(as_kps5(k), INPUT_SIZE, TEMPLATE), INPUT_SIZE)
                for k in kps5_list]

    def prepare_blob(self, crops: list[ImageBGR]) -> Blob:
        """Aligned BGR crops to the model's NCHW RGB blob, (x - mean) / std."""
        # cv2.dnn's blob maths (float32 subtract, then scale) is what insightface uses, so the
        # blob is bit-identical to its one.
        blob = cv2.dnn.blobFromImages(crops, 1.0 / self.input_std, (INPUT_SIZE, INPUT_SIZE),
                                      (self.input_mean, self.input_mean, self.input_mean), swapRB=True)
        return np.ascontiguousarray(blob, dtype=self._dtype)

    def prepare_input(self, image_bgr: ImageBGR, kps5_list: list[npt.NDArray[np.floating]]) -> Blob:
        """The model input for these faces of one image: aligned crops, RGB, normalised."""
        return self.prepare_blob(self.prepare_crops(image_bgr, kps5_list))

    def forward_blob(self, blob: Blob) -> npt.NDArray[np.float32]:
        """Run the model on a prepared blob: (N, 512) raw embeddings (loops if batch-1)."""
        if not self.runtime.is_open:
            self.open()
        if self.batch is None or self.batch == blob.shape[0]:
            out = self.runtime.run({self.input_name: blob}, [self.output_name])[self.output_name]
        else:  # a fixed-batch export (normally 1): one run per face
            out = np.concatenate([
                self.runtime.run({self.input_name: blob[i:i + self.batch]}, [self.output_name])[self.output_name]
                for i in range(0, blob.shape[0], self.batch)])
        return np.asarray(out, dtype=np.float32)

    def forward_many(self, image_bgr: ImageBGR,
                     kps5_list: list[npt.NDArray[np.floating]]) -> npt.NDArray[np.float32]:
        """Raw embeddings (N, 512) of several faces of one image, in one batched call."""
        if not kps5_list:
            return np.zeros((0, EMBEDDING_DIM), np.float32)
        return self.forward_blob(self.prepare_input(image_bgr, kps5_list))

    def forward(self, image_bgr: ImageBGR, kps5: npt.NDArray[np.floating]) -> Embedding:
        """The raw (not normalised) 512-d embedding of one face, as insightface's `get`.

        `kps5` is the five alignment points (5, 2); dlib's 68 landmarks (68, 2) are also
        accepted and reduced to five.
        """
        return self.forward_many(image_bgr, [kps5])[0]

    @staticmethod
    def normalize_embedding(embedding: npt.NDArray[np.floating]) -> Embedding:
        """L2-normalised copy (float32), as insightface's `Face.normed_embedding`."""
        emb = np.asarray(embedding, dtype=np.float32).ravel()
        return emb / np.linalg.norm(emb)

    def similarity(self, a: npt.NDArray[np.floating], b: npt.NDArray[np.floating]) -> float:
        """Cosine similarity (-1..1)."""
        return float(np.dot(self.normalize_embedding(a), self.normalize_embedding(b)))

    def distance(self, a: npt.NDArray[np.floating], b: npt.NDArray[np.floating]) -> float:
        """Euclidean distance of the L2-normalised embeddings (0..2); below `threshold`: same person."""
        return float(np.linalg.norm(self.normalize_embedding(a) - self.normalize_embedding(b)))
