"""The tests' RTSP relay (GStreamer's RTSP server, tests/fixtures/rtsp_relay.py, run by the
system Python; `make test-deps` installs it), started by the tools that need a real server."""
from __future__ import annotations

import socket
import subprocess
from pathlib import Path

RELAY = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "rtsp_relay.py"


def start_relay(*names: str, audio: bool = False) -> tuple[subprocess.Popen[str], int]:
    """The relay on a free loopback port, serving `names` (each published to NAME/push and
    read at NAME), once it says it is ready: (the process, its port). SystemExit, one line,
    when it cannot start."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = ["/usr/bin/python3", str(RELAY), "--port", str(port), *(["--audio"] if audio else []), *names]
    try:
        relay = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as exc:
        raise SystemExit(f"cannot start the RTSP relay ({exc}): install it with `make test-deps`") from None
    ready = relay.stdout.readline().strip() if relay.stdout else ""
    if ready != "ready":
        relay.kill()
        raise SystemExit(f"the RTSP relay did not start ({ready!r}): install GStreamer's RTSP server "
                         "(make test-deps)")
    return relay, port
