"""BGR pictures into one reused yuv420p `av.VideoFrame`, converted by cv2 (no per-frame array)."""
from __future__ import annotations

import av
import cv2
import numpy as np


class YuvFramer:
    """Converts (H, W, 3) BGR uint8 pictures of one size into yuv420p VideoFrames.

    Even sizes go through cv2's I420 conversion into a buffer reused for every frame, then
    plane by plane into one reused VideoFrame; odd sizes fall back to swscale.
    """

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self._i420: np.ndarray | None = None
        self._frame: av.VideoFrame | None = None
        if width % 2 == 0 and height % 2 == 0:
            self._i420 = np.empty((height * 3 // 2, width), np.uint8)
            self._frame = av.VideoFrame(width, height, "yuv420p")

    def __call__(self, image: np.ndarray) -> av.VideoFrame:
        if self._frame is None or self._i420 is None:
            return av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="bgr24")
        return self.fill(image, self._frame)

    def new_frame(self) -> av.VideoFrame:
        """A yuv420p frame of this size, for callers that keep several in rotation."""
        return av.VideoFrame(self.width, self.height, "yuv420p")

    def fill(self, image: np.ndarray, frame: av.VideoFrame) -> av.VideoFrame:
        """Write `image` into `frame` (yuv420p of this size) and return it; odd sizes get a
        new bgr24 frame instead."""
        if self._i420 is None:
            return av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="bgr24")
        cv2.cvtColor(image, cv2.COLOR_BGR2YUV_I420, dst=self._i420)
        # The encoder may still hold a reference to last frame's buffers; make_writable
        # then gives this frame fresh ones instead of overwriting those.
        frame.make_writable()
        width, height = self.width, self.height
        flat = self._i420.reshape(-1)
        offset = 0
        for plane, (w, h) in zip(frame.planes, ((width, height), (width // 2, height // 2),
                                                 (width // 2, height // 2))):
            dst = np.frombuffer(plane, np.uint8)[: plane.line_size * h].reshape(h, plane.line_size)
            np.copyto(dst[:, :w], flat[offset:offset + w * h].reshape(h, w))
            offset += w * h
        return frame
