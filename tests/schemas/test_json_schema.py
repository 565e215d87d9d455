from __future__ import annotations

import jsonschema
import orjson
import pytest

from schemas import EventDecodeError, validate_event
from schemas.json_schema import SCHEMA_DIR, json_schemas, render

SAMPLES = [
    {"type": "follow", "follower": "u1", "followee": "u2"},
    {"type": "follow", "follower": "u1", "followee": "u2", "group": "work"},
    {"type": "unfollow", "follower": "u1", "followee": "u2", "ts": 5, "v": 1, "event_id": "e"},
    {"type": "post", "author": "u1", "post_id": "p1", "text": "hi"},
    {"type": "user_removed", "user": "u1"},
    {"type": "follow", "follower": "u 1", "followee": "u2"},
    {"type": "follow", "follower": "u1"},
    {"type": "follow", "follower": "u1", "followee": "u2", "x": 1},
    {"type": "post", "author": "u1", "post_id": "p" * 65},
    {"type": "post", "author": "u1", "post_id": "p", "ts": -1},
    {"type": "user_removed", "user": "a\n"},
]


def test_checked_in_schemas_match_the_models() -> None:
    for name, doc in json_schemas().items():
        assert (SCHEMA_DIR / f"{name}.json").read_bytes() == render(doc), (
            f"{name}.json is stale: run python -m schemas.json_schema"
        )


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: orjson.dumps(s).decode()[:60])
def test_json_schema_and_python_validation_agree(sample: dict[str, object]) -> None:
    docs = {
        name: orjson.loads((SCHEMA_DIR / f"{name}.json").read_bytes()) for name in json_schemas()
    }
    schema_ok = jsonschema.Draft202012Validator(docs[str(sample["type"])]).is_valid(sample)
    try:
        validate_event(sample)
        python_ok = True
    except EventDecodeError:
        python_ok = False
    assert schema_ok == python_ok
