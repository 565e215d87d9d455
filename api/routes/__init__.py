"""Every route of the API, declared with its OpenAPI operation (api/routing.py)."""

from __future__ import annotations

from api.routes import events, health, meta, page, stats, timelines, users
from api.routing import ApiRoute

ROUTES: tuple[ApiRoute, ...] = (
    *timelines.ROUTES,
    *users.ROUTES,
    *events.ROUTES,
    *health.ROUTES,
    *meta.ROUTES,
    *stats.ROUTES,
    *page.ROUTES,
)
