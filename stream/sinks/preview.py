"""A preview window as a live sink (OpenCV's highgui); closing it stops the run."""
from __future__ import annotations

import os

import cv2

from stream.errors import SinkError, StopRequested, reason_of
from stream.runtime.slot import Slot


class PreviewSink:
    """A window showing the output. `q` or Esc (or closing the window) stops the run."""

    TITLE = "facestream"

    def __init__(self) -> None:
        self.frames_written = 0
        self._open = False

    name = "preview window"

    def open(self) -> None:
        if os.name == "posix" and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            raise SinkError("preview: no display to open a window on (DISPLAY is not set); "
                            "use --output vcam or rtsp://..., or --record FILE")
        try:
            cv2.namedWindow(self.TITLE, cv2.WINDOW_NORMAL)
        except cv2.error as exc:
            raise SinkError(f"preview: cannot open a window ({reason_of(exc)})") from exc
        self._open = True

    def write(self, slot: Slot) -> None:
        cv2.imshow(self.TITLE, slot.image)
        key = cv2.waitKey(1) & 0xFF
        self.frames_written += 1
        closed = cv2.getWindowProperty(self.TITLE, cv2.WND_PROP_VISIBLE) < 1
        if key in (ord("q"), 27) or closed:
            raise StopRequested("preview closed")

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                cv2.destroyWindow(self.TITLE)
                cv2.waitKey(1)
            except cv2.error:
                pass
