"""Random small graphs and histories: a warm read is None or the blocking read's page.

Each example writes a graph as the consumers do (follows, unfollows, posts, celebrity posts,
enough follows to roll a following list's shards over), interleaved with what changes what a
read finds: reads (the shared ``ReadMemory`` remembers a head), forgetting, lists and
timelines dropped from memcached. At every read, and at the end, the warm read must return
None or exactly the blocking read's page; once a blocking read has healed everything, the warm
read must be a page. Few examples: each is a few dozen memcached round trips.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from hypothesis import HealthCheck, given
from hypothesis import settings as examples_settings
from hypothesis import strategies as st

from tests.graph.timelines.warm_pair import Pair, make_pair
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph import ListKind, ListRef

AUTHORS = ("a", "b", "c", "d")
STAR = "s"  # a celebrity: never fanned out, merged at read time
Step = tuple[str, str]
FEW_EXAMPLES = examples_settings(
    max_examples=15,
    # Each example makes its own namespace and store from the test's fixtures.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

steps = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["follow", "unfollow", "post"]), st.sampled_from(AUTHORS)),
        st.tuples(
            st.sampled_from(
                [
                    "celebrity_post",
                    "follow_star",
                    "unfollow_star",
                    "read",
                    "forget",
                    "drop_following",
                    "drop_timeline",
                    "drop_celebrity_set",
                    "rollover",
                ]
            ),
            st.just(""),
        ),
    ),
    min_size=1,
    max_size=12,
)


def apply(pair: Pair, step: Step, posts: itertools.count[int]) -> None:
    """One step of the history, on user ``me``."""
    kind, author = step
    if kind == "follow":
        pair.follow("me", author)
    elif kind == "unfollow":
        pair.follow("me", author, active=False)
    elif kind == "post":  # delivered even when not followed (a delivery racing an unfollow)
        pair.post(author, f"p{next(posts)}", ["me"], ago_ms=next(posts) % 7 * 1000)
    elif kind == "celebrity_post":
        pair.celebrity_post(STAR, f"s{next(posts)}", ago_ms=next(posts) % 7 * 1000)
    elif kind == "follow_star":
        pair.follow("me", STAR)
    elif kind == "unfollow_star":
        pair.follow("me", STAR, active=False)
    elif kind == "read":
        pair.both("me", limit=3)
    elif kind == "forget":
        pair.memory.forget("me")
    elif kind == "drop_following":
        pair.blocking.follow_lists.invalidate([ListRef(ListKind.FOLLOWING, "me")])
    elif kind == "drop_timeline":
        pair.blocking.timelines.invalidate([ListRef(ListKind.TIMELINE, "me")])
    elif kind == "drop_celebrity_set":
        pair.blocking.follow_lists.cache.delete_many(pair.blocking.celebrity_posts.set_keys)
    elif kind == "rollover":  # past the 256-byte shards: the head names new shards
        pair.follow("me", *(f"x{next(posts)}" for _ in range(30)))


def test_a_warm_read_is_none_or_the_blocking_page(
    settings: Settings, multi_gets: list[list[bytes]], tmp_path: Path
) -> None:
    examples = itertools.count()
    shown = 0

    @FEW_EXAMPLES
    @given(history=steps, limit=st.integers(1, 6))
    def check(history: list[Step], limit: int) -> None:
        nonlocal shown
        n = next(examples)
        own = settings.model_copy(
            update={
                "cache_prefix": f"{settings.cache_prefix}h{n}",
                "edge_store": f"sqlite:///{tmp_path / f'edges{n}.db'}",
            }
        )
        pair = make_pair(own, multi_gets)
        try:
            pair.follow("me", "a")
            posts = itertools.count()
            for _ in range(4):
                apply(pair, ("post", "a"), posts)
            for step in history:
                apply(pair, step, posts)
            pair.both("me", limit)
            pair.blocking.page("me", limit)  # heals whatever needs healing
            cursor = None
            while True:  # warm now, on every page
                warm = pair.both("me", limit, cursor)
                assert warm is not None, cursor
                shown += len(warm.entries)
                cursor = warm.next
                if cursor is None:
                    break
        finally:
            pair.close()

    check()
    assert shown, "no example had anything to show: the property was never exercised"
