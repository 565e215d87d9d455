"""uvicorn's httptools protocol with bounds on a request's head (request line and headers).

uvicorn bounds nothing here: httptools joins the pieces of a header as they arrive, so a client
could send a header of any size (each piece appended to the last, on the event loop) or any
number of headers, and hold a connection open forever by sending a head slowly. This protocol
answers, and closes the connection:

- 431 once a head exceeds ``max_bytes``, counted as the bytes arrive, before it is complete:
  each read is parsed in slices of ``SLICE`` bytes, so at most one slice past the limit is ever
  parsed (a slice that ends one request and starts the next is not counted against the next),
  and the head's request target and fields are counted as parsed, which holds the slice that
  completes a head to the limit too. With answers to earlier pipelined requests still owed,
  the refusal waits until they are sent (sent at once, it would be read as the first of them)
  and nothing more of the connection is parsed meanwhile;
- 414 when the request target (path and query) is over ``MAX_TARGET`` bytes or has more than
  ``MAX_QUERY_FIELDS`` query fields: no route takes more than a few, and Starlette's query
  parsing costs microseconds per field on the event loop;
- 431 when a head has more than ``max_count`` headers, before the app sees the request;
- 408 when a head that has begun is not complete within ``timeout_s``, and the connection
  closed, without an answer, when a new connection sends nothing for that long (a client
  holding silent connections would otherwise use up ``limit_concurrency``). The timer decides
  one poll of the sockets after it fires: uvloop runs due timers before it reads, so after the
  loop was held up (a loaded machine) a head that had arrived in time would otherwise be taken
  for a late one; uvicorn's keep-alive timer is deferred the same way;
- the connection closed when a body is not all received within ``body_timeout_s`` of its
  head (a route that reads its body answers 408 itself first, api/body.py; this catches a
  body trickled to a route that answered without reading it, which would otherwise hold the
  connection as long as the client kept sending);
- the connection closed when a chunked body's framing passes ``max_bytes`` beyond what its
  chunks' size lines need (``CHUNK_LINE`` bytes each): chunk extensions and trailer fields are
  a head by another name, and httptools joins a trailer field's pieces as it joins a header's;
- the connection closed when a chunked body has more than ``MAX_CHUNKS`` chunks: each chunk
  costs Python callbacks, so one-byte chunks made a body's cost its length times theirs (a body
  still arriving after its request was answered is parsed on, so the connection can carry the
  next request: this bounds it too);
- the connection closed when a client has more than ``MAX_PIPELINED`` requests waiting behind
  the one being answered (uvicorn queues every pipelined request it parses, and resumes reading
  after each answer, so a client that sends and never reads grew the queue without bound).
  Every request of the connection not yet answered is marked disconnected first, the one being
  answered included (uvicorn marks only the last parsed), so its answer is dropped, not written
  to a closed transport.

Between requests the connection is uvicorn's: idle keep-alive connections close after
``timeout_keep_alive``. What a body may hold is the app's to bound (api/body.py).

Built on uvicorn's own protocol class (``HttpToolsProtocol``), whose ``data_received`` this
replaces with the same steps plus the bounds; the private steps are reached through
api/uvicorn_private.py, the one place that names them. tests/api/test_serve.py drives a real
``fanout serve`` through each limit.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httptools

from timeline_fanout.api.uvicorn_private import UvicornHttpTools


@dataclass(frozen=True, slots=True)
class HeadLimits:
    max_bytes: int
    max_count: int
    timeout_s: float
    body_timeout_s: float


class HeadRefused(Exception):
    """Raised inside a parser callback to stop parsing; answered with ``status``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class ConnectionDropped(Exception):
    """Raised inside a parser callback to stop parsing; the connection is closed unanswered
    (answers to earlier requests may still be owed, so none can be sent in their place)."""


# Bytes a chunk's framing needs without extensions: up to 16 hex digits, CRLF after the size
# and CRLF after the data.
CHUNK_LINE = 20
# Requests one connection may have parsed and waiting behind the one being answered. Browsers
# and HTTP clients in common use do not pipeline at all.
MAX_PIPELINED = 32
# What one parse step takes of a read (a read can be 256 KiB): the head limit's overshoot.
SLICE = 8192
# Chunks per body: a 32 MiB body in chunks of 4 KiB on average; an app streaming one event per
# chunk sends at most 1,000.
MAX_CHUNKS = 8192
# Request target: the longest a route needs is a path of two ids and a cursor, well under this.
MAX_TARGET = 2048
MAX_QUERY_FIELDS = 16
# How much later a timer that fired decides: past the next poll of the sockets.
POLL_GRACE_S = 0.05

STATUS_LINES = {
    408: b"HTTP/1.1 408 Request Timeout\r\n",
    414: b"HTTP/1.1 414 URI Too Long\r\n",
    431: b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
}


