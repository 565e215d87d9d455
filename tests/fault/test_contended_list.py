"""The Membase manual's contended-list claim under load: many writers on one hot list while readers
compact it; no member lost, none resurrected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fault.harness import SIZE, record
from tests.graph.lists.contention import contend
from timeline_fanout.graph import ListSettings
from timeline_fanout.memcache.cluster import MemcacheCluster


def test_hot_list_under_writers_and_compacting_readers(
    cache: MemcacheCluster, unique: str, tmp_path: Path, fault_report: dict[str, Any]
) -> None:
    servers = [(h, int(p)) for h, _, p in (s.rpartition(":") for s in cache.servers)]
    settings = ListSettings(
        shard_bytes=128, dirty_ratio=0.3, dirty_min=2, namespace=unique, compact_write_prob=0.1
    )
    writers = 8
    result = contend(
        servers,
        tmp_path / "edges.db",
        settings,
        writers=writers,
        readers=4,
        steps=max(SIZE // (writers * 4), 20),
    )
    lost = len(result.expected - result.cached)
    resurrected = len(result.cached - result.expected)
    record(
        fault_report,
        {
            "list_writes": writers * max(SIZE // (writers * 4), 20),
            "compactions": sum(s.compactions for s in result.stats),
            "compactions_lost_race": sum(s.compactions_lost for s in result.stats),
            "rollovers": sum(s.rollovers for s in result.stats),
            "lost": lost,
            "resurrected": resurrected,
            "edge_divergent": int(result.stored != result.expected),
        },
    )
    assert not result.errors, result.errors
    assert lost == resurrected == 0
    assert result.stored == result.expected
