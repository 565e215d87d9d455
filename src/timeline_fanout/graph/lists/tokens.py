"""The append-only set encoding of memcached lists, with positions: ``+id#pos `` adds,
``-id#pos `` removes (after Sallings's "Maintaining a Set in Memcached" and the Membase manual).

A token carries the position (hex) of the edge-store write it reports, and a member's state is
its token with the **greatest position** (a removal wins a tie), wherever in the list that token
sits. Membership is last-writer-wins by position, not by append order: appends commute, so a
replay, a zombie consumer, a redelivery or a racing partition can append in any order and the
list decodes to the same set. Timeline entries (``{ts}!{author}!{post_id}``, add-only) carry no
position; a token without one counts as position 0.

Tokens are space-terminated and ``#`` is outside the id alphabet (and outside timeline entries),
so an id may contain ``-`` or ``@`` and still parses unambiguously. Decoding is the hot path of
every list read: the common add-only case runs at C speed (one regex substitution, one split).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from timeline_fanout.graph.model.edges import EdgeChange
from timeline_fanout.graph.model.keys import ListKind, ListRef
from timeline_fanout.native_core import core
from timeline_fanout.schemas import all_valid_ids

PLUS = 0x2B
MINUS = 0x2D
_POSITIONS = re.compile(rb"#[0-9a-f]+ ")
# Why a follower or following list holding something else than user ids is corrupt.
NOT_AN_ID = "a member that is not a user id"


class CorruptList(ValueError):
    """A shard holds something that is not a token: the list must be rebuilt, not guessed at."""


class CorruptMember(ValueError):
    """A token whose member is not of the form its list's writers write (a timeline member
    without its time, author and post id): bytes corrupted outside, so the list is rebuilt like a
    ``CorruptList``. A ``ValueError``, as every decoding failure here is."""


class Token(NamedTuple):
    """One token as decoded: which member, at which position (0 for none), added or removed."""

    member: bytes
    pos: int
    add: bool


class Change(NamedTuple):
    """One change to write to a list: ``member`` added (or removed) at position ``pos``."""

    add: bool
    member: str
    pos: int


_tuple = tuple.__new__  # a NamedTuple's own __new__ is Python code; this is one C call


class UnsafeMember(ValueError):
    """A member that could carry a delimiter: refused, so no input can inject tokens."""


def _safe(member: str) -> bool:
    return bool(member) and member.isascii() and member.isprintable() and " " not in member


def token(add: bool, member: str, pos: int | None = None) -> bytes:
    # Ids are validated at the edge already; this is the last line of defence, and cheap.
    if not _safe(member) or "#" in member:
        raise UnsafeMember(f"unsafe list member {member[:70]!r}")
    head = (b"+" if add else b"-") + member.encode("ascii")
    return head + b" " if pos is None else b"%s#%x " % (head, pos)


def encode(ops: Iterable[Change]) -> bytes:
    """Tokens for these changes."""
    return b"".join(token(add, member, pos) for add, member, pos in ops)


def edge_tokens(changes: Sequence[EdgeChange]) -> dict[ListRef, bytes]:
    """Each change's token on its followee's follower list and on its follower's following list:
    what a graph batch appends. By the native core where it runs, which hands any input outside
    the plain form (an id ``token`` refuses, a position that is not an ``int`` in 0..2**64) back to
    ``edge_tokens_reference``, so results and errors are the reference's."""
    if core is not None and isinstance(changes, list):
        native = core.edge_tokens(
            changes, EdgeChange, ListRef, ListKind.FOLLOWERS, ListKind.FOLLOWING
        )
        if native is not None:
            return native
    return edge_tokens_reference(changes)


def edge_tokens_reference(changes: Iterable[EdgeChange]) -> dict[ListRef, bytes]:
    """``edge_tokens`` in Python: follower lists first, each kind's lists in the order their users
    first appear, each list's tokens in the changes' order (``encode`` of them)."""
    followers: dict[str, list[Change]] = defaultdict(list)
    following: dict[str, list[Change]] = defaultdict(list)
    for change in changes:
        followers[change.followee].append(Change(change.active, change.follower, change.pos))
        following[change.follower].append(Change(change.active, change.followee, change.pos))
    tokens = {ListRef(ListKind.FOLLOWERS, user): encode(ops) for user, ops in followers.items()}
    tokens.update(
        {ListRef(ListKind.FOLLOWING, user): encode(ops) for user, ops in following.items()}
    )
    return tokens


def encode_members(members: Sequence[str], positions: Sequence[int] | None = None) -> bytes:
    """A list holding exactly ``members`` (a rebuild writes a million at a time): ``encode`` of
    additions at their positions, with the same guard applied to all members at once."""
    if not members:
        return b""
    joined = " ".join(members)
    if not (
        joined.isascii()
        and joined.isprintable()
        and joined.count(" ") == len(members) - 1
        and "" not in members
        and "#" not in joined
    ):
        unsafe = next(m for m in members if not _safe(m) or "#" in m)
        raise UnsafeMember(f"unsafe list member {unsafe[:70]!r}")
    if positions is None:
        return ("+" + joined.replace(" ", " +") + " ").encode("ascii")
    return ("+" + " +".join(map("{}#{:x}".format, members, positions)) + " ").encode("ascii")


