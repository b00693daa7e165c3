"""The exception tree of the inference engines."""
from __future__ import annotations


class EngineError(Exception):
    """Base of every error an engine raises on purpose; its text is one line for the user."""


class ModelNotFound(EngineError):
    """A model file (or a package that ships one) is missing."""


class NoFaceError(EngineError):
    """An image that must contain a face (the source photo) has none."""
