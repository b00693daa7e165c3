"""Faces across frames: tracklets, background detection, selection, smoothing."""
