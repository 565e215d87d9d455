"""The check that fails a test run leaving servers of its own running (tests/leftover_servers)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid

from tests.leftover_servers import RUN_MARK, survivors, survivors_after
from timeline_fanout_devstack.memcached_processes import end
from timeline_fanout_devstack.ports import free_port
from timeline_fanout_devstack.stack import memcached_answers, memcached_argv


def test_a_server_started_under_the_run_mark_is_found_until_it_exits() -> None:
    run = uuid.uuid4().hex
    port = free_port()
    env = {**os.environ, RUN_MARK: run}
    # In a session of its own, as the stack starts its servers; and a non-server beside it.
    server = subprocess.Popen(memcached_argv(port), env=env, start_new_session=True)
    other = subprocess.Popen(["sleep", "60"], env=env)
    try:
        while not memcached_answers(f"127.0.0.1:{port}"):
            assert server.poll() is None, "memcached exited"
            time.sleep(0.02)
        found = survivors(run)
        assert [s.pid for s in found] == [server.pid]
        assert found[0].argv[:3] == (memcached_argv(port)[0], "-l", "127.0.0.1")
        assert found[0].started_by.startswith(
            "tests/test_leftover_servers.py::test_a_server_started_under_the_run_mark"
        )
        assert survivors(uuid.uuid4().hex) == []  # another run's mark: not this one's
    finally:
        end(server)
        other.kill()
        other.wait()
    assert survivors_after(run, grace_s=5) == []
