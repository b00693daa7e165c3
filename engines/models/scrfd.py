"""SCRFD face detector (det_10g.onnx, det_2.5g.onnx): boxes, scores and 5 keypoints.

Pre- and post-processing follow insightface's `model_zoo/scrfd.py` (2.1) operation for
operation, so that on the same model file both give the same boxes in the same order:
the truncating resize arithmetic, cv2's default bilinear resize, the pad to the input
size, float32 decode, the stable score sort and insightface's greedy NMS with its
"+1 pixel" box areas. See models.md for the model contract.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TypeAlias

import cv2
import numpy as np
import numpy.typing as npt

from engines.backends.base import InferenceRuntime, TensorSpec
from engines.errors import EngineError
from engines.models.base import OnnxModel

log = logging.getLogger(__name__)

Detections: TypeAlias = npt.NDArray[np.float32]  # (N, 5): x0, y0, x1, y1, score in frame pixels
Keypoints5: TypeAlias = npt.NDArray[np.float32]  # (N, 5, 2): eyes, nose, mouth corners in frame pixels
Blob: TypeAlias = npt.NDArray[np.float32]  # (1, 3, H, W), RGB, (x - 127.5) / 128

STRIDES = (8, 16, 32)
NUM_ANCHORS = 2  # anchors per feature-map location
INPUT_NAMES = ("input.1", "input")
INPUT_MEAN = 127.5
INPUT_STD = 128.0
# Last axis of the 9 outputs, in insightface's order: scores, box distances, keypoints,
# each for strides 8, 16, 32.
OUTPUT_WIDTHS = (1, 1, 1, 4, 4, 4, 10, 10, 10)


class ScrfdDetector(OnnxModel):
    """SCRFD with keypoints: `forward` maps a BGR frame to detections and 5-point keypoints.

    `input_size` is (width, height) of the network input; both must be multiples of 32
    (the coarsest stride), as insightface's decode assumes. Call `open()` first: it
    loads the model, checks its I/O against the SCRFD contract and builds the anchor
    centres and input buffers, so `forward` allocates nothing frame-sized.
    """

    name = "scrfd"

    def __init__(self, runtime: InferenceRuntime, input_size: tuple[int, int] = (640, 640),
                 score_threshold: float = 0.5, nms_threshold: float = 0.4) -> None:
        width, height = (int(v) for v in input_size)
        if width <= 0 or height <= 0 or width % STRIDES[-1] or height % STRIDES[-1]:
            raise ValueError(f"SCRFD input_size must be positive multiples of {STRIDES[-1]}; got {input_size!r}")
        if not 0.0 <= score_threshold <= 1.0:
            raise ValueError(f"score_threshold must be within [0, 1]; got {score_threshold!r}")
        if not 0.0 <= nms_threshold <= 1.0:
            raise ValueError(f"nms_threshold must be within [0, 1]; got {nms_threshold!r}")
        self.path = runtime.path
        self.input_size = (width, height)
        self.score_threshold = float(score_threshold)
        self.nms_threshold = float(nms_threshold)
        super().__init__(runtime)
        self._input_name = ""
        self._output_names: list[str] = []
        self._batched = False  # outputs carry a leading batch axis ([1, rows, k])
        self._centres: dict[tuple[int, int, int], npt.NDArray[np.float32]] = {}
        self._canvas: npt.NDArray[np.uint8] | None = None  # padded BGR input, reused
        self._blob: Blob | None = None  # network input, reused

    # -- lifecycle -----------------------------------------------------------------

    def open(self) -> None:
        """Load the model and check it is SCRFD-shaped; EngineError (one line) if not."""
        if self._blob is not None:
            return
        self.runtime.open()
        try:
            self._check_io(self.runtime.inputs, self.runtime.outputs)
        except EngineError:
            self.runtime.close()
            raise
        self._input_name = self.runtime.inputs[0].name
        self._output_names = [o.name for o in self.runtime.outputs]
        self._batched = len(self.runtime.outputs[0].shape) == 3
        width, height = self.input_size
        for stride in STRIDES:
            self.anchor_centres(height // stride, width // stride, stride)
        self._canvas = np.zeros((height, width, 3), np.uint8)
        # From the runtime's allocator: page-locked memory when the pipeline runs on CUDA.
        self._blob = self.runtime.host_buffer(self._input_name, (1, 3, height, width), np.float32)
        log.debug("SCRFD %s: input %s %dx%d, %s outputs", self.runtime.path.name, self._input_name,
                  width, height, "batched" if self._batched else "unbatched")

    def close(self) -> None:
        self.runtime.close()
        self._blob = None
        self._canvas = None

    def _check_io(self, inputs: list[TensorSpec], outputs: list[TensorSpec]) -> None:
        where = f"SCRFD model {str(self.runtime.path)!r}"
        if len(inputs) != 1:
            raise EngineError(f"{where}: expected 1 input, found {len(inputs)} "
                              f"({', '.join(i.name for i in inputs)})")
        spec = inputs[0]
        if spec.name not in INPUT_NAMES:
            raise EngineError(f"{where}: expected an input named {' or '.join(map(repr, INPUT_NAMES))}, "
                              f"found {spec.name!r}")
        if len(spec.shape) != 4 or spec.shape[1] != 3:
            raise EngineError(f"{where}: expected input {spec.name!r} of shape [1, 3, H, W], "
                              f"found {_fmt_shape(spec.shape)}")
        if spec.dtype != "tensor(float)":
            raise EngineError(f"{where}: expected a float32 input, found {spec.dtype}")
        fixed_hw = spec.shape[2:]
        want_hw = (self.input_size[1], self.input_size[0])
        if all(isinstance(d, int) for d in fixed_hw) and tuple(fixed_hw) != want_hw:
            raise EngineError(f"{where}: the input is fixed at {fixed_hw[1]}x{fixed_hw[0]}, "
                              f"expected dynamic or {want_hw[1]}x{want_hw[0]} (input_size)")
        if len(outputs) != len(OUTPUT_WIDTHS):
            raise EngineError(f"{where}: expected {len(OUTPUT_WIDTHS)} outputs (scores, boxes, keypoints for "
                              f"strides 8/16/32), found {len(outputs)}")
        ranks = {len(o.shape) for o in outputs}
        if ranks not in ({2}, {3}):
            raise EngineError(f"{where}: expected outputs all of rank 2 or all of rank 3, found shapes "
                              f"{', '.join(_fmt_shape(o.shape) for o in outputs)}")
        found = tuple(o.shape[-1] for o in outputs)
        if any(f is not None and f != w for f, w in zip(found, OUTPUT_WIDTHS)):
            raise EngineError(f"{where}: expected output widths {list(OUTPUT_WIDTHS)} (scores, boxes, keypoints), "
                              f"found {['?' if f is None else f for f in found]}")

    # -- per frame -----------------------------------------------------------------

    def forward(self, image_bgr: npt.NDArray[np.uint8], max_num: int = 0,
                metric: str = "default") -> tuple[Detections, Keypoints5]:
        """Faces in a BGR frame: detections (N, 5) and keypoints (N, 5, 2), frame pixels.

        Sorted by descending score after thresholding and NMS. With `max_num` > 0 only
        that many are kept, chosen as insightface's `detect(max_num, metric)` does:
        by area (`metric="max"`) or by area minus twice the squared distance of the box
        centre from the frame centre (`"default"`); they are then in that order.
        """
        if self._blob is None:
            self.open()
        blob, scale = self.prepare_input(image_bgr)
        outputs = self.runtime.run({self._input_name: blob})
        dets, kps = self.decode_outputs([outputs[n] for n in self._output_names], scale)
        keep = nms(dets, self.nms_threshold)
        dets, kps = dets[keep], kps[keep]
        if max_num > 0 and dets.shape[0] > max_num:
            order = select_largest(dets, image_bgr.shape[:2], max_num, metric)
            dets, kps = dets[order], kps[order]
        return dets, kps

    def prepare_input(self, image_bgr: npt.NDArray[np.uint8]) -> tuple[Blob, float]:
        """The network input for a BGR frame and the frame-to-input scale.

        The returned blob is a buffer reused by the next call. The arithmetic is
        insightface's: the side that binds is set to the input size and the other is
        truncated (`int`), the scale is taken from the heights, cv2's default bilinear
        resize, zero padding right and bottom.
        """
        if image_bgr.ndim != 3 or image_bgr.shape[2] != 3 or image_bgr.dtype != np.uint8:
            raise ValueError(f"SCRFD expects an (H, W, 3) uint8 BGR image; got {image_bgr.shape} {image_bgr.dtype}")
        h, w = image_bgr.shape[:2]
        if h == 0 or w == 0:
            raise ValueError(f"SCRFD got an empty image of shape {image_bgr.shape}")
        if self._blob is None or self._canvas is None:
            self.open()
        assert self._blob is not None and self._canvas is not None
        in_w, in_h = self.input_size
        im_ratio = float(h) / w
        if im_ratio > float(in_h) / in_w:
            new_h = in_h
            new_w = int(new_h / im_ratio)
        else:
            new_w = in_w
            new_h = int(new_w * im_ratio)
        # insightface would crash on a zero side; one pixel keeps extreme strips working.
        new_w, new_h = max(1, new_w), max(1, new_h)
        scale = float(new_h) / h

        canvas = self._canvas
        canvas.fill(0)
        view = canvas[:new_h, :new_w]
        resized = cv2.resize(image_bgr, (new_w, new_h), dst=view)
        if not np.shares_memory(resized, view):  # cv2 made its own buffer
            view[...] = resized

        # BGR -> RGB planes, then (x - 127.5) / 128: exact in float32, as blobFromImage.
        blob = self._blob
        np.subtract(canvas[:, :, ::-1].transpose(2, 0, 1), np.float32(INPUT_MEAN), out=blob[0], dtype=np.float32)
        np.multiply(blob, np.float32(1.0 / INPUT_STD), out=blob)
        return blob, scale

    def decode_outputs(self, outputs: Sequence[np.ndarray], scale: float) -> tuple[Detections, Keypoints5]:
        """The 9 raw outputs (insightface order) to thresholded detections, frame pixels.

        Returns detections (N, 5) and keypoints (N, 5, 2) sorted by descending score
        (stable: ties keep stride then anchor order), before NMS. Only anchors over the
        score threshold are decoded; the arithmetic is insightface's, in float32.
        """
        if len(outputs) != len(OUTPUT_WIDTHS):
            raise EngineError(f"SCRFD decode expected {len(OUTPUT_WIDTHS)} outputs, got {len(outputs)}")
        in_w, in_h = self.input_size
        scores_list, boxes_list, kps_list = [], [], []
        for i, stride in enumerate(STRIDES):
            scores, dist, offs = outputs[i], outputs[i + 3], outputs[i + 6]
            if scores.ndim == 3:  # exports with a batch axis: [1, rows, k]
                scores, dist, offs = scores[0], dist[0], offs[0]
            centres = self.anchor_centres(in_h // stride, in_w // stride, stride)
            if scores.shape[0] != centres.shape[0]:
                raise EngineError(f"SCRFD stride {stride}: the model gave {scores.shape[0]} rows, expected "
                                  f"{centres.shape[0]} for a {in_w}x{in_h} input")
            pos = np.where(scores >= self.score_threshold)[0]
            c = centres[pos]
            d = dist[pos] * stride
            boxes = np.stack([c[:, 0] - d[:, 0], c[:, 1] - d[:, 1], c[:, 0] + d[:, 2], c[:, 1] + d[:, 3]], axis=-1)
            # Keypoint offsets are (x, y) pairs: broadcast the centre over the 5 points.
            kps = c[:, None, :] + (offs[pos] * stride).reshape(-1, 5, 2)
            scores_list.append(scores[pos])
            boxes_list.append(boxes)
            kps_list.append(kps)
        scores_all = np.vstack(scores_list)
        order = np.argsort(-scores_all.ravel(), kind="stable")
        dets = np.hstack((np.vstack(boxes_list) / scale, scores_all)).astype(np.float32, copy=False)
        kps_all = (np.vstack(kps_list) / scale).astype(np.float32, copy=False)
        return dets[order], kps_all[order]

    def anchor_centres(self, height: int, width: int, stride: int) -> npt.NDArray[np.float32]:
        """(height * width * 2, 2) anchor centres (x, y) in input pixels, rows (y, x, anchor); cached."""
        key = (height, width, stride)
        centres = self._centres.get(key)
        if centres is None:
            grid = np.stack(np.mgrid[:height, :width][::-1], axis=-1).astype(np.float32)
            centres = np.repeat((grid * stride).reshape(-1, 2), NUM_ANCHORS, axis=0)
            centres.setflags(write=False)
            self._centres[key] = centres
        return centres


def nms(dets: Detections, threshold: float) -> npt.NDArray[np.intp]:
    """Greedy NMS as insightface's `SCRFD.nms`: indices kept, highest score first.

    Areas use the legacy pixel-inclusive "+1" width and height, and a box is dropped
    when its IoU with a kept one is over `threshold` (kept at exactly `threshold`).
    """
    x1, y1, x2, y2, scores = dets[:, 0], dets[:, 1], dets[:, 2], dets[:, 3], dets[:, 4]
    areas = (x2 - x1 + 1) * (y2 - y1 + 1)
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    while order.size > 0:
        i = order[0]
        keep.append(int(i))
        rest = order[1:]
        w = np.maximum(0.0, np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]) + 1)
        h = np.maximum(0.0, np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]) + 1)
        inter = w * h
        ovr = inter / (areas[i] + areas[rest] - inter)
        order = rest[np.where(ovr <= threshold)[0]]
    return np.asarray(keep, dtype=np.intp)


def select_largest(dets: Detections, frame_hw: tuple[int, ...], max_num: int,
                   metric: str = "default") -> npt.NDArray[np.intp]:
    """Indices of the `max_num` best detections, by insightface's `detect` ranking."""
    if metric not in ("default", "max"):
        raise ValueError(f"unknown metric {metric!r}; known: default, max")
    area = (dets[:, 2] - dets[:, 0]) * (dets[:, 3] - dets[:, 1])
    if metric == "max":
        values = area
    else:
        cy, cx = frame_hw[0] // 2, frame_hw[1] // 2
        offsets = np.vstack([(dets[:, 0] + dets[:, 2]) / 2 - cx, (dets[:, 1] + dets[:, 3]) / 2 - cy])
        values = area - np.sum(np.power(offsets, 2.0), 0) * 2.0
    return np.argsort(values)[::-1][:max_num]


def _fmt_shape(shape: tuple[int | None, ...]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
