"""A face found in a photo (a source view or a reference): the picture, the face's points."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engines.face import ImageBGR, Keypoints5, Landmarks68


@dataclass(frozen=True)
class PhotoFace:
    """The face chosen in a photo (source or reference), and how many the photo had."""

    path: str
    image: ImageBGR
    landmarks: Landmarks68
    faces_found: int
    kps5: Keypoints5 | None = None  # the detector's own five points, where it finds them

    def points(self, which: str) -> npt.NDArray[np.float32]:
        """The points a swapper prepares this face from: the detector's five (`track.points:
        detector`, where the detector found them) or the 68 landmarks."""
        return self.kps5 if which == "detector" and self.kps5 is not None else self.landmarks