class BoundedHttpTools(UvicornHttpTools):
    def __init__(self, *args: Any, limits: HeadLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self._in_head = True  # a head may be arriving: at the start and after each message
        self._head_bytes = 0
        self._header_count = 0
        self._ended_in_read = False  # a message ended within the read being parsed
        self._body_in_read = 0  # body bytes the parser delivered from the read being parsed
        self._framing = 0  # a body's bytes that were not body (chunk lines, trailer fields)
        self._chunks = 0
        self._target_bytes = 0
        self._parsed_bytes = 0  # the current head's request target and fields, as parsed
        self._refusal: HeadRefused | None = None  # to send once the answers owed are sent
        self._unanswered: list[Any] = []  # request cycles not answered yet, oldest first
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._head_timer = self.loop.call_later(self.limits.timeout_s, self._head_timed_out)

    def data_received(self, data: bytes) -> None:
        self.cancel_keep_alive()
        view = memoryview(data)
        for start in range(0, len(data), SLICE):
            if self._refusal is not None or self.transport.is_closing():
                return  # nothing more is parsed on a connection being refused
            if not self._parse(view[start : start + SLICE].tobytes()):
                return

    def _parse(self, data: bytes) -> bool:
        """One slice; False once the connection is refused, dropped or upgraded."""
        self._ended_in_read = False
        self._body_in_read = 0
        in_body = not self._in_head
        if self._in_head and self._head_timer is None:
            self._head_timer = self.loop.call_later(self.limits.timeout_s, self._head_timed_out)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.take_upgrade()
            return False
        except httptools.HttpParserError as exc:
            if isinstance(exc.__context__, ConnectionDropped):
                self._drop_connection()
                return False
            if isinstance(exc.__context__, HeadRefused):
                self._refuse(exc.__context__)
                return False
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
            return False
        if not self._in_head:
            if in_body and not self._ended_in_read:  # a slice inside one body: count its framing
                self._framing += len(data) - self._body_in_read
                if self._framing > self.limits.max_bytes + CHUNK_LINE * self._chunks:
                    self._drop_connection()
                    return False
            return True
        # Still in a head: count this slice, unless the head began inside it.
        self._head_bytes = 0 if self._ended_in_read else self._head_bytes + len(data)
        if self._head_bytes > self.limits.max_bytes:
            self._refuse(
                HeadRefused(431, f"a request head is at most {self.limits.max_bytes} bytes")
            )
            return False
        return True

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_count = 0
        self._framing = self._chunks = self._target_bytes = self._parsed_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._target_bytes += len(url)
        if self._target_bytes > MAX_TARGET:
            raise HeadRefused(414, f"a request target is at most {MAX_TARGET} bytes")
        self._count_parsed(len(url))
        super().on_url(url)

    def _count_parsed(self, size: int) -> None:
        """The head as parsed so far, so that the slice completing a head is held to the limit
        too (the per-slice count cannot see where in a slice a head ends)."""
        self._parsed_bytes += size
        if self._parsed_bytes > self.limits.max_bytes:
            raise HeadRefused(431, f"a request head is at most {self.limits.max_bytes} bytes")

    def on_chunk_header(self) -> None:
        self._chunks += 1
        if self._chunks > MAX_CHUNKS:
            raise ConnectionDropped(f"a body has at most {MAX_CHUNKS} chunks")

    def on_body(self, body: bytes) -> None:
        self._body_in_read += len(body)
        super().on_body(body)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.max_count:
            raise HeadRefused(431, f"a request has at most {self.limits.max_count} headers")
        self._count_parsed(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._cancel_timers()
        # A second later than the app's own body timeout, so that a route reading its body
        # answers 408 before the connection goes.
        self._body_timer = self.loop.call_later(
            self.limits.body_timeout_s + 1, self._body_timed_out
        )
        if self.url.count(b"&") + self.url.count(b";") >= MAX_QUERY_FIELDS:
            raise HeadRefused(414, f"a query has at most {MAX_QUERY_FIELDS} fields")
        super().on_headers_complete()
        self._unanswered = [c for c in self._unanswered if not c.response_complete]
        self._unanswered.append(self.cycle)
        if len(self.pipeline) > MAX_PIPELINED:
            raise ConnectionDropped(f"more than {MAX_PIPELINED} pipelined requests waiting")

    def on_message_complete(self) -> None:
        self._in_head = True
        self._ended_in_read = True
        self._cancel_timers()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        refusal = self._refusal
        if refusal is not None and all(c.response_complete for c in self._unanswered):
            self._refusal = None
            self._refuse(refusal)

    def timeout_keep_alive_handler(self) -> None:
        """uvicorn's keep-alive timer, deciding one socket poll later (see ``_head_timed_out``):
        a request that arrived while the loop was held up is read, which cancels this."""
        self.timeout_keep_alive_task = self.loop.call_later(
            POLL_GRACE_S, super().timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        self._mark_unanswered_disconnected()
        super().connection_lost(exc)

    def _drop_connection(self) -> None:
        """Closed unanswered; every request not yet answered learns it (see above)."""
        self._mark_unanswered_disconnected()
        self.transport.close()

    def _mark_unanswered_disconnected(self) -> None:
        for cycle in self._unanswered:
            if not cycle.response_complete:
                cycle.disconnected = True

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = None

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def _head_timed_out(self, polled: bool = False) -> None:
        self._head_timer = None
        if not self._in_head or self.transport.is_closing():
            return
        if not polled:  # read what is already there before deciding (see the docstring)
            self._head_timer = self.loop.call_later(POLL_GRACE_S, self._head_timed_out, True)
            return
        if self._head_bytes == 0:  # nothing of a head sent: nobody to answer
            self.transport.close()
            return
        self._refuse(
            HeadRefused(408, f"a request head must arrive within {self.limits.timeout_s} s")
        )

    def _refuse(self, refused: HeadRefused) -> None:
        """Answer and close: the rest of what the client sends is never parsed. With answers
        to earlier pipelined requests still owed, the refusal cannot be sent (the client would
        take it for the first of them): the connection is closed unanswered instead."""
        self._cancel_timers()
        if any(not cycle.response_complete for cycle in self._unanswered):
            self._refusal = refused  # sent once the last owed answer is (on_response_complete)
            return
        body = refused.reason.encode("ascii")
        self.transport.write(
            b"".join(
                [
                    STATUS_LINES[refused.status],
                    b"content-type: text/plain; charset=utf-8\r\n",
                    b"content-length: %d\r\n" % len(body),
                    b"connection: close\r\n\r\n",
                    body,
                ]
            )
        )
        self.transport.close()
