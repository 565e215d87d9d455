"""A private corner of the local stack for one run of the demo or a benchmark.

Its own topic prefix, cache namespace, consumer groups and edge-store file, so that it never
touches anyone's data; the stack is brought up if needed and taken down again only if this run
brought it up, so the machine is left as it was found. Kafka clients made inside must be gone
before the block ends (the broker may go down with it).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from typing import Any

from timeline_fanout.cli.settings import Settings
from timeline_fanout.producers import create_topics
from timeline_fanout_devstack import stack
from timeline_fanout_devstack.home import fanout_home, stack_file


@contextlib.contextmanager
def sandbox(settings: Settings, name: str, **overrides: Any) -> Iterator[Settings]:
    was_up = bool(stack.stack_status(stack.StackState.load(stack_file())))
    state = stack.stack_up(settings.topics, settings.partitions)
    run = f"{name}{secrets.token_hex(3)}"
    db = fanout_home() / f"{run}.db"
    private = settings.model_copy(
        update={
            "kafka": state.kafka,
            "memcached": state.memcached,
            "topic_prefix": run,
            "cache_prefix": run,
            "edge_store": f"sqlite:///{db}",
            "group": run,
            **overrides,
        }
    )
    try:
        create_topics(private.kafka, private.topics.all(), private.partitions)
        yield private
    finally:
        for suffix in ("", "-wal", "-shm"):
            db.with_name(db.name + suffix).unlink(missing_ok=True)
        if not was_up:
            stack.stack_down()