def split_tokens(data: bytes, limit: int) -> list[bytes]:
    """``data`` cut at token boundaries into pieces of at most ``limit`` bytes (one piece if it
    fits); never an empty piece unless ``data`` is empty."""
    pieces: list[bytes] = []
    start = 0
    while len(data) - start > limit:
        cut = data.rfind(b" ", start, start + limit) + 1
        if cut <= start:  # one token longer than the limit: cannot happen with valid ids
            raise ValueError("limit smaller than one token")
        pieces.append(data[start:cut])
        start = cut
    pieces.append(data[start:])
    return pieces


class MemberSet(Protocol):
    """A list's members as a read answers them: each once, in no promised order. The
    reference's is a ``frozenset`` of ``str``; the native core's is ``Members`` (one buffer for
    all members: a ``str`` is made only for a member taken one by one, and a ``frozenset`` on
    the first membership test, then kept), so that a fan-out passes a million followers on to
    chunk tasks and timeline keys without a Python object per follower."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[str]: ...

    def __contains__(self, member: object, /) -> bool: ...


def in_sequence(members: MemberSet) -> Sequence[str]:
    """The members as a sequence to cut into parts and pass on: ``Members`` in decode order as
    a ``MemberList`` (no ``str`` per member), any other set as a list."""
    if core is not None and isinstance(members, core.Members):
        return members.in_order()
    return list(members)


def frozen(members: MemberSet) -> frozenset[str]:
    """The members as a ``frozenset``, for set algebra: a ``frozenset`` itself, ``Members``'
    own (built on first use, then kept with them), any other set copied."""
    if isinstance(members, frozenset):
        return members
    if core is not None and isinstance(members, core.Members):
        return members.frozen()
    return frozenset(members)


@dataclass(frozen=True, slots=True, eq=False)
class DecodedList:
    members: MemberSet
    tokens: int

    def __eq__(self, other: object) -> bool:
        """The same members (as sets: ``Members`` keep the order they were decoded in, a
        ``frozenset`` none) and the same number of tokens."""
        if not isinstance(other, DecodedList):
            return NotImplemented
        return self.tokens == other.tokens and frozen(self.members) == frozen(other.members)

    @property
    def dead(self) -> int:
        """Tokens that do not contribute a member (removals and superseded tokens)."""
        return self.tokens - len(self.members)


def decode(chunks: Iterable[bytes]) -> DecodedList:
    """The members of a list from its shards, in order (the hot path of every list read): by the
    native core where it runs (timeline_fanout/native_core.py), which hands back to
    ``decode_reference`` any list it does not decide itself, so results and errors are the
    reference's."""
    return _decoded(chunks, ids=False)


def decode_ids(chunks: Iterable[bytes]) -> DecodedList:
    """``decode`` for a follower or following list, whose members are user ids: a member that
    is not one (well formed as a token, but not written by our writers) makes the list corrupt,
    so that it is dropped and rebuilt like any other corrupt list, never handed to a reader or
    to a fan-out (where building its timeline key fails the batch). The core checks each member
    as it decodes, without a ``str`` per member."""
    return _decoded(chunks, ids=True)


def _decoded(chunks: Iterable[bytes], ids: bool) -> DecodedList:
    if core is None:
        return decode_reference(chunks, ids)
    shards = chunks if isinstance(chunks, list) else list(chunks)
    _check_ends(shards)
    try:
        native = core.decode_list(shards, ids)
    except ValueError as exc:  # the reference's reason, word for word
        raise CorruptList(str(exc)) from None
    return decode_reference(shards, ids) if native is None else DecodedList(*native)


def decode_reference(chunks: Iterable[bytes], ids: bool = False) -> DecodedList:
    """``decode`` in Python (``decode_ids`` with ``ids``): the meaning of a list, wherever the
    native core is not built."""
    decoded = _decoded_reference(chunks)
    if ids and not all_valid_ids(decoded.members):
        raise CorruptList(NOT_AN_ID)
    return decoded


def _decoded_reference(chunks: Iterable[bytes]) -> DecodedList:
    shards = chunks if isinstance(chunks, list) else list(chunks)
    _check_ends(shards)
    data = b" ".join(shards)
    toks = data.split()
    if _only_additions(data, len(toks)):
        # Add-only (a compacted list, a timeline), the common case: C speed all the way.
        bare = _POSITIONS.sub(b" ", data) if b"#" in data else data
        if b"#" in bare:  # a position that is not lower-case hex: not ours
            raise CorruptList("bad position in a list")
        try:
            members = frozenset(bare.replace(b"+", b"").decode("ascii").split())
        except UnicodeDecodeError:
            raise CorruptList("non-ASCII bytes in a list") from None
        return DecodedList(members, len(toks))
    return DecodedList(frozenset(_winners(toks)), len(toks))


