"""What every route needs, kept on the app's state: the backend threads, the warm reads, the
access rules, the settings, the metrics, the OpenAPI document and the budget of request bodies.
One per app, so several apps can live in one process (tests)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from timeline_fanout.api.auth import Guard
from timeline_fanout.api.backends import BackendPool
from timeline_fanout.api.body import BodyBudget
from timeline_fanout.api.metrics import ApiMetrics
from timeline_fanout.api.recent import Recent
from timeline_fanout.api.settings import ApiSettings
from timeline_fanout.graph.timelines.warm_reads import WarmReads


@dataclass(frozen=True, slots=True)
class ApiContext:
    pool: BackendPool
    guard: Guard
    settings: ApiSettings
    metrics: ApiMetrics
    openapi: bytes  # the document this app serves (api/openapi.py)
    warm: WarmReads | None  # the event loop's timeline reads (graph/timelines/warm_reads.py)
    body_budget: BodyBudget  # request bodies being received (api/body.py)
    readiness: Recent[dict[str, str]]  # /readyz's last checks, for a second


def context(request: Request) -> ApiContext:
    found: ApiContext = request.app.state.api
    return found
