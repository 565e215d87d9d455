"""The OpenAPI 3.1 document, generated from the route declarations (api/routes/) and the
response models (api/models.py), with the event schemas of schemas/json_schema.py for the
request body. The copy checked in as api/openapi.json is what apps in other languages read; a
test fails when it drifts from what the app serves. Regenerate: ``python -m api.openapi``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic.json_schema import models_json_schema

from timeline_fanout.api.models import MODELS
from timeline_fanout.api.routes import ROUTES
from timeline_fanout.schemas.json_schema import json_schemas, render

DOCUMENT = Path(__file__).with_name("openapi.json")
REF_TEMPLATE = "#/components/schemas/{model}"


def document() -> dict[str, Any]:
    _, models = models_json_schema(
        [(m, "serialization") for m in MODELS], ref_template=REF_TEMPLATE
    )
    components: dict[str, Any] = dict(models.get("$defs", {}))
    for name, schema in json_schemas().items():
        event = {k: v for k, v in schema.items() if k not in ("$schema", "$id")}
        components[f"{name}Event"] = event
    paths: dict[str, Any] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method.lower()] = route.operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "timeline-fanout",
            "version": "1",
            "description": "Home timelines, follower lists and event publishing. Errors are "
            "RFC 9457 application/problem+json naming the field and the rule.",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
            },
        },
        "security": [{"bearer": []}, {}],
    }


if __name__ == "__main__":
    DOCUMENT.write_bytes(render(document()))
    print(DOCUMENT)
