"""Reading a request body with its cost bounded before it is paid: ``POST /v1/events`` only.

Three bounds, each checked as the body arrives, before anything is parsed or built:

- size: at most ``max_bytes`` (413; a ``Content-Length`` above it is refused unread);
- shape: a valid body holds at most ``max_tokens`` JSON tokens (``{``, ``[``, ``,``, ``:`` and
  strings), counted chunk by chunk by ``TokenCounter`` (422 as soon as it is exceeded), so the
  parser is never handed a body that would build millions of objects: a batch of 1000 events
  with at most ``MAX_FIELDS`` fields each cannot have more, whatever its texts hold;
- memory and time: every body being received or still in use (parsed, being published) in
  the process shares ``BodyBudget`` (503 with Retry-After when it is spent), and a body must
  arrive within a timeout (408).

Counting costs one regular-expression scan of each chunk as it arrives (C speed, a few hundred
microseconds for 64 KiB) and Python work per token, of which there are at most ``max_tokens``:
the event loop never spends long on one body, and orjson then parses at most ``max_bytes``
holding at most ``max_tokens`` values.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator

from starlette.requests import Request

from timeline_fanout.api.problems import FieldError, Problem

# Outside a string: the next structural character or the opening quote of a string.
_TOKEN = re.compile(rb'[\[{,:"]')
# Inside a string: its rest, up to the closing quote (group 1) or to the end of the chunk, where
# group 2 says whether the chunk ends between a backslash and the byte it escapes. Unrolled
# (runs of plain bytes, then an escape and its byte): about 3 ns a byte on escape-heavy text.
_STRING_REST = re.compile(rb'[^"\\]*+(?:\\.[^"\\]*+)*+(?:(")|(\\?)\Z)', re.DOTALL)


class TooManyTokens(ValueError):
    pass


class TokenCounter:
    """Counts the JSON tokens of a body fed in chunks, across chunk boundaries (a string or an
    escape may span two), and raises ``TooManyTokens`` past ``limit``. It does not validate
    JSON (the parser does, afterwards); it only sees what any JSON text would be made of."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.tokens = 0
        self._in_string = False
        self._escaped = False  # the last chunk ended between a backslash and what it escapes

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        i = 0
        if self._escaped:
            i, self._escaped = 1, False
        end = len(chunk)
        while i < end:
            if self._in_string:
                rest = _STRING_REST.match(chunk, i)
                assert rest is not None  # the pattern matches at any position
                if rest.group(1) is None:  # the string goes on in the next chunk
                    self._escaped = rest.group(2) == b"\\"
                    return
                self._in_string = False
                i = rest.end()
                continue
            found = _TOKEN.search(chunk, i)
            if found is None:
                return
            self.tokens += 1
            if self.tokens > self.limit:
                raise TooManyTokens(self.tokens)
            self._in_string = found.group() == b'"'
            i = found.end()


class BodyBudget:
    """Bytes of request bodies held by this process's requests, at most ``limit``. Only
    touched on the event loop, so no lock."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, size: int, retry_after_s: int) -> None:
        if self.held + size > self.limit:
            raise Problem(
                503,
                "busy",
                "Service busy",
                "too many request bodies are being received; retry later",
                headers={"Retry-After": str(retry_after_s)},
            )
        self.held += size

    def give_back(self, size: int) -> None:
        self.held -= size


@contextlib.asynccontextmanager
async def json_body(
    request: Request,
    *,
    max_bytes: int,
    max_tokens: int,
    budget: BodyBudget,
    timeout_s: float,
    retry_after_s: int,
) -> AsyncIterator[bytes]:
    """The whole body of a JSON request, held against ``budget`` from its first byte until
    the block ends (what the route builds from it, a publish waiting on the broker included,
    lives as long), or the problem of the first bound it breaks. Such a problem closes the
    connection once sent (``Connection: close``): the rest of the body is never read, and a
    client still sending it would otherwise wait on a connection the server no longer reads."""
    held = [0]
    try:
        yield await _read(request, max_bytes, max_tokens, budget, timeout_s, retry_after_s, held)
    except Problem as problem:
        problem.headers = {**problem.headers, "Connection": "close"}
        raise
    finally:
        budget.give_back(held[0])


async def _read(
    request: Request,
    max_bytes: int,
    max_tokens: int,
    budget: BodyBudget,
    timeout_s: float,
    retry_after_s: int,
    held: list[int],
) -> bytes:
    """``held[0]``: the bytes taken from ``budget`` so far, for the caller to give back."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        raise Problem(
            415,
            "unsupported-media-type",
            "Unsupported media type",
            "send the events as application/json",
        )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_large(max_bytes)
    counter = TokenCounter(max_tokens)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                if size + len(chunk) > max_bytes:
                    raise too_large(max_bytes)
                budget.take(len(chunk), retry_after_s)
                held[0] += len(chunk)
                size += len(chunk)
                counter.feed(chunk)
                chunks.append(chunk)
    except TimeoutError:
        raise Problem(
            408, "timeout", "Request timeout", f"the body did not arrive within {timeout_s} s"
        ) from None
    except TooManyTokens:
        rule = f"at most {max_tokens} JSON tokens (an array of valid events has no more)"
        raise Problem(
            422, "invalid-events", "Invalid events", f"must be {rule}", [FieldError("", rule)]
        ) from None
    return b"".join(chunks)


def too_large(max_bytes: int) -> Problem:
    return Problem(413, "too-large", "Content too large", f"a body is at most {max_bytes} bytes")
