"""python -m bench.on_brokers NAME... [--quick] [--rounds N] [--out DIR]

The same benchmarks against Apache Kafka and Tansu in one run: a local stack per broker (each
under its own FANOUT_HOME, both up for the whole run), every benchmark run on each broker in
turn, the order alternating from round to round (this machine is noisy: neither broker always
goes first). Results land in ``DIR/<broker>/round<N>/NAME.json``, as ``python -m bench`` writes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.__main__ import BENCHMARKS
from timeline_fanout_devstack.broker_choice import BROKERS


def _fanout(home: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FANOUT_")}
    env["FANOUT_HOME"] = str(home)
    subprocess.run([sys.executable, "-m", "timeline_fanout", *args], env=env, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.on_brokers", description=__doc__)
    parser.add_argument("names", nargs="+", choices=list(BENCHMARKS))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench/results/brokers"))
    args = parser.parse_args(argv)
    homes = {broker: Path(tempfile.mkdtemp(prefix=f"bench-{broker}-")) for broker in BROKERS}
    try:
        for broker, home in homes.items():
            _fanout(home, "stack", "up", "--broker", broker)
        for round_ in range(args.rounds):
            order = list(BROKERS) if round_ % 2 == 0 else list(reversed(BROKERS))
            for name in args.names:
                for broker in order:
                    out = args.out / broker / f"round{round_}"
                    quick = ["--quick"] if args.quick else []
                    _fanout(homes[broker], "bench", name, *quick, "--out", str(out))
    finally:
        for home in homes.values():
            _fanout(home, "stack", "down", "--purge")
    return 0


if __name__ == "__main__":
    sys.exit(main())
