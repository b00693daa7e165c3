"""Closing media on a path that is already failing or giving up."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger(__name__)


def close_quietly(part: Any) -> None:
    """Close a PyAV container, a source or a sink on a path that is already failing or
    giving up (a failed open, a lost connection): an error from the close itself would
    only hide the first one, so it is logged at debug level and dropped."""
    try:
        part.close()
    except Exception as exc:  # noqa: BLE001 - the first error is the one reported
        log.debug("closing %r: %s", part, exc)


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel a reader task that is being stopped and wait until it has ended; whatever it
    ends with is dropped (it is being stopped anyway)."""
    # Imported here: only the live sources await, and a file's swap need not load asyncio
    # (with ssl, 6.6 MB of a one-face run's peak).
    import asyncio

    if task is None or task.done():
        return
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):  # noqa: BLE001 - ending anyway
        pass
