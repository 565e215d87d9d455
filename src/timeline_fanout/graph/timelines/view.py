"""What a reader is shown of a timeline, computed on the member strings.

The view (docs/design/timelines.md): entries of authors the reader follows now, one per
post (``(author, post id)``; the newest wins, as in the order ``newest_first`` uses), newest
first, the first ``cap`` of those; a page is the part of the view older than a cursor, at most
``limit`` long. Byte order of members is reader order (graph/timelines/entries.py), so sorting
the strings is sorting the entries: C comparisons, no objects per entry.

A page is found by walking the sorted candidates newest first and splitting only the members
walked: a first page of 50 costs about 50 splits however long the timeline is, and only the
entries shown become ``TimelineEntry`` tuples.

**Floors.** A walk is exact only as far down as its candidates are all known. Below the last
member of a celebrity's posts that were cut short (only the newest were split off the item),
or below the ``cap``-th newest member of a full timeline (a trim may have pushed out posts
below it while it held posts of authors no longer followed; ``TimelineReader.kept_from``), they
may not be. The
caller passes the highest such member as ``floor``; a walk that would go below it returns None,
and the caller learns more (splits the rest, checks the timeline) and walks again.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import islice, repeat

from timeline_fanout.graph.lists.tokens import CorruptMember
from timeline_fanout.graph.timelines.entries import TimelineEntry

_tuple = tuple.__new__  # a NamedTuple's own __new__ is Python code; this is one C call


def visible_page(
    ascending: list[str],
    following: frozenset[str],
    cap: int,
    limit: int,
    before: str | None = None,
    floor: str = "",
    gone: frozenset[str] = frozenset(),
) -> list[TimelineEntry] | None:
    """A page, newest first: ``ascending`` holds the candidate members sorted (duplicates and
    authors not followed included), ``before`` a cursor's member, ``gone`` the posts known to
    be deleted (``{author}!{post_id}``: skipped, not counted); None if the page reaches below
    ``floor``.

    Every candidate walked counts towards ``cap`` (if it is shown) and is remembered for
    de-duplication, including those newer than ``before``: a page deep in the timeline shows
    exactly the part of the whole view below its cursor."""
    if before is None and limit <= cap:
        newest = _unfiltered(ascending, following, limit, floor, gone)
        if newest is not None:
            return newest
    low = bisect_left(ascending, floor) if floor else 0
    shown: list[TimelineEntry] = []
    seen: set[str] = set()
    position = 0
    for member in islice(reversed(ascending), len(ascending) - low):
        ts, _, post = member.partition("!")  # post: "{author}!{post_id}", one per post
        author, _, post_id = post.partition("!")
        if not post_id or not ts.isdigit():  # token-shaped, not a member of ours
            raise CorruptMember(f"not a timeline member: {member[:60]!r}")
        if author not in following or post in seen or post in gone:
            continue
        seen.add(post)
        position += 1
        if position > cap:
            break
        if before is None or member < before:
            shown.append(_tuple(TimelineEntry, (int(ts), author, post_id)))
            if len(shown) == limit:
                break
    else:
        if floor:
            return None  # everything down to the floor was not enough
    return shown


def followed_posts(ascending: list[str], following: frozenset[str], down_to: str) -> list[str]:
    """The posts (``{author}!{post_id}``) of the members at or above ``down_to`` by authors in
    ``following``, once each: every post a walk down to there counts towards the cap."""
    low = bisect_left(ascending, down_to) if down_to else 0
    posts = dict.fromkeys(
        post
        for member in ascending[low:]
        if (post := member.partition("!")[2]).partition("!")[0] in following
    )
    return list(posts)


def _unfiltered(
    ascending: list[str], following: frozenset[str], limit: int, floor: str, gone: frozenset[str]
) -> list[TimelineEntry] | None:
    """A first page in bulk, when its newest candidates need no filtering (the common case):
    the newest ``limit`` distinct members, if all are above ``floor``, all by authors followed,
    all different posts and none deleted, are exactly the first ``limit`` entries of the view.
    Identical members (a post delivered and also merged in) are one entry. None when that does
    not hold: the caller walks."""
    top = list(dict.fromkeys(reversed(ascending[-2 * limit :])))[:limit]
    if len(top) < limit or top[-1] < floor:
        return None
    parts = "!".join(top).split("!")
    authors, post_ids = parts[1::3], parts[2::3]
    if (
        len(parts) != 3 * limit
        or not following.issuperset(authors)
        or len(set(zip(authors, post_ids, strict=True))) != limit
        or (gone and not gone.isdisjoint(map("!".join, zip(authors, post_ids, strict=True))))
    ):
        return None
    try:
        times = list(map(int, parts[::3]))
    except ValueError:  # not a member of ours: the walk names it (``CorruptMember``)
        return None
    return list(map(_tuple, repeat(TimelineEntry), zip(times, authors, post_ids, strict=True)))
