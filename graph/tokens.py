"""The append-only set encoding from the seeds: ``+id `` adds, ``-id `` removes, last one wins.

Tokens are space-terminated, so an id may itself contain ``-`` (``+a-b `` is the member ``a-b``)
and ids can never carry a delimiter because the id alphabet has no whitespace. Decoding is the hot
path of every list read: one ``bytes.split`` per shard and a dict write per token.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

PLUS = 0x2B
MINUS = 0x2D


class CorruptList(ValueError):
    """A shard holds something that is not a token: the list must be rebuilt, not guessed at."""


class UnsafeMember(ValueError):
    """A member that could carry a delimiter: refused, so no input can inject tokens."""


def token(add: bool, member: str) -> bytes:
    # Ids are validated at the edge already; this is the last line of defence, and cheap.
    if not (member and member.isascii() and member.isprintable() and " " not in member):
        raise UnsafeMember(f"unsafe list member {member[:70]!r}")
    return (b"+" if add else b"-") + member.encode("ascii") + b" "


def encode(ops: Iterable[tuple[bool, str]]) -> bytes:
    return b"".join(token(add, member) for add, member in ops)


def encode_members(members: Sequence[str]) -> bytes:
    """A list holding exactly ``members`` (a rebuild writes a million at a time): ``encode`` of
    additions, with the same guard applied to all members at once, at C speed."""
    if not members:
        return b""
    joined = " ".join(members)
    if not (
        joined.isascii()
        and joined.isprintable()
        and joined.count(" ") == len(members) - 1
        and "" not in members
    ):
        unsafe = next(
            m for m in members if not (m and m.isascii() and m.isprintable() and " " not in m)
        )
        raise UnsafeMember(f"unsafe list member {unsafe[:70]!r}")
    return ("+" + joined.replace(" ", " +") + " ").encode("ascii")


@dataclass(frozen=True, slots=True)
class DecodedList:
    members: frozenset[str]
    tokens: int

    @property
    def dead(self) -> int:
        """Tokens that do not contribute a member (removals and superseded additions)."""
        return self.tokens - len(self.members)


def decode(chunks: Iterable[bytes]) -> DecodedList:
    data = b" ".join(chunks)
    toks = data.split()
    if _only_additions(data, len(toks)):
        # A compacted or add-only list, the common case: C-speed all the way.
        try:
            members = frozenset(data.replace(b"+", b"").decode("ascii").split())
        except UnicodeDecodeError:
            raise CorruptList("non-ASCII bytes in a list") from None
        return DecodedList(members, len(toks))
    return _replay(toks)


def _only_additions(data: bytes, tokens: int) -> bool:
    """Every token starts with ``+`` and holds no other ``+`` (ids cannot contain one), and
    no token starts with ``-`` (ids may contain ``-``, but never after a space)."""
    starts = data.startswith(b"+") + data.count(b" +")
    return starts == tokens == data.count(b"+") and not data.startswith(b"-") and b" -" not in data


def _replay(toks: list[bytes]) -> DecodedList:
    """The general case: last token per member wins."""
    state: dict[bytes, bool] = {}
    for tok in toks:
        op = tok[0]
        if op == PLUS:
            state[tok[1:]] = True
        elif op == MINUS:
            state[tok[1:]] = False
        else:
            raise CorruptList(f"bad token {tok[:70]!r}")
    try:
        members = frozenset(m.decode("ascii") for m, present in state.items() if present)
    except UnicodeDecodeError:
        raise CorruptList("non-ASCII bytes in a list") from None
    return DecodedList(members, len(toks))


def compact_shards(shards: Sequence[bytes], cap: int | None = None) -> list[bytes]:
    """Rewrite each shard keeping only the tokens that still decide membership.

    A token survives only if it is its member's last token across all shards; a surviving
    removal is dropped too, because every earlier token for that member is dropped with it.
    With a ``cap``, only the ``cap`` greatest members survive (timelines encode members so that
    byte order is time order); dropping a member's only token is the same as removing it.
    Shards are rewritten one by one with CAS in order and the rewrite stops at the first lost
    race, so the output for shard ``k`` may assume shards ``< k`` were rewritten, never that
    shards ``> k`` were: they can only have grown, and growth only supersedes more tokens.
    """
    parsed = [chunk.split() for chunk in shards]
    last: dict[bytes, tuple[int, int]] = {}
    for si, toks in enumerate(parsed):
        for ti, tok in enumerate(toks):
            if tok[0] not in (PLUS, MINUS):
                raise CorruptList(f"bad token {tok[:70]!r}")
            last[tok[1:]] = (si, ti)
    if cap is not None:
        present = sorted(m for m, (si, ti) in last.items() if parsed[si][ti][0] == PLUS)
        for member in present[: max(len(present) - cap, 0)]:
            del last[member]
    out = []
    for si, toks in enumerate(parsed):
        keep = [
            tok for ti, tok in enumerate(toks) if tok[0] == PLUS and last.get(tok[1:]) == (si, ti)
        ]
        out.append(b" ".join(keep) + b" " if keep else b"")
    return out
