"""An optional runtime capability: outputs written into host arrays the caller owns.

The swap stage keeps a preallocated output buffer per ring slot (pinned memory on CUDA),
so a runtime that can land its device->host copy there saves an allocation and a copy per
frame. A runtime without the capability is run with `run` and its own arrays are used.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class BindsOutputs(Protocol):
    def run_into(self, feeds: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Named inputs in; each named output written into the given array (its shape is the
        output's shape for these inputs), or, where the runtime cannot write into it this time,
        returned in an array of its own. Returns the output arrays by name."""
        ...
