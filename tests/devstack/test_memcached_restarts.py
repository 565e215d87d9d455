"""Servers of the recorded stack killed and started again (``stack.memcached_killed``): the
record names the servers running afterwards, so ``stack down`` stops them."""

from __future__ import annotations

import contextlib

from timeline_fanout_devstack import stack
from timeline_fanout_devstack.home import stack_file


def test_servers_restarted_together_are_all_recorded_with_their_new_pids(
    local_stack: stack.StackState,
) -> None:
    before = stack.StackState.load(stack_file())
    assert before is not None
    names = [s.name for s in before.services if s.name.startswith("memcached")][:2]
    with contextlib.ExitStack() as down:  # both down at once, restarted in reverse order
        for name in names:
            down.enter_context(stack.memcached_killed(name))
    after = stack.StackState.load(stack_file())
    assert after is not None
    old = {s.name: s.pid for s in before.services}
    for service in after.services:
        if service.name in names:
            assert service.pid != old[service.name]
        assert stack._pid_alive(service.pid), service
        assert service.name in stack.BROKERS or stack.memcached_answers(service.address)
