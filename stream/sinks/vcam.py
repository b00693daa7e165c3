"""A virtual camera as a live sink (pyvirtualcam: v4l2loopback on Linux, OBS's camera on
Windows and macOS), fed I420 so the driver passes frames through."""
from __future__ import annotations

import logging
from typing import Any

import cv2
import numpy as np

from stream.errors import SinkError, reason_of
from stream.runtime.slot import Slot

log = logging.getLogger(__name__)

VCAM_HINT = ("load one with: sudo modprobe v4l2loopback exclusive_caps=1 card_label=facestream "
             "(package v4l2loopback-dkms)")


class VirtualCameraSink:
    """Frames to a virtual camera (v4l2loopback on Linux, OBS's on Windows/macOS).

    Frames go out as I420, the format v4l2loopback hands to applications, converted by cv2
    into one reused buffer, so the driver passes them through; a backend that refuses I420
    gets BGR. `backend`/`device` choose a particular one (pyvirtualcam's names).
    """

    def __init__(self, width: int, height: int, fps: float, device: str | None = None,
                 backend: str | None = None) -> None:
        self.width, self.height, self.fps = width, height, fps
        self.device, self.backend = device, backend
        self.frames_written = 0
        self._cam: Any = None
        self._i420: np.ndarray | None = None

    def open(self) -> None:
        try:
            import pyvirtualcam
        except ImportError as exc:
            raise SinkError("virtual camera: pyvirtualcam is not installed (pip install pyvirtualcam)") from exc
        errors = []
        for fmt in (pyvirtualcam.PixelFormat.I420, pyvirtualcam.PixelFormat.BGR):
            try:
                self._cam = pyvirtualcam.Camera(self.width, self.height, self.fps, fmt=fmt,
                                                device=self.device, backend=self.backend,
                                                print_fps=False)
                break
            except (RuntimeError, ValueError) as exc:
                errors.append(reason_of(exc))
        if self._cam is None:
            reason = errors[0] if errors else "unknown"
            if "loopback device found" in reason.lower():
                raise SinkError(f"virtual camera: no v4l2loopback device found; {VCAM_HINT}")
            if "no backend" in reason.lower() or "device" in reason.lower():
                raise SinkError(f"virtual camera: none available ({reason}); {VCAM_HINT}")
            raise SinkError(f"virtual camera: cannot be opened ({reason})")
        if self._cam.fmt == pyvirtualcam.PixelFormat.I420:
            self._i420 = np.empty((self.height * 3 // 2, self.width), np.uint8)
        log.info("virtual camera: %s (%s)", self._cam.device, self._cam.fmt.name)

    @property
    def name(self) -> str:
        return f"virtual camera {self._cam.device if self._cam is not None else ''}".strip()

    def write(self, slot: Slot) -> None:
        if self._cam is None:
            raise SinkError("virtual camera: write before open()")
        if self._i420 is not None:
            cv2.cvtColor(slot.image, cv2.COLOR_BGR2YUV_I420, dst=self._i420)
            self._cam.send(self._i420)
        else:
            self._cam.send(slot.image)
        self.frames_written += 1

    def close(self) -> None:
        cam, self._cam = self._cam, None
        if cam is not None:
            cam.close()
