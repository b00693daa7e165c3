"""How long a live connection waits before its next attempt: 0.5 s, doubling to 4 s; and how
often a server that is down is asked whether it is back: 0.1 s, doubling to 0.5 s."""
from __future__ import annotations

BACKOFF_S = (0.5, 1.0, 2.0, 4.0)
# A reconnecting RTSP input asks the server (a refused TCP connect costs nothing) this often,
# and reconnects at once when it answers: back within about half a second of the server.
PROBE_S = (0.1, 0.2, 0.4, 0.5)


def backoff_delay(attempt: int, steps: tuple[float, ...] = BACKOFF_S) -> float:
    """Seconds to wait before attempt number `attempt` + 1 (0-based); the last step repeats."""
    return steps[min(max(attempt, 0), len(steps) - 1)]
