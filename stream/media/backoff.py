"""How long a live connection waits before its next attempt: 0.5 s, doubling to 4 s."""
from __future__ import annotations

BACKOFF_S = (0.5, 1.0, 2.0, 4.0)


def backoff_delay(attempt: int, steps: tuple[float, ...] = BACKOFF_S) -> float:
    """Seconds to wait before attempt number `attempt` + 1 (0-based); the last step repeats."""
    return steps[min(max(attempt, 0), len(steps) - 1)]
