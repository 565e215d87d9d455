"""``create_app``: the ASGI application, from the API's settings and a way to open one thread's
backends (the CLI's is cli/api_server.py, which wires them from the stack's settings).

Middleware, outermost first: metrics (sees every status sent), the catch-all that turns any
unhandled exception into a problem response (503 for a transient backend failure), then
Starlette's handlers for ``Problem`` and its own HTTP errors, then the router.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware

from timeline_fanout.api.auth import Guard, TokenVerifier
from timeline_fanout.api.backends import BackendPool, Backends
from timeline_fanout.api.body import BodyBudget
from timeline_fanout.api.context import ApiContext
from timeline_fanout.api.metrics import ApiMetrics, MetricsMiddleware
from timeline_fanout.api.openapi import document
from timeline_fanout.api.problems import CatchAll, Problem, on_http_error, on_problem
from timeline_fanout.api.recent import Recent
from timeline_fanout.api.routes import ROUTES
from timeline_fanout.api.settings import ApiSettings
from timeline_fanout.graph.timelines.warm_reads import WarmReads
from timeline_fanout.schemas.json_schema import render


def create_app(
    settings: ApiSettings,
    open_backends: Callable[[], Backends],
    warm: WarmReads | None = None,
) -> Starlette:
    """Raises ``AuthConfigError`` when the configured key cannot verify tokens. Backend threads
    start with the app and stop (closing their connections) when its lifespan ends, as do the
    warm reads' connections (``warm``: timeline reads on the event loop; without it every read
    goes through a backend thread)."""
    metrics = ApiMetrics()
    pool = BackendPool(open_backends, settings.threads)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if warm is not None:
                warm.close()
            pool.close()

    app = Starlette(
        routes=[route.route() for route in ROUTES],
        middleware=[
            Middleware(MetricsMiddleware, metrics=metrics),
            Middleware(CatchAll, retry_after_s=settings.retry_after_s),
        ],
        exception_handlers={Problem: on_problem, HTTPException: on_http_error},
        lifespan=lifespan,
    )
    # No redirect from /path/ to /path: Starlette builds its Location from the request's Host
    # header, which a client chooses, so a redirect would point wherever the client said.
    app.router.redirect_slashes = False
    guard = Guard(TokenVerifier.from_settings(settings), settings.private_lists)
    budget = BodyBudget(settings.body_budget_mb << 20)
    metrics.watch_bodies(budget)
    app.state.api = ApiContext(
        pool, guard, settings, metrics, render(document()), warm, budget, Recent()
    )
    return app
