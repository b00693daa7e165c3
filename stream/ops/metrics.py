"""The Prometheus figures of one `serve` or `live` process, labelled with its stream name.

Counts and gauges are read at scrape time from the running pipelines (stream.ops.feed) and
the owner's own figures (sessions, viewers, readiness); the frame and stage histograms
are filled from the time records the pipelines keep anyway, so a frame costs nothing more.
Only the model-time histogram is fed as it happens (stream.ops.models). A pipeline that
ends is retired: its final counts stay in the totals, which never go down."""
from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from stream.ops.buckets import Buckets
from stream.ops.feed import COUNTS, PipelineFeed

# facestream_refusals_total's reasons: a page offer or WHIP POST with every slot taken
# (full) or while draining; an offer that cannot lead to a session (bad_offer); a missing or
# wrong access token (unauthorized); a WHEP viewer over the limit (viewers_full); a
# connection over the connection limits (connections); any other refused request on the
# session endpoints (bad_request).
REASONS = ("full", "draining", "bad_offer", "unauthorized", "viewers_full", "connections", "bad_request")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,63}")
CONTENT_TYPE = CONTENT_TYPE_LATEST

_COUNT_HELP = {
    "frames_in": "Frames read from the input (live: frames dropped at once included).",
    "frames_out": "Frames the output delivered.",
    "frames_dropped": "Frames dropped: by the pipeline's live ring, or given to the output and not delivered.",
    "faces_swapped": "Faces swapped into frames.",
    "reconnects": "Reconnections of an RTSP input or output after a lost connection.",
}


def check_name(name: str) -> str:
    """The stream label, checked: 1 to 63 of A-Z a-z 0-9 _ . - (a ValueError saying so)."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"--name {name!r}: use 1 to 63 letters, digits, '_', '.' or '-'")
    return name


class StreamMetrics:
    """The figures of one process. Its owner sets the gauges' readers (`sessions`,
    `viewers`, `not_ready`, `draining`, `refused_elsewhere`), `watch`es each pipeline and
    `retire`s it once ended; `refuse` counts a refusal. Any thread."""

    def __init__(self, name: str) -> None:
        self.name = check_name(name)
        self.sessions: Callable[[], int] = lambda: 0
        self.viewers: Callable[[], int] = lambda: 0
        self.not_ready: Callable[[], str | None] = lambda: "not started"
        self.draining: Callable[[], bool] = lambda: False
        self.refused_elsewhere: dict[str, Callable[[], int]] = {}  # a reason's count kept by another part
        self.latency = Buckets()
        self.stages: dict[str, Buckets] = {}
        self.models: dict[tuple[str, str], Buckets] = {}
        self.sessions_started = 0
        self._refusals = dict.fromkeys(REASONS, 0)
        self._feeds: dict[str, PipelineFeed] = {}
        self._ended = dict.fromkeys(COUNTS, 0)
        self._lock = threading.Lock()

    def watch(self, key: str, pipeline_of: Callable[[], Any]) -> None:
        """A session (serve) or the run (live) started: its pipeline, once `pipeline_of()`
        returns one, counts from now on."""
        with self._lock:
            self._feeds[key] = PipelineFeed(pipeline_of)
            self.sessions_started += 1

    def retire(self, key: str) -> None:
        """The session `key` ended and its pipeline has stopped: its last figures go into
        the totals, and it is read no more."""
        with self._lock:
            feed = self._feeds.pop(key, None)
            if feed is not None:
                counts = feed.pull(self.latency, self.stages)
                for name in COUNTS:
                    self._ended[name] += counts[name]

    def refuse(self, reason: str) -> None:
        if reason not in self._refusals:
            raise ValueError(f"refusal reason {reason!r}: not one of {', '.join(REASONS)}")
        with self._lock:
            self._refusals[reason] += 1

    def model_buckets(self, runtime: str, model: str) -> Buckets:
        """The histogram of one model's run times (made on first use)."""
        with self._lock:
            return self.models.setdefault((runtime, model), Buckets())

    def totals(self) -> dict[str, int]:
        """Each count, ended pipelines and running ones together (reads the running ones)."""
        with self._lock:
            return self._totals()

    def _totals(self) -> dict[str, int]:
        totals = dict(self._ended)
        for feed in list(self._feeds.values()):
            counts = feed.pull(self.latency, self.stages)
            for name in COUNTS:
                totals[name] += counts[name]
        return totals

    def collect(self) -> Iterator[Any]:
        """The metric families, as a Prometheus collector yields them."""
        label = [self.name]
        with self._lock:
            totals = self._totals()
            refusals = dict(self._refusals)
            started = self.sessions_started
            stages = sorted(self.stages.items())
            models = sorted(self.models.items())
        for reason, read in self.refused_elsewhere.items():
            refusals[reason] = refusals.get(reason, 0) + read()
        for name in COUNTS:
            family = CounterMetricFamily(f"facestream_{name}", _COUNT_HELP[name], labels=["stream"])
            family.add_metric(label, totals[name])
            yield family
        family = CounterMetricFamily("facestream_sessions_started", "Sessions started (live: the run).",
                                     labels=["stream"])
        family.add_metric(label, started)
        yield family
        family = CounterMetricFamily("facestream_refusals", "Requests or connections refused, by reason.",
                                     labels=["stream", "reason"])
        for reason, n in refusals.items():
            family.add_metric([self.name, reason], n)
        yield family
        yield from self._gauges()
        family = HistogramMetricFamily("facestream_latency_seconds", "Capture-to-output latency of each frame.",
                                       labels=["stream"])
        family.add_metric(label, *self.latency.exposed())
        yield family
        family = HistogramMetricFamily("facestream_stage_seconds", "Time each pipeline stage took per frame.",
                                       labels=["stream", "stage"])
        for stage, buckets in stages:
            family.add_metric([self.name, stage], *buckets.exposed())
        yield family
        family = HistogramMetricFamily("facestream_model_seconds", "Time of each model run, by runtime and model.",
                                       labels=["stream", "runtime", "model"])
        for (runtime, model), buckets in models:
            family.add_metric([self.name, runtime, model], *buckets.exposed())
        yield family

    def _gauges(self) -> Iterator[Any]:
        values = (("sessions", "Sessions open (live: 1 while the pipeline runs).", self.sessions()),
                  ("viewers", "WHEP viewers watching.", self.viewers()),
                  ("ready", "1 when /readyz says ready.", int(self.not_ready() is None)),
                  ("draining", "1 from SIGTERM to the exit.", int(self.draining())))
        for name, doc, value in values:
            family = GaugeMetricFamily(f"facestream_{name}", doc, labels=["stream"])
            family.add_metric([self.name], value)
            yield family


class _Collector(Collector):
    def __init__(self, metrics: StreamMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        return self.metrics.collect()


def registry_of(metrics: StreamMetrics) -> CollectorRegistry:
    """A registry of this process's figures alone (not the library's global one)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(metrics))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry in Prometheus's text format (CONTENT_TYPE)."""
    return generate_latest(registry)
