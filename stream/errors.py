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


class StopRequested(StreamError):
    """A stage (e.g. a preview window being closed) or the user asks the whole run to stop
    now. Not an error: the run ends as if its input had."""


def reason_of(exc: BaseException) -> str:
    """The short reason of an OS or FFmpeg error, for a one-line message.

    Their str() repeats the path, which our messages already quote; `strerror` is the
    reason alone. Otherwise the first line of the text.
    """
    reason = getattr(exc, "strerror", None)
    if isinstance(reason, str) and reason:
        return reason
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