def _check_ends(shards: Sequence[bytes]) -> None:
    """Every token a writer appends ends with its space, so a shard that does not (a token cut
    short, or bytes no writer wrote) is corrupt, whichever path would decode it: the last token
    would otherwise count as a member."""
    for shard in shards:
        if shard and shard[-1:] != b" ":
            raise CorruptList("a shard that does not end with a token's space")


def additions(data: bytes) -> list[str] | None:
    """The members of an add-only list without positions (a timeline item), in token order,
    duplicates kept: what ``decode`` makes a set of, without building the set or splitting twice
    (a timeline read sorts these strings, and a list in item order is nearly sorted already).
    None when the data is anything else (positions, removals, bytes that are not ASCII): the
    caller decodes it in full. Like ``decode``, it does not look inside members for bytes
    ``token`` refuses to write (that would cost more than the split)."""
    if not data:
        return []
    if not (data.startswith(b"+") and data.endswith(b" ")) or b"#" in data:
        return None
    try:
        members = data[1:-1].decode("ascii").split(" +")
    except UnicodeDecodeError:
        return None
    # As many pieces as spaces and as pluses: every space ends a token and is followed by the
    # next one's "+", and there is no other "+" (so no token is a removal, and no member holds
    # a delimiter). Single-byte counts: far cheaper than counting " +" or looking for " -".
    return members if data.count(b" ") == len(members) == data.count(b"+") else None


def _only_additions(data: bytes, tokens: int) -> bool:
    """Every token starts with ``+`` and holds no other ``+`` (ids cannot contain one), and
    no token starts with ``-`` (ids may contain ``-``, but never after a space)."""
    starts = data.startswith(b"+") + data.count(b" +")
    return starts == tokens == data.count(b"+") and not data.startswith(b"-") and b" -" not in data


def parse_token(tok: bytes) -> Token:
    return _tuple(Token, _fields(tok))


def _fields(tok: bytes) -> tuple[bytes, int, bool]:
    """``Token``'s fields as a plain tuple: ``decode`` runs this over every token of a list
    with removals, where building a ``Token`` per token would cost it 40% more."""
    op = tok[0]
    if op not in (PLUS, MINUS):
        raise CorruptList(f"bad token {tok[:70]!r}")
    member, sep, pos = tok[1:].partition(b"#")
    try:
        return member, int(pos, 16) if sep else 0, op == PLUS
    except ValueError:
        raise CorruptList(f"bad token {tok[:70]!r}") from None


def _winners(toks: Iterable[bytes]) -> list[str]:
    """The general case: per member the greatest position wins; a removal wins a tie."""
    best: dict[bytes, tuple[int, bool]] = {}  # member -> the deciding token's pos, add
    for member, pos, add in map(_fields, toks):
        seen = best.get(member)
        if seen is None or pos > seen[0] or (pos == seen[0] and not add):
            best[member] = (pos, add)
    try:
        return [m.decode("ascii") for m, (_, add) in best.items() if add]
    except UnicodeDecodeError:
        raise CorruptList("non-ASCII bytes in a list") from None


def compact_shards(shards: Sequence[bytes], cap: int | None = None) -> list[bytes]:
    """Rewrite each shard keeping only the tokens that still decide membership.

    Per member the deciding token is the one with the greatest position (see ``decode``). A
    winning addition is kept where it is (one copy); every other token is dropped, except a
    winning removal that still has tokens of its member in a *later* shard. Shards are rewritten
    one by one with CAS, in order, and the rewrite stops at the first lost race, so the output
    for shard ``k`` may assume shards ``< k`` were rewritten, never that shards ``> k`` were:
    dropping a removal whose superseded addition sits in a later, not yet rewritten shard would
    bring that member back. With a ``cap`` (timelines: byte order is time order), only the
    ``cap`` greatest members survive; dropping a member's only token is the same as removing it.
    """
    parsed = [[parse_token(tok) for tok in chunk.split()] for chunk in shards]
    raw = [chunk.split() for chunk in shards]
    best: dict[bytes, tuple[int, bool, int, int]] = {}  # member -> pos, add, shard, index
    last_shard: dict[bytes, int] = {}
    for si, toks in enumerate(parsed):
        for ti, tok in enumerate(toks):
            last_shard[tok.member] = si
            seen = best.get(tok.member)
            if (
                seen is None
                or tok.pos > seen[0]
                or (tok.pos == seen[0] and not tok.add and seen[1])
            ):
                best[tok.member] = (tok.pos, tok.add, si, ti)
    if cap is not None:
        present = sorted(m for m, (_, add, _, _) in best.items() if add)
        for member in present[: max(len(present) - cap, 0)]:
            best[member] = (best[member][0], False, -1, -1)  # dropped everywhere
    keep: set[tuple[int, int]] = set()
    for member, (_, add, si, ti) in best.items():
        if add or (si >= 0 and last_shard[member] > si):
            keep.add((si, ti))
    out = []
    for si, chunk in enumerate(raw):
        kept = [tok for ti, tok in enumerate(chunk) if (si, ti) in keep]
        out.append(b" ".join(kept) + b" " if kept else b"")
    return out
