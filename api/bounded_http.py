"""uvicorn's httptools protocol with bounds on a request's head (request line and headers).

uvicorn bounds nothing here: httptools joins the pieces of a header as they arrive, so a client
could send a header of any size (each piece appended to the last, on the event loop) or any
number of headers, and hold a connection open forever by sending a head slowly. This protocol
answers, and closes the connection:

- 431 once a head exceeds ``max_bytes``, counted as the bytes arrive, before it is complete
  (at most one read past the limit is buffered: a read that ends one request and starts the
  next is not counted against the next);
- 431 when a head has more than ``max_count`` headers, before the app sees the request;
- 408 when a head that has begun is not complete within ``timeout_s``, and the connection
  closed, without an answer, when a new connection sends nothing for that long (a client
  holding silent connections would otherwise use up ``limit_concurrency``);
- the connection closed when a body is not all received within ``body_timeout_s`` of its
  head (a route that reads its body answers 408 itself first, api/body.py; this catches a
  body trickled to a route that answered without reading it, which would otherwise hold the
  connection as long as the client kept sending);
- the connection closed when a chunked body's framing passes ``max_bytes`` beyond what its
  chunks' size lines need (``CHUNK_LINE`` bytes each): chunk extensions and trailer fields are
  a head by another name, and httptools joins a trailer field's pieces as it joins a header's;
- the connection closed when a client has more than ``MAX_PIPELINED`` requests waiting behind
  the one being answered (uvicorn queues every pipelined request it parses, and resumes reading
  after each answer, so a client that sends and never reads grew the queue without bound).

Between requests the connection is uvicorn's: idle keep-alive connections close after
``timeout_keep_alive``. What a body may hold is the app's to bound (api/body.py).

Built on uvicorn's own protocol class (``HttpToolsProtocol``), whose ``data_received`` this
replaces with the same steps plus the bounds; tests/api/test_serve.py drives a real ``fanout
serve`` through each limit.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


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

STATUS_LINES = {
    408: b"HTTP/1.1 408 Request Timeout\r\n",
    431: b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
}


class BoundedHttpTools(HttpToolsProtocol):
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
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._head_timer = self.loop.call_later(self.limits.timeout_s, self._head_timed_out)

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        self._ended_in_read = False
        self._body_in_read = 0
        in_body = not self._in_head
        if self._in_head and self._head_timer is None:
            self._head_timer = self.loop.call_later(self.limits.timeout_s, self._head_timed_out)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError as exc:
            if isinstance(exc.__context__, ConnectionDropped):
                self.transport.close()
                return
            if isinstance(exc.__context__, HeadRefused):
                self._refuse(exc.__context__)
                return
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
            return
        if not self._in_head:
            if in_body and not self._ended_in_read:  # a read inside one body: count its framing
                self._framing += len(data) - self._body_in_read
                if self._framing > self.limits.max_bytes + CHUNK_LINE * self._chunks:
                    self.transport.close()
            return
        # Still in a head: count this read, unless the head began inside it.
        self._head_bytes = 0 if self._ended_in_read else self._head_bytes + len(data)
        if self._head_bytes > self.limits.max_bytes:
            self._refuse(
                HeadRefused(431, f"a request head is at most {self.limits.max_bytes} bytes")
            )

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_count = 0
        self._framing = self._chunks = 0

    def on_chunk_header(self) -> None:
        self._chunks += 1

    def on_body(self, body: bytes) -> None:
        self._body_in_read += len(body)
        super().on_body(body)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.max_count:
            raise HeadRefused(431, f"a request has at most {self.limits.max_count} headers")
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
        super().on_headers_complete()
        if len(self.pipeline) > MAX_PIPELINED:
            raise ConnectionDropped(f"more than {MAX_PIPELINED} pipelined requests waiting")

    def on_message_complete(self) -> None:
        self._in_head = True
        self._ended_in_read = True
        self._cancel_timers()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = None

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._in_head or self.transport.is_closing():
            return
        if self._head_bytes == 0:  # nothing of a head sent: nobody to answer
            self.transport.close()
            return
        self._refuse(
            HeadRefused(408, f"a request head must arrive within {self.limits.timeout_s} s")
        )

    def _refuse(self, refused: HeadRefused) -> None:
        """Answer and close: the rest of what the client sends is never parsed."""
        self._cancel_timers()
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
