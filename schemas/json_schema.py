"""JSON Schema documents for apps written in other languages.

The checked-in files under ``schemas/jsonschema/`` are generated from the pydantic models so the
two can never drift; a test regenerates them and compares. Regenerate with
``python -m schemas.json_schema``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from schemas.events import EVENT_TYPES

SCHEMA_DIR = Path(__file__).with_name("jsonschema")


def json_schemas() -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = {}
    for name, model in EVENT_TYPES.items():
        doc = model.model_json_schema()
        doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        doc["$id"] = f"https://timeline-fanout.dev/schemas/{name}.json"
        docs[name] = doc
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
