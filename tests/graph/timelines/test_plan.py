"""The plan executors (graph/timelines/plan.py) on the real memcached: what a plan yields is
answered in order, and a failure answering a step is raised inside the plan, where it asked."""

from __future__ import annotations

from timeline_fanout.graph.timelines.plan import Plan, blocking, multi_get, run_blocking
from timeline_fanout.memcache.cluster import MemcacheCluster


def test_each_multi_get_is_answered_after_the_steps_before_it(
    cache: MemcacheCluster, unique: str
) -> None:
    key = f"{unique}|plan".encode()
    steps: list[str] = []

    def plan() -> Plan[bytes | None]:
        before = yield from multi_get([key])
        steps.append(f"read {sorted(before)}")
        yield from blocking("a write", lambda: cache.set_many({key: b"written"}))
        after = yield from multi_get([key])
        return after[key].value if key in after else None

    assert run_blocking(plan(), cache) == b"written"
    assert steps == ["read []"]


def test_a_plan_of_no_keys_sends_nothing_and_finishes_at_once(cache: MemcacheCluster) -> None:
    def plan() -> Plan[int]:
        found = yield from multi_get([])
        return len(found)

    steps = plan()
    try:
        next(steps)
    except StopIteration as done:
        assert done.value == 0
    else:
        raise AssertionError("a plan of no keys yielded a step")


def test_a_failure_answering_a_step_is_raised_inside_the_plan_where_it_asked(
    cache: MemcacheCluster,
) -> None:
    def broken() -> int:
        raise LookupError("the store has no such post")

    def plan() -> Plan[str]:
        try:
            yield from blocking("a store query", broken)
        except LookupError as exc:
            reason = str(exc)
            healed = yield from blocking("a heal", lambda: f"healed after {reason}")
            return healed
        return "not reached"

    assert run_blocking(plan(), cache) == "healed after the store has no such post"
