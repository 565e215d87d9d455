"""JSON Schema documents for apps written in other languages.

The checked-in files under ``schemas/jsonschema/`` are generated from the pydantic models so the
two can never drift; a test regenerates them and compares, and a differential test feeds the
same generated events to both sides. ``event.json`` takes any event an app may publish (``oneOf``
on ``type``), self-contained so an app loads one file. Regenerate with
``python -m schemas.json_schema``.

What JSON Schema cannot say, because a schema sees the parsed value and not the message's bytes,
is stated in ``event.json``'s ``$comment`` and enforced by ``codec.byte_rule_violation``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from timeline_fanout.schemas.codec import MAX_MESSAGE_BYTES
from timeline_fanout.schemas.events import EVENT_TYPES, KEY_FIELDS
from timeline_fanout.schemas.topics import APP_TYPES, POST_TYPES, type_names

SCHEMA_DIR = Path(__file__).with_name("jsonschema")
_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_BASE = "https://timeline-fanout.dev/schemas"
BYTE_RULES = (
    f"Not expressible in JSON Schema, checked by the consumers on the message bytes: at most "
    f"{MAX_MESSAGE_BYTES} bytes, UTF-8 without a byte order mark, never a null value "
    f"(tombstone); and the Kafka message key must equal the field named in each type's "
    f"description. Breaking any of these sends the message to PREFIX.dlq."
)


def _placement(name: str) -> str:
    topic = "posts" if name in type_names(POST_TYPES) else "graph"
    key = "/".join(KEY_FIELDS[name])
    return f"A {name} event: publish it on PREFIX.{topic} with the {key} as the message key."


def json_schemas() -> dict[str, dict[str, Any]]:
    """One document per app event type, and ``event`` for any of them."""
    docs: dict[str, dict[str, Any]] = {}
    for name, model in EVENT_TYPES.items():
        doc = model.model_json_schema()
        doc["description"] = _placement(name)
        docs[name] = {"$schema": _DIALECT, "$id": f"{_BASE}/{name}.json", **doc}
    app_names = type_names(APP_TYPES)
    docs["event"] = {
        "$schema": _DIALECT,
        "$id": f"{_BASE}/event.json",
        "title": "Event",
        "description": "Any event an app may publish; the type field picks the shape.",
        "$comment": BYTE_RULES,
        "oneOf": [{"$ref": f"#/$defs/{name}"} for name in app_names],
        "$defs": {
            name: {k: v for k, v in docs[name].items() if k not in ("$schema", "$id")}
            for name in app_names
        },
    }
    return docs


def render(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def write_all(directory: Path = SCHEMA_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, doc in json_schemas().items():
        path = directory / f"{name}.json"
        path.write_bytes(render(doc))
        written.append(path)
    return written


if __name__ == "__main__":
    for written_path in write_all():
        print(written_path)
