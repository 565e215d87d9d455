"""Every route of the API, declared with its OpenAPI operation (api/routing.py)."""

from __future__ import annotations

from timeline_fanout.api.routes import events, health, meta, page, posts, stats, timelines, users
from timeline_fanout.api.routing import ApiRoute

ROUTES: tuple[ApiRoute, ...] = (
    *timelines.ROUTES,
    *users.ROUTES,
    *posts.ROUTES,
    *events.ROUTES,
    *health.ROUTES,
    *meta.ROUTES,
    *stats.ROUTES,
    *page.ROUTES,
)
