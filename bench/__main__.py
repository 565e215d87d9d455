"""python -m bench NAME [--quick] [--out DIR]"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from bench.support.report import Report
from timeline_fanout.cli.recorded_settings import load_settings

BENCHMARKS = {
    "fanout-rate": "bench.fanout.fanout_rate",
    "fanout-appends": "bench.fanout.fanout_appends",
    "graph-ingest": "bench.graph.graph_ingest",
    "list-reads": "bench.graph.list_reads",
    "contended-unfollow": "bench.graph.contended_unfollow",
    "timeline-reads": "bench.reads.timeline_reads",
    "api": "bench.reads.api_http",
    "member-pages": "bench.reads.member_pages",
    "group-protocol": "bench.brokers.group_protocol",
    "heavy-following": "bench.reads.heavy_following",
    "post-deletion": "bench.fanout.post_deletion",
    "member-counts": "bench.graph.member_counts",
    "capacity": "bench.capacity.capacity",
    "capacity-model": "bench.capacity.capacity_model",
    "failover": "bench.cache.failover",
    "ring-change": "bench.cache.ring_change",
    "native-core": "bench.fanout.native_core",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("name", choices=[*BENCHMARKS, "all"])
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    names = list(BENCHMARKS) if args.name == "all" else [args.name]
    for name in names:
        module = importlib.import_module(BENCHMARKS[name])
        module.run(load_settings(), Report(name, args.out, args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
