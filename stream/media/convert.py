"""Frame conversion, both ways, defined once: decoded frames into BGR slot pictures
(`convert_into`), and BGR pictures into reused yuv420p frames for the encoders
(`YuvFramer`). Neither allocates a frame-sized array per frame on its fast path."""
from __future__ import annotations

import av
import cv2
import numpy as np

# Colour spaces cv2's I420 conversion matches (BT.601, limited range); PyAV treats
# "unspecified" as BT.601 as well. Anything else (BT.709, full range) goes through swscale
# so the colours stay the ones PyAV's own to_ndarray gives.
_BT601 = {2, 5, 6}  # AVCOL_SPC_UNSPECIFIED, BT470BG, SMPTE170M
_FULL_RANGE = 2  # AVCOL_RANGE_JPEG


def copy_yuv420p_planes(frame: av.VideoFrame, i420: np.ndarray) -> None:
    """Copy a yuv420p frame's planes into one packed (H*3/2, W) I420 buffer.

    Decoded planes carry line padding (`line_size` >= width), so each plane is viewed
    as (rows, line_size) and its visible columns copied; the views allocate nothing.
    """
    height, width = frame.height, frame.width
    flat = i420.reshape(-1)
    offset = 0
    for plane, (w, h) in zip(frame.planes, ((width, height), (width // 2, height // 2),
                                             (width // 2, height // 2))):
        src = np.frombuffer(plane, np.uint8)[: plane.line_size * h].reshape(h, plane.line_size)
        np.copyto(flat[offset:offset + w * h].reshape(h, w), src[:, :w])
        offset += w * h


def convert_into(frame: av.VideoFrame, image: np.ndarray, i420: np.ndarray | None) -> bool:
    """Decoded frame -> BGR into `image`, without a frame-sized allocation when we can.

    BT.601 limited-range yuv420p of the picture's size goes through `i420` (a reused
    (H*3/2, W) buffer) and cv2; anything else (10-bit, 4:2:2, BT.709, another size)
    through swscale, scaled to the picture's size. True when the fast path was taken.
    """
    h, w = image.shape[:2]
    if (
        i420 is not None
        and i420.shape == (h * 3 // 2, w)
        and frame.format.name == "yuv420p"
        and frame.width == w
        and frame.height == h
        and frame.colorspace in _BT601
        and frame.color_range != _FULL_RANGE
    ):
        copy_yuv420p_planes(frame, i420)
        cv2.cvtColor(i420, cv2.COLOR_YUV2BGR_I420, dst=image)
        return True
    np.copyto(image, frame.to_ndarray(format="bgr24", width=w, height=h))
    return False


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
