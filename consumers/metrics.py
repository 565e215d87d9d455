"""Prometheus metrics for a consumer, fed by the loop's batch reports.

One ``ConsumerMetrics`` per process, observing one loop. List-layer and fan-out counters are
read as deltas of the components' own stats, so the hot paths carry no metrics code.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from consumers.fanout_apply import FanoutStats
from consumers.kafka_source import KafkaSource
from consumers.loop import BatchReport
from graph.lists import ListStats


class ConsumerMetrics:
    def __init__(
        self,
        consumer: str,
        source: KafkaSource,
        lists: Sequence[ListStats] = (),
        fanout: FanoutStats | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self._consumer = consumer
        self._source = source
        self._lists = lists
        self._fanout = fanout
        self._seen = {"rebuilds": 0, "compactions": 0, "deliveries": 0, "skipped": 0}
        labels = ["consumer"]
        r = self.registry
        self.events = Counter(
            "fanout_events_applied", "events applied, by type", [*labels, "type"], registry=r
        )
        self.batch_seconds = Histogram(
            "fanout_batch_seconds", "time to apply and commit a batch", labels, registry=r
        )
        self.lag = Gauge(
            "fanout_consumer_lag",
            "messages behind the high watermark",
            [*labels, "topic", "partition"],
            registry=r,
        )
        self.deliveries = Counter(
            "fanout_deliveries", "timeline appends made (timeline cached)", labels, registry=r
        )
        self.skipped = Counter(
            "fanout_deliveries_skipped",
            "deliveries to timelines not in the cache (regenerated on read)",
            labels,
            registry=r,
        )
        self.rebuilds = Counter(
            "fanout_list_rebuilds", "lists rebuilt from the edge store", labels, registry=r
        )
        self.compactions = Counter("fanout_list_compactions", "lists compacted", labels, registry=r)
        self.dead_lettered = Counter(
            "fanout_dead_lettered", "messages sent to the dead-letter topic", labels, registry=r
        )

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        start_http_server(port, addr=addr, registry=self.registry)

    def _delta(self, name: str, total: int) -> int:
        grew = total - self._seen[name]
        self._seen[name] = total
        return grew

    def __call__(self, report: BatchReport) -> None:
        c = self._consumer
        for item in report.applied:
            self.events.labels(c, item.event.type).inc()
        self.batch_seconds.labels(c).observe(report.seconds)
        self.dead_lettered.labels(c).inc(report.dead_lettered)
        for (topic, partition), behind in self._source.lag().items():
            self.lag.labels(c, topic, str(partition)).set(behind)
        self.rebuilds.labels(c).inc(self._delta("rebuilds", sum(s.rebuilds for s in self._lists)))
        compactions = sum(s.compactions for s in self._lists)
        self.compactions.labels(c).inc(self._delta("compactions", compactions))
        if self._fanout is not None:
            self.deliveries.labels(c).inc(self._delta("deliveries", self._fanout.deliveries))
            self.skipped.labels(c).inc(self._delta("skipped", self._fanout.skipped))
