"""``/healthz`` (the process answers) and ``/readyz`` (a memcached server, the edge store and
Kafka answer within ``FANOUT_API_READY_TIMEOUT_S``; one cache server down is gone around, so it
does not make every replica unready at once), for orchestrators: a replica that is alive but
not ready is taken out of rotation instead of being restarted.

``/readyz`` is public, so it says which dependency failed and how (no answer in time, or
failed), never where: the error, which names addresses and topologies, goes to the log. Its
outcome is answered again for a second (api/recent.py), so a flood of anonymous probes costs
the backends one round a second per process."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from timeline_fanout.api.backends import Backends
from timeline_fanout.api.context import context
from timeline_fanout.api.problems import unavailable
from timeline_fanout.api.routing import ApiRoute, dumps, json_response, problems, responds

PROBE_USER = "readyz"
log = logging.getLogger("fanout.api")


def _memcached(backends: Backends, timeout: float) -> None:
    backends.lists.cache.versions()


def _store(backends: Backends, timeout: float) -> None:
    backends.store.known_users([PROBE_USER])


def _kafka(backends: Backends, timeout: float) -> None:
    backends.publisher.check_brokers(timeout)


PROBES: dict[str, Callable[[Backends, float], None]] = {
    "memcached": _memcached,
    "edge_store": _store,
    "kafka": _kafka,
}


async def healthz(_request: Request) -> Response:
    return json_response(dumps({"status": "ok"}))


async def readyz(request: Request) -> Response:
    ctx = context(request)
    timeout = ctx.settings.ready_timeout_s

    async def check(name: str, probe: Callable[[Backends, float], None]) -> str:
        try:
            await asyncio.wait_for(ctx.pool.run(probe, timeout), timeout)
        except TimeoutError:
            log.warning("readyz: %s: no answer within %s s", name, timeout)
            return f"no answer within {timeout} s"
        except Exception as exc:
            log.warning("readyz: %s failed: %s: %s", name, type(exc).__name__, exc)
            return "failed (see the server's log)"
        return "ok"

    checks = ctx.readiness.get()
    if checks is None:
        outcomes = await asyncio.gather(*(check(n, probe) for n, probe in PROBES.items()))
        checks = ctx.readiness.put(dict(zip(PROBES, outcomes, strict=True)))
    if any(outcome != "ok" for outcome in checks.values()):
        failing = ", ".join(name for name, outcome in checks.items() if outcome != "ok")
        raise unavailable(ctx.settings.retry_after_s, f"not ready: {failing}", {"checks": checks})
    return json_response(dumps({"status": "ready", "checks": checks}))


def _operation(operation_id: str, summary: str, model: str, ready: bool) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "summary": summary,
        "security": [],
        "responses": {**responds(200, model, summary), **(problems(503) if ready else {})},
    }


ROUTES = (
    ApiRoute("/healthz", "GET", healthz, _operation("healthz", "alive", "Health", False)),
    ApiRoute(
        "/readyz",
        "GET",
        readyz,
        _operation("readyz", "memcached, the edge store and Kafka answer", "Ready", True),
    ),
)
