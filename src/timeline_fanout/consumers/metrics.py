"""Prometheus metrics for a consumer, fed by the loop's batch reports.

One ``ConsumerMetrics`` per process, observing one loop. List-layer and fan-out counters are
read as deltas of the components' own stats, so the hot paths carry no metrics code. The group
membership figures (assigned or not, for how long, rebalances) are read from the Kafka source
when scraped, so they move while no batch is committed: a consumer stuck in a rebalance or
retrying through an outage shows it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from timeline_fanout.consumers.fanout_apply import FanoutStats
from timeline_fanout.consumers.kafka_source import KafkaSource
from timeline_fanout.consumers.loop import BatchReport, LoopStats
from timeline_fanout.graph.lists.token_lists import ListStats


class GroupCollector(Collector):
    """Membership and the loop's exceptional outcomes, read at scrape time."""

    def __init__(self, consumer: str, source: KafkaSource, stats: LoopStats | None) -> None:
        self._consumer = consumer
        self._source = source
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        c, source = self._consumer, self._source
        assigned = GaugeMetricFamily(
            "fanout_consumer_assigned",
            "1 while the consumer holds a partition assignment (possibly empty), 0 meanwhile",
            labels=["consumer"],
        )
        assigned.add_metric([c], 0.0 if source.unassigned_since is not None else 1.0)
        unassigned = GaugeMetricFamily(
            "fanout_unassigned_seconds",
            "seconds without an assignment, since startup or the last revocation",
            labels=["consumer"],
        )
        unassigned.add_metric([c], source.unassigned_for())
        changes = CounterMetricFamily(
            "fanout_rebalances",
            "assignment changes seen: assigned, revoked, lost, kicked (left for not polling)",
            labels=["consumer", "change"],
        )
        for change in ("assigned", "revoked", "lost", "kicked"):
            changes.add_metric([c, change], float(source.changes[change]))
        yield from (assigned, unassigned, changes)
        if self._stats is not None:
            outcomes = CounterMetricFamily(
                "fanout_batch_outcomes",
                "batches retried (attempts), abandoned after a revocation, commits refused",
                labels=["consumer", "outcome"],
            )
            outcomes.add_metric([c, "retry"], float(self._stats.retries))
            outcomes.add_metric([c, "abandoned"], float(self._stats.abandoned))
            outcomes.add_metric([c, "commit_rejected"], float(self._stats.commits_rejected))
            yield outcomes


class ConsumerMetrics:
    def __init__(
        self,
        consumer: str,
        source: KafkaSource,
        lists: Sequence[ListStats] = (),
        fanout: FanoutStats | None = None,
        registry: CollectorRegistry | None = None,
        loop_stats: LoopStats | None = None,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self._consumer = consumer
        self._source = source
        self._lists = lists
        self._fanout = fanout
        self._seen = {
            "rebuilds": 0,
            "compactions": 0,
            "deliveries": 0,
            "skipped": 0,
            "degraded_reads": 0,
        }
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
        self.degraded_reads = Counter(
            "fanout_list_degraded_reads",
            "lists read from the edge store because their memcached server is unavailable",
            labels,
            registry=r,
        )
        self.dead_lettered = Counter(
            "fanout_dead_lettered",
            "messages sent to the dead-letter topic; stage: decode (bad input) or apply (poison)",
            [*labels, "stage"],
            registry=r,
        )
        r.register(GroupCollector(consumer, source, loop_stats))

    def serve(self, port: int, addr: str = "0.0.0.0") -> int:
        """Serve the metrics on ``port`` (0: a free one); returns the port bound."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return int(server.server_port)

    def _delta(self, name: str, total: int) -> int:
        grew = total - self._seen[name]
        self._seen[name] = total
        return grew

    def __call__(self, report: BatchReport) -> None:
        c = self._consumer
        for item in report.applied:
            self.events.labels(c, item.event.type).inc()
        self.batch_seconds.labels(c).observe(report.seconds)
        self.dead_lettered.labels(c, "decode").inc(report.rejected)
        self.dead_lettered.labels(c, "apply").inc(report.apply_failed)
        for (topic, partition), behind in self._source.lag().items():
            self.lag.labels(c, topic, str(partition)).set(behind)
        self.rebuilds.labels(c).inc(self._delta("rebuilds", sum(s.rebuilds for s in self._lists)))
        compactions = sum(s.compactions for s in self._lists)
        self.compactions.labels(c).inc(self._delta("compactions", compactions))
        degraded = sum(s.degraded_reads for s in self._lists)
        self.degraded_reads.labels(c).inc(self._delta("degraded_reads", degraded))
        if self._fanout is not None:
            self.deliveries.labels(c).inc(self._delta("deliveries", self._fanout.deliveries))
            self.skipped.labels(c).inc(self._delta("skipped", self._fanout.skipped))
