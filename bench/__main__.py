"""python -m bench NAME [--quick] [--out DIR]"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from bench.report import Report
from timeline_fanout.cli.recorded_settings import load_settings

BENCHMARKS = {
    "fanout-rate": "bench.fanout_rate",
    "fanout-appends": "bench.fanout_appends",
    "graph-ingest": "bench.graph_ingest",
    "list-reads": "bench.list_reads",
    "contended-unfollow": "bench.contended_unfollow",
    "timeline-reads": "bench.timeline_reads",
    "api": "bench.api_http",
    "member-pages": "bench.member_pages",
    "group-protocol": "bench.group_protocol",
    "heavy-following": "bench.heavy_following",
    "post-deletion": "bench.post_deletion",
    "member-counts": "bench.member_counts",
    "capacity": "bench.capacity",
    "capacity-model": "bench.capacity_model",
    "failover": "bench.failover",
    "ring-change": "bench.ring_change",
    "native-core": "bench.native_core",
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
