"""`facestream live` as a service: its readiness (ready while its pipeline runs), its
metrics (labelled --name), and, when asked for, the ports that serve them (--health-port:
/healthz and /readyz; --metrics-port: /metrics; both on --ops-host), bound before the
models load and closed, their thread joined, when the run is over."""
from __future__ import annotations

import argparse
import socket
from typing import TYPE_CHECKING, Any

from stream.ops.drain import check_drain_seconds
from stream.ops.metrics import StreamMetrics, check_name, registry_of
from stream.ops.models import time_models

if TYPE_CHECKING:
    from stream.ops.health import OpsServer

STREAM_KEY = "live"


class LiveReadiness:
    """A live run's readiness: ready once its pipeline runs, until it stops (a signal, the
    input's end, --duration) or the run is over."""

    def __init__(self) -> None:
        self.pipeline: Any = None
        self.over = False

    def watch(self, pipeline: Any) -> None:
        self.pipeline = pipeline

    def not_ready(self) -> str | None:
        pipeline = self.pipeline
        if self.over:
            return "the run is over"
        if pipeline is None:
            return "starting (the pipeline is not running yet)"
        if pipeline.runner.stopped:
            return f"stopping ({pipeline.runner.stopped})"
        return None

    def running(self) -> int:
        return int(self.pipeline is not None and not self.over)


def check_ports(health: int | None, scrape: int | None) -> None:
    """--health-port and --metrics-port: port numbers (0: any free one), not the same one."""
    for flag, port in (("--health-port", health), ("--metrics-port", scrape)):
        if port is not None and not 0 <= port <= 65535:
            raise ValueError(f"{flag} {port}: not a port number (0-65535)")
    if health is not None and health == scrape and health != 0:
        raise ValueError(f"--health-port and --metrics-port are both {health}: give each its own port")


class LiveOps:
    """The run's readiness and metrics, and the server of its ports (None: no port asked for)."""

    def __init__(self, name: str, server: OpsServer | None = None) -> None:
        self.metrics = metrics = StreamMetrics(name)
        self.readiness = readiness = LiveReadiness()
        self.registry = registry_of(metrics)
        self._outputs: list[Any] = []  # WHEP outputs, whose viewers count
        metrics.not_ready = readiness.not_ready
        metrics.sessions = readiness.running
        metrics.viewers = lambda: sum(len(out.viewers) for out in self._outputs)
        self.server = server

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> LiveOps:
        """Checked flags (a one-line ValueError or StreamError), the ports bound and served."""
        name = check_name(args.name)
        check_drain_seconds(args.drain_seconds)
        check_ports(args.health_port, args.metrics_port)
        ops = cls(name)
        if args.health_port is None and args.metrics_port is None:
            return ops
        from stream.ops.health import OpsServer, bind_port  # aiohttp: only where a port is served

        health: socket.socket | None = None
        scrape: socket.socket | None = None
        try:
            if args.health_port is not None:
                health = bind_port(args.ops_host, args.health_port, "--health-port")
            if args.metrics_port is not None:
                scrape = bind_port(args.ops_host, args.metrics_port, "--metrics-port")
        except BaseException:
            if health is not None:
                health.close()
            raise
        ops.server = OpsServer(health, scrape, ops.readiness.not_ready, ops.registry)
        ops.server.start()
        return ops

    def urls(self) -> list[str]:
        return self.server.urls() if self.server is not None else []

    def time_models(self, job: Any) -> None:
        """Count the job's model run times (once its models are open), when /metrics is
        served: a run without --metrics-port calls its models untouched."""
        if self.server is None or self.server.scrape is None:
            return
        time_models(job.models, getattr(job, "enhancer", None), self.metrics)

    def watch_viewers(self, output: Any) -> None:
        self._outputs.append(output)

    def watch(self, pipeline: Any) -> None:
        """The pipeline is about to run: ready, and its figures count."""
        self.readiness.watch(pipeline)
        self.metrics.watch(STREAM_KEY, lambda: pipeline)

    def over(self) -> None:
        """The run has ended (or failed): not ready any more."""
        self.readiness.over = True

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
