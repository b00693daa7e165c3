"""Closing media on a path that is already failing or giving up."""
from __future__ import annotations

import asyncio
import logging
from typing import Any

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
    if task is None or task.done():
        return
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):  # noqa: BLE001 - ending anyway
        pass
