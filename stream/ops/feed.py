"""One running pipeline read for the metrics at scrape time: its counts (kept monotonic)
and the per-frame time records it already keeps (stream.runtime.metrics), turned into
histogram counts from where the last scrape stopped. Nothing here runs on the frame path."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stream.ops.buckets import Buckets
from stream.sinks.protocol import stats_of

# The counters a pipeline adds to, by their short names (facestream_<name>_total).
COUNTS = ("frames_in", "frames_out", "frames_dropped", "faces_swapped", "reconnects")


class PipelineFeed:
    """Reads the pipeline `pipeline_of()` returns (None until it exists)."""

    def __init__(self, pipeline_of: Callable[[], Any]) -> None:
        self.pipeline_of = pipeline_of
        self.counts = dict.fromkeys(COUNTS, 0)
        self._latency_at = 0
        self._stage_at: dict[str, int] = {}

    def pull(self, latency: Buckets, stages: dict[str, Buckets]) -> dict[str, int]:
        """Bring the counts up to date (never down: a figure read between two of a stage's
        updates may dip) and move the time records made since the last pull into
        `latency` and `stages`; the counts."""
        pipeline = self.pipeline_of()
        if pipeline is None:
            return self.counts
        m = pipeline.metrics
        sink = stats_of(pipeline.runner.sink)
        now = {"frames_in": m.frames_in, "frames_out": max(0, m.frames_out - sink["dropped"]),
               "frames_dropped": sum(r.drops for r in pipeline.rings) + sink["dropped"],
               "faces_swapped": m.faces_swapped,
               "reconnects": int(getattr(pipeline.runner.source, "reconnects", 0)) + sink["reconnects"]}
        for key, value in now.items():
            if value > self.counts[key]:
                self.counts[key] = value
        # Each list is appended to by one stage thread: what is there when it is read is final.
        values = m.latency.values
        end = len(values)
        latency.add_many(values[self._latency_at:end])
        self._latency_at = end
        for name, samples in list(m.stages.items()):
            values = samples.values
            start, end = self._stage_at.get(name, 0), len(values)
            kept = stages.setdefault(name, Buckets())  # a stage named before its first frame
            if end > start:
                kept.add_many(values[start:end])
                self._stage_at[name] = end
        return self.counts
