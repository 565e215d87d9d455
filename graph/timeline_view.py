"""What a reader is shown of a timeline, computed on the member strings.

The view (README "Timelines and fan-out"): entries of authors the reader follows now, one per
post (``(author, post id)``; the newest wins, as in the order ``newest_first`` uses), newest
first, the first ``cap`` of those; a page is the part of the view older than a cursor, at most
``limit`` long. Byte order of members is reader order (graph/timeline_entries.py), so sorting
the strings is sorting the entries: C comparisons, no objects per entry.

A page is found by walking the sorted candidates newest first and splitting only the members
walked: a first page of 50 costs about 50 splits however long the timeline is. The entries
returned are parsed by the caller.

**Floors.** A walk is exact only as far down as its candidates are all known. Below the last
member of a celebrity's posts that were cut short (only the newest were split off the item),
or below the oldest entry of a full timeline (which may have been trimmed while it held posts of
authors no longer followed, pushing out older posts the reader must see), they may not be. The
caller passes the highest such member as ``floor``; a walk that would go below it returns None,
and the caller learns more (splits the rest, checks the timeline) and walks again.
"""

from __future__ import annotations

from collections.abc import Iterable


def visible_page(
    candidates: Iterable[str],
    following: frozenset[str],
    cap: int,
    limit: int,
    before: str | None = None,
    floor: str = "",
) -> list[str] | None:
    """The members of a page: ``candidates`` sorted newest first (duplicates and authors not
    followed included), ``before`` a cursor's member; None if the page reaches below ``floor``.

    Every candidate walked is counted towards ``cap`` (if it is shown) and remembered for
    de-duplication, including those newer than ``before``: a page deep in the timeline shows
    exactly the part of the whole view below its cursor."""
    shown: list[str] = []
    seen: set[str] = set()
    position = 0
    for member in candidates:
        if member < floor:
            return None
        post = member.partition("!")[2]  # "{author}!{post_id}": one post
        if post.partition("!")[0] not in following or post in seen:
            continue
        seen.add(post)
        position += 1
        if position > cap:
            break
        if before is None or member < before:
            shown.append(member)
            if len(shown) == limit:
                break
    return shown
