"""2dfan4: 68 landmarks from a face box (the neural family's landmarker).

Contract (models.md): input `input` [1,3,256,256], RGB x/255, the face crop scaled so the
box's longer side is 195 px and centred; outputs [1,68,3] landmarks on a 64 grid (x, y
times 4 are crop pixels) and [1,68,64,64] heatmaps, whose per-point maxima, averaged, are
a usable confidence.
"""
from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt

from engines.backends.base import InferenceRuntime
from engines.errors import EngineError
from engines.face import Box, ImageBGR, Landmarks68
from engines.frame_views import FrameViews

CROP = 256
BOX_SIDE = 195.0
GRID_TO_CROP = 4.0


class FanLandmarker:
    """68 landmarks and a confidence per face box, through ONNX Runtime."""

    name = "2dfan4"

    def __init__(self, runtime: InferenceRuntime) -> None:
        self.runtime = runtime
        self.calls = 0
        self.last_scores: list[float] = []  # confidence of each face of the last call
        self._input = "input"
        self._blob: npt.NDArray[np.float32] | None = None  # reused input buffer, the runtime's

    def open(self) -> None:
        self.runtime.open()
        ins, outs = self.runtime.inputs, self.runtime.outputs
        shapes_ok = (len(ins) == 1 and len(ins[0].shape) == 4 and ins[0].shape[1] in (3, None)
                     and len(outs) >= 2 and len(outs[0].shape) == 3 and len(outs[1].shape) == 4)
        if not shapes_ok:
            found = ", ".join(f"{t.name}{list(t.shape)}" for t in ins + outs)
            raise EngineError(f"model file {str(self.runtime.path)!r} is not a 2dfan4 landmarker: expected "
                              f"input [1,3,256,256] and outputs [1,68,3], [1,68,64,64]; found {found}")
        self._input = ins[0].name
        self._blob = None  # taken from the runtime again, under the input's own name

    def prepare_crop(self, image: ImageBGR, box: Box) -> npt.NDArray[np.float64]:
        """Fill the input blob with the face crop; returns the 2x3 frame->crop affine."""
        x0, y0, x1, y1 = box
        scale = BOX_SIDE / max(x1 - x0, y1 - y0, 1.0)
        cx, cy = (x0 + x1) / 2.0, (y0 + y1) / 2.0
        m = np.array([[scale, 0.0, CROP / 2.0 - scale * cx],
                      [0.0, scale, CROP / 2.0 - scale * cy]])
        crop = cv2.warpAffine(image, m, (CROP, CROP), flags=cv2.INTER_LINEAR,
                              borderMode=cv2.BORDER_CONSTANT, borderValue=(0, 0, 0))
        rgb = crop[:, :, ::-1].transpose(2, 0, 1)
        np.multiply(rgb, 1.0 / 255.0, out=self.input_blob()[0], casting="unsafe")
        return m

    def input_blob(self) -> npt.NDArray[np.float32]:
        """The reused input buffer, from the runtime's allocator (page-locked memory when
        the pipeline runs on CUDA)."""
        if self._blob is None:
            self._blob = self.runtime.host_buffer(self._input, (1, 3, CROP, CROP), np.float32)
        return self._blob

    def decode_landmarks(self, points: np.ndarray, m: npt.NDArray[np.float64]) -> Landmarks68:
        """Grid points -> crop pixels -> frame pixels (inverse of the crop affine)."""
        crop_xy = points[:, :2].astype(np.float64) * GRID_TO_CROP
        inv = cv2.invertAffineTransform(m)
        return (crop_xy @ inv[:, :2].T + inv[:, 2]).astype(np.float32)

    def forward(self, frame: FrameViews | ImageBGR, box: Box) -> Landmarks68:
        image = frame.bgr if isinstance(frame, FrameViews) else frame
        m = self.prepare_crop(image, box)
        out = self.runtime.run({self._input: self.input_blob()})
        points, heatmaps = (out[o.name] for o in self.runtime.outputs[:2])
        self.calls += 1
        self.last_scores = [float(heatmaps[0].reshape(heatmaps.shape[1], -1).max(axis=1).mean())]
        return self.decode_landmarks(points[0], m)

    def forward_many(self, frame: FrameViews | ImageBGR, boxes: list[Box]) -> list[Landmarks68]:
        found, scores = [], []
        for box in boxes:
            found.append(self.forward(frame, box))
            scores.extend(self.last_scores)
        self.last_scores = scores
        return found

    def close(self) -> None:
        self.runtime.close()
        self._blob = None
