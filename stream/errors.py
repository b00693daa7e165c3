"""The exception tree of the pipeline runtime."""
from __future__ import annotations


class StreamError(Exception):
    """Base of every error the pipeline raises on purpose; its text is one line for the user."""


class SourceError(StreamError):
    """An input (video, image, source photo) is missing, unreadable or corrupt."""


class SinkError(StreamError):
    """An output cannot be opened or written."""


class ConfigError(StreamError):
    """A configuration file or override is invalid."""


class EndOfStream(StreamError):
    """A ring was closed by its producer and every published slot has been read."""


class PipelineAborted(StreamError):
    """A ring was aborted because some stage failed or the user interrupted the run."""
