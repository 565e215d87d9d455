"""Key construction is injective: no user, namespace or part name can reach another's key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timeline_fanout.graph.model.keys import KeySpace, ListKind, ListRef, counter_key, shard_key

# Ids from the whole id alphabet, and by name the ones that look like another key's suffix.
tricky_ids = ["x", "x:rb", "x:n", "x:0", "x:0:j", "x:0:j:n", "fl:x", "a@b", "-x", "n", "j", "0"]
ids = st.sampled_from(tricky_ids) | st.from_regex(r"[A-Za-z0-9_.:@-]{1,12}", fullmatch=True)
namespaces = st.sampled_from(["tf", "t", "tf:x", "a@b", "tf:fl"]) | st.from_regex(
    r"[A-Za-z0-9_.:@-]{1,8}", fullmatch=True
)
kinds = st.sampled_from(list(ListKind))
gens = st.sampled_from([b"0", b"ab12"]) | st.from_regex(r"[0-9a-f]{1,8}", fullmatch=True).map(
    str.encode
)
shards = st.sampled_from([b"j", b"0"]) | st.from_regex(r"[0-9a-f]{1,6}", fullmatch=True).map(
    str.encode
)

# What a key is derived from: ("list", ns, kind, user), ("shard", ..., gen, shard) or
# ("counter", ..., gen, shard).
Source = tuple[object, ...]
sources = st.one_of(
    st.tuples(st.just("list"), namespaces, kinds, ids),
    st.tuples(st.just("shard"), namespaces, kinds, ids, gens, shards),
    st.tuples(st.just("counter"), namespaces, kinds, ids, gens, shards),
)


def derive(source: Source) -> bytes:
    what, ns, kind, user, *parts = source
    assert isinstance(ns, str) and isinstance(kind, ListKind) and isinstance(user, str)
    key = KeySpace(ns).list_key(ListRef(kind, user))
    if what == "list":
        return key
    gen, shard = parts
    assert isinstance(gen, bytes) and isinstance(shard, bytes)
    key = shard_key(key, gen, shard)
    return key if what == "shard" else counter_key(key)


@given(st.lists(sources, min_size=2, max_size=40, unique=True))
def test_distinct_sources_never_share_a_key(many: list[Source]) -> None:
    """In particular no list key is a shard or counter key of any list, its own included."""
    seen: dict[bytes, Source] = {}
    for source in many:
        key = derive(source)
        assert seen.setdefault(key, source) == source, (key, seen[key], source)


def test_no_two_sources_in_a_domain_of_lookalikes_share_a_key() -> None:
    """Exhaustively, over names chosen to look like each other's suffixes (with ``:`` as the
    separator, ``tf``/``fl``/``x:0:j`` was user x's shard ``0|j``, and ``tf:fl``/``fl``/``x``
    was ``tf``/``fl``/``fl:x``)."""
    domain: list[Source] = []
    for ns in ("tf", "tf:fl", "t"):
        for kind in ListKind:
            for user in tricky_ids:
                domain.append(("list", ns, kind, user))
                for gen in (b"0", b"ab12"):
                    for shard in (b"j", b"0"):
                        domain += [("shard", ns, kind, user, gen, shard)]
                        domain += [("counter", ns, kind, user, gen, shard)]
    keys = [derive(source) for source in domain]
    assert len(set(keys)) == len(domain)


@given(sources)
def test_a_key_splits_back_into_exactly_what_it_was_built_from(source: Source) -> None:
    what, ns, kind, user, *parts = source
    assert isinstance(kind, ListKind)
    expected = [str(ns).encode(), kind.value.encode(), str(user).encode(), *parts]
    if what == "counter":
        expected.append(b"n")
    assert derive(source).split(b"|") == expected


@given(st.lists(st.tuples(kinds, ids), min_size=1, max_size=30), namespaces)
def test_batch_key_building_is_key_by_key_building(
    refs: list[tuple[ListKind, str]], ns: str
) -> None:
    space = KeySpace(ns)
    listed = [ListRef(kind, user) for kind, user in refs]
    assert space.ref_keys(listed) == [space.list_key(ref) for ref in listed]
    users = [user for _, user in refs]
    assert space.list_keys(ListKind.TIMELINE, users) == [
        space.list_key(ListRef(ListKind.TIMELINE, u)) for u in users
    ]


def test_user_x_rb_reaches_nothing_of_user_x() -> None:
    """With ``:`` as separator user ``x:rb``'s list key would be user ``x``'s lease key
    (``tf:fl:x`` + ``:rb``), so anyone could wedge anyone else's lists: ``|`` keys cannot."""
    space = KeySpace("tf")
    for kind in ListKind:
        mine = space.list_key(ListRef(kind, "x:rb"))
        assert mine == b"tf|" + kind.value.encode() + b"|x:rb"
        theirs = space.list_key(ListRef(kind, "x"))
        derived = {theirs}
        for gen in (b"rb", b"0", b"ab12"):
            for shard in (b"j", b"0", b"rb", b"n"):
                derived |= {
                    shard_key(theirs, gen, shard),
                    counter_key(shard_key(theirs, gen, shard)),
                }
        for other in ListKind:
            derived.add(space.list_key(ListRef(other, "x")))
        assert mine not in derived
        assert not any(key.startswith(mine) for key in derived)


@pytest.mark.parametrize(
    "user", ["x|fl", "a b", "", "ü", "x\r\nflush_all", "a+b", "a#1", "a/b", "x" * 65]
)
def test_an_invalid_id_is_refused(user: str) -> None:
    space = KeySpace("tf")
    with pytest.raises(ValueError, match="invalid user id"):
        space.list_key(ListRef(ListKind.FOLLOWERS, user))
    with pytest.raises(ValueError, match="invalid user id"):
        space.list_keys(ListKind.TIMELINE, ["ok", user])
    with pytest.raises(ValueError, match="invalid user id"):
        space.ref_keys([ListRef(ListKind.FOLLOWING, "ok"), ListRef(ListKind.FOLLOWING, user)])


@pytest.mark.parametrize("namespace", ["tf|x", "|", "", "a b", "x" * 33, "tf\n"])
def test_a_namespace_that_could_carry_the_separator_is_refused(namespace: str) -> None:
    with pytest.raises(ValueError, match="namespace"):
        KeySpace(namespace)


def test_a_batchs_families_are_each_keys_family_placed_as_it_always_was() -> None:
    """Every process must place a key alike, whatever its shape: one ``|`` places a key by
    its first part, as the placement always has (``find`` from the start when the second
    ``|`` is missing)."""
    keys = [b"", b"|", b"x|y", b"x|", b"|y", b"a|b|c", b"a|b|c|", b"a||", b"\n|\xff|z|w", b"k"]
    assert KeySpace.families(keys) == [
        b"",
        b"",
        b"x",
        b"x",
        b"",
        b"a|b|c",
        b"a|b|c",
        b"a||",
        b"\n|\xff|z",
        b"k",
    ]
    assert [KeySpace.families([k])[0] for k in keys] == KeySpace.families(keys)


def test_a_lists_items_and_a_users_items_are_placed_by_the_lists_key() -> None:
    assert KeySpace.families([b"tf|fl|u1|0a1b|3|n", b"tf|tl|u1", b"tf|deletions|3"]) == [
        b"tf|fl|u1",
        b"tf|tl|u1",
        b"tf|deletions|3",
    ]
