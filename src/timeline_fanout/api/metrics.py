"""Prometheus metrics for the API, in a registry of the app's own (two apps in one process, as
in tests, never share series): latency per route template, requests in flight, and responses
by status. Per process: behind ``--workers N`` each worker exports its own (compose runs one
worker per replica, each scraped on its own)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from timeline_fanout.api.body import BodyBudget
from timeline_fanout.api.recent import Recent
from timeline_fanout.graph.lists.shared_reads import SharedReadStats
from timeline_fanout.memcache.trust import ServerTrust

# Reads served from memcached take a millisecond or less; a rebuild from the store or a
# publish waiting for the broker's acks takes tens to thousands.
BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
UNMATCHED = "unmatched"  # no route: counted under one label, never under the raw path
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


# nginx's code for a request whose client closed the connection before any response was sent
# (api/problems.py sends nothing then): counted, and never as a server error.
NO_RESPONSE = 499


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._rendered: Recent[bytes] = Recent()
        self.latency = Histogram(
            "fanout_api_request_seconds",
            "Time to the end of the response, by route template and method",
            ["route", "method"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "fanout_api_requests_in_flight", "Requests being served", registry=self.registry
        )
        self.body_bytes = Gauge(
            "fanout_api_body_bytes_held",
            "Bytes of request bodies being received, at most FANOUT_API_BODY_BUDGET_MB",
            registry=self.registry,
        )
        self.responses = Counter(
            "fanout_api_responses",
            "Responses by route template, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )

    def watch_bodies(self, budget: BodyBudget) -> None:
        """Export what ``budget`` holds, read when the metrics are rendered."""
        self.body_bytes.set_function(lambda: budget.held)

    def watch_cache(self, trust: ServerTrust, store_reads: SharedReadStats) -> None:
        """Export which cache servers this process goes around, and the reads it answered
        from the edge store instead (shared between readers: graph/lists/shared_reads.py)."""
        self.registry.register(_CacheHealth(trust, store_reads))

    def exposition(self) -> Response:
        """Rendered at most once a second (on the event loop, ~0.5 ms; api/recent.py)."""
        rendered = self._rendered.get() or self._rendered.put(generate_latest(self.registry))
        return Response(rendered, media_type=CONTENT_TYPE_LATEST)


class MetricsMiddleware:
    """Outermost of the app's middleware: it sees every status the API sends, problem
    responses included. The route template is the one the router matched (Starlette records
    it in the scope), so ``/v1/timelines/u1`` and ``/v1/timelines/u2`` share one series."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = NO_RESPONSE

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        start = time.perf_counter()
        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, recording_send)
        finally:
            self.metrics.in_flight.dec()
            route = scope.get("route")
            template = getattr(route, "path", UNMATCHED)
            method = scope["method"] if scope["method"] in METHODS else "other"
            self.metrics.latency.labels(template, method).observe(time.perf_counter() - start)
            self.metrics.responses.labels(template, method, str(status)).inc()


class _CacheHealth:
    """Read when the metrics are rendered: ``ServerTrust`` is read without its cluster's lock,
    which only ever costs a value one render old."""

    def __init__(self, trust: ServerTrust, store_reads: SharedReadStats) -> None:
        self._trust = trust
        self._reads = store_reads

    def describe(self) -> list[Metric]:
        return []  # unchecked: the series are made at each render

    def collect(self) -> Iterator[Metric]:
        down = GaugeMetricFamily(
            "fanout_api_cache_servers_down",
            "Memcached servers this process goes around (down, or not seen answering since)",
            value=sum(map(self._trust.was_down, self._trust.servers)),
        )
        yield down
        yield CounterMetricFamily(
            "fanout_api_store_reads",
            "Lists and timelines answered from the edge store, not the cache (their server "
            "unavailable, or a rebuild by another client taking too long)",
            value=self._reads.reads,
        )
        yield CounterMetricFamily(
            "fanout_api_store_read_queries",
            "Store queries run for those reads (fewer: concurrent readers of a list share them)",
            value=self._reads.queries,
        )
