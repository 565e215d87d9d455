"""Cursors for follower and following pages: the last member shown, base64url-encoded so that
clients treat it as opaque (its form may change; the timeline's names an entry instead, see
graph/timelines/reader.py). Decoding checks it is a user id, so a forged cursor is a 400, never a
query with arbitrary text."""

from __future__ import annotations

import base64
import binascii

from schemas import is_valid_id


class BadMemberCursor(ValueError):
    pass


def encode(member: str) -> str:
    return base64.urlsafe_b64encode(member.encode("ascii")).rstrip(b"=").decode()


def decode(cursor: str) -> str:
    try:
        member = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BadMemberCursor(cursor) from None
    if not is_valid_id(member) or encode(member) != cursor:
        raise BadMemberCursor(cursor)
    return member
