"""A real ``fanout serve`` against clients that misbehave on purpose, over raw sockets: heads too
large, too many or too slow; bodies too shaped, too slow or too many at once; clients that go
away mid-body; more connections than the server takes. Each is answered (or cut off) without
the server spending more than its limits, and the server goes on answering others."""

from __future__ import annotations

import contextlib
import re
import socket
import time
import urllib.request
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from tests.api.test_serve import get, serving
from timeline_fanout.cli.settings import Settings

LIMITS = {
    "FANOUT_API_MAX_HEADER_BYTES": "8192",
    "FANOUT_API_MAX_HEADERS": "32",
    "FANOUT_API_HEADER_TIMEOUT_S": "1",
    "FANOUT_API_BODY_TIMEOUT_S": "1",
    "FANOUT_API_BODY_BUDGET_MB": "32",
}


@pytest.fixture
def served(settings: Settings) -> Iterator[tuple[str, int, list[bytes]]]:
    """The server's log is printed once it has stopped: pytest shows it for a failed test."""
    with serving(settings, **LIMITS) as (base, output):
        host, port = base.removeprefix("http://").split(":")
        yield host, int(port), output
    print(b"".join(output).decode(errors="replace")[-20_000:])


def connect(host: str, port: int) -> socket.socket:
    return socket.create_connection((host, port), timeout=15)


def answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or 15 s pass: a failure)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return received


def send_all(sock: socket.socket, data: bytes) -> int:
    """Sends ``data`` in 64 KiB pieces until the server closes; returns the bytes it took."""
    sent = 0
    try:
        for start in range(0, len(data), 65536):
            sent += sock.send(data[start : start + 65536])
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


class Responses:
    """The responses on one connection, in order. Bytes received past one response belong to
    the next: pipelined answers often arrive in one read."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def next(self) -> bytes:
        """One response, head and body (``Content-Length``), on a connection that stays open."""
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += received_more(self.sock)
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        length = int(re.search(rb"content-length: (\d+)", head.lower()).group(1))  # type: ignore[union-attr]
        while len(rest) < length:
            rest += received_more(self.sock)
        self.buffer = rest[length:]
        return head + b"\r\n\r\n" + rest[:length]


def response_to(sock: socket.socket) -> bytes:
    """The one response the connection is owed next."""
    return Responses(sock).next()


def received_more(sock: socket.socket) -> bytes:
    chunk = sock.recv(65536)
    assert chunk, "the server closed the connection mid-response"
    return chunk


def status_of(response: bytes) -> int:
    found = re.match(rb"HTTP/1\.1 (\d{3}) ", response)
    assert found, response[:200]
    return int(found.group(1))


def test_a_head_over_the_size_limit_is_refused_before_it_is_all_read(
    served: tuple[str, int, list[bytes]],
) -> None:
    host, port, _ = served
    sock = connect(host, port)
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (8 << 20)
    taken = send_all(sock, head)
    response = answer(sock)
    assert status_of(response) == 431
    assert taken < len(head)  # cut off: the rest of the 8 MiB was never taken
    assert get(f"http://{host}:{port}/healthz")[0] == 200


def test_more_headers_than_the_limit_are_refused_before_the_app_runs(
    served: tuple[str, int, list[bytes]],
) -> None:
    host, port, _ = served
    sock = connect(host, port)
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(33))
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
    assert status_of(answer(sock)) == 431
    sock = connect(host, port)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + many[-300:] + b"\r\n")
    assert status_of(sock.recv(65536)) == 200  # fewer is fine


def test_a_head_that_does_not_arrive_in_time_is_closed(
    served: tuple[str, int, list[bytes]],
) -> None:
    host, port, _ = served
    sock = connect(host, port)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    started = time.monotonic()
    for _ in range(3):  # a byte now and then keeps no connection open
        sock.sendall(b"X")
        time.sleep(0.3)
    assert status_of(answer(sock)) == 408
    assert time.monotonic() - started < 10


def test_a_body_is_counted_before_it_is_parsed_and_refused_as_soon_as_it_cannot_be_valid(
    served: tuple[str, int, list[bytes]],
) -> None:
    """31 MiB of ``[{},{},...]`` declared, 1 MiB sent: the answer comes without the rest."""
    host, port, _ = served
    sock = connect(host, port)
    declared = 31 << 20
    sock.sendall(
        b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n[" % declared
    )
    sock.sendall(b"{}," * (1 << 18))
    response = response_to(sock)
    assert status_of(response) == 422 and b"JSON tokens" in response
    assert b"connection: close" in response.lower()  # the rest is not waited for
    assert answer(sock) == b""  # closed: a client still sending learns it at once


def test_a_body_that_does_not_arrive_in_time_is_a_408(
    served: tuple[str, int, list[bytes]],
) -> None:
    host, port, _ = served
    sock = connect(host, port)
    sock.sendall(
        b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 1000\r\n\r\n[{"type":'
    )
    assert status_of(sock.recv(65536)) == 408


def test_bodies_held_at_once_are_bounded_per_process(settings: Settings) -> None:
    """Two 20 MiB bodies on their way at once, with a 32 MiB budget: once the server holds the
    first (its gauge says so), the second is refused. The body timer (30 s here) ends neither."""
    with serving(settings, **{**LIMITS, "FANOUT_API_BODY_TIMEOUT_S": "30"}) as (base, _):
        host, port = base.removeprefix("http://").split(":")
        prefix = b'[{"type":"post","author":"u","post_id":"p","text":"'
        head = (
            b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (30 << 20)
        )
        first = connect(host, int(port))
        first.sendall(head + prefix + b"a" * (20 << 20))
        held = len(prefix) + (20 << 20)
        deadline = time.monotonic() + 15
        while body_bytes_held(host, int(port)) < held:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        # Just one byte past the budget: the server reads it all before refusing, so closing
        # leaves nothing unread (which would reset the connection and lose the answer).
        over = (32 << 20) - held + 1
        second = connect(host, int(port))  # now: an idle connection is closed after 1 s
        second.sendall(head + prefix + b"a" * (over - len(prefix)))
        response = response_to(second)
        assert status_of(response) == 503 and b"retry-after" in response.lower()
        first.close()
        deadline = time.monotonic() + 15
        while body_bytes_held(host, int(port)) > 0:  # given back when the first client left
            assert time.monotonic() < deadline
            time.sleep(0.1)


def body_bytes_held(host: str, port: int) -> float:
    found = re.search(r"^fanout_api_body_bytes_held (\S+)$", metrics(host, port), re.M)
    assert found is not None
    return float(found.group(1))


def test_a_client_gone_mid_body_is_no_server_error(
    served: tuple[str, int, list[bytes]],
) -> None:
    host, port, _ = served
    for _ in range(3):
        sock = connect(host, port)
        sock.sendall(
            b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100000\r\n\r\n[{"type":"follow"'
        )
        sock.close()
    route = 'method="POST",route="/v1/events"'
    deadline = time.monotonic() + 15
    while f'fanout_api_responses_total{{{route},status="499"}} 3.0' not in (
        text := metrics(host, port)
    ):
        assert time.monotonic() < deadline, text
        time.sleep(0.1)
    assert 'status="500"' not in text


def metrics(host: str, port: int) -> str:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def test_connections_beyond_the_limit_are_answered_503(settings: Settings) -> None:
    with serving(settings, FANOUT_API_LIMIT_CONCURRENCY="16") as (base, _):
        host, port = base.removeprefix("http://").split(":")
        idle = [connect(host, int(port)) for _ in range(16)]
        sock = connect(host, int(port))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(sock.recv(65536)) == 503
        for each in idle:
            each.close()


def test_no_redirect_repeats_the_host_header(client: TestClient) -> None:
    for path in ("/v1/timelines/alice/", "/v1/users/alice/followers/", "/healthz/"):
        response = client.get(path, headers={"host": "evil.example"}, follow_redirects=False)
        assert response.status_code == 404, path
        assert "location" not in response.headers and "evil" not in response.text


def test_a_body_trickled_to_a_route_that_does_not_read_it_holds_no_connection(
    served: tuple[str, int, list[bytes]],
) -> None:
    host, port, _ = served
    sock = connect(host, port)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\nx")
    assert status_of(response_to(sock)) == 200  # answered at once, the body unread
    started = time.monotonic()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        while time.monotonic() - started < 10:
            sock.sendall(b"x")  # a byte now and then keeps no connection open
            time.sleep(0.2)
    assert time.monotonic() - started < 10, "the connection was never closed"


def test_no_websocket_upgrade_is_taken(served: tuple[str, int, list[bytes]]) -> None:
    host, port, _ = served
    sock = connect(host, port)
    sock.sendall(
        b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    assert status_of(response_to(sock)) != 101


def test_a_connection_that_sends_nothing_is_closed(served: tuple[str, int, list[bytes]]) -> None:
    host, port, _ = served
    silent = [connect(host, port) for _ in range(20)]
    for sock in silent:
        assert answer(sock) == b""  # closed by the server, unanswered, within the head timeout


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server has closed the connection (EOF or reset), False if it is still
    open when the socket's timeout passes; what it sent before is discarded."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def test_a_chunked_trailer_that_never_ends_closes_the_connection(settings: Settings) -> None:
    """Trailer fields after the last chunk, sent on and on: counted as they arrive, like a head,
    and the connection closed long before the body timer (30 s here) would end it."""
    with serving(settings, **{**LIMITS, "FANOUT_API_BODY_TIMEOUT_S": "30"}) as (base, _):
        host, port = base.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.sendall(
            b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n1\r\n[\r\n0\r\nX-Trailer: "
        )
        send_all(sock, b"a" * (256 << 10))  # the server may close before it took all of it
        assert closed_by_server(sock)
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.sendall(
            b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        send_all(sock, b"1;ext=" + b"e" * (256 << 10) + b"\r\n[\r\n")  # one chunk extension
        assert closed_by_server(sock)
        assert get(f"{base}/healthz")[0] == 200


def test_pipelined_requests_never_read_are_cut_off(served: tuple[str, int, list[bytes]]) -> None:
    """A client that pipelines thousands of requests and reads nothing is closed once more than
    32 wait."""
    host, port, _ = served
    sock = connect(host, port)
    send_all(sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 20_000)
    assert answer(sock).count(b"HTTP/1.1 ") <= 40  # closed: the rest is never answered


def test_pipelined_requests_read_are_all_answered_in_order(
    served: tuple[str, int, list[bytes]],
) -> None:
    """A client that pipelines 20 requests gets 20 answers, in order."""
    host, port, _ = served
    sock = connect(host, port)
    paths = [f"/v1/users/u{i}/followers" for i in range(20)]
    sock.sendall(b"".join(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % p.encode() for p in paths))
    responses = Responses(sock)
    answers = [responses.next() for _ in paths]
    assert [status_of(a) for a in answers] == [404] * 20
    assert [re.search(rb"u\d+", a.partition(b"\r\n\r\n")[2]).group() for a in answers] == [  # type: ignore[union-attr]
        p.split("/")[3].encode() for p in paths
    ]


def test_a_head_completed_in_one_read_is_held_to_the_size_limit(
    served: tuple[str, int, list[bytes]],
) -> None:
    """A head sent in one write (it arrives in one read and completes there) is refused like
    one that trickles in, however little past the limit."""
    host, port, _ = served
    for size in (40_000, 8192 + 6000):  # far past the limit (8 KiB here), and one slice past
        sock = connect(host, port)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * size + b"\r\n\r\n")
        assert status_of(answer(sock)) == 431, size


def test_a_long_or_many_fielded_request_target_is_refused_before_the_app_runs(
    served: tuple[str, int, list[bytes]],
) -> None:
    host, port, _ = served
    for target in (
        b"/v1/users/u1/followers?cursor=" + b"a%" * 1100,
        b"/v1/users/u1/followers?" + b"&".join([b"a%"] * 17),
    ):
        sock = connect(host, port)
        sock.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(answer(sock)) == 414, target[:60]
    sock = connect(host, port)
    sock.sendall(b"GET /v1/users/u1/followers?limit=2&cursor=a HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(response_to(sock)) == 404  # an ordinary query still reaches the route


def test_a_body_of_one_byte_chunks_after_its_answer_is_cut_off_at_the_chunk_limit(
    settings: Settings,
) -> None:
    """A route that answers without reading its body: the body is parsed on (the connection
    may carry another request after it), but a flood of one-byte chunks is closed at 8,192
    chunks, long before the body timer (30 s here) would end it."""
    with serving(settings, **{**LIMITS, "FANOUT_API_BODY_TIMEOUT_S": "30"}) as (base, _):
        host, port = base.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        assert status_of(response_to(sock)) == 200
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for _ in range(2000):
                sock.sendall(b"1\r\nx\r\n" * 500)
        assert closed_by_server(sock)
        assert get(f"{base}/healthz")[0] == 200


def test_a_connection_carries_the_next_request_after_a_body_its_route_did_not_read(
    served: tuple[str, int, list[bytes]],
) -> None:
    """A keep-alive client (an expired token's 401, a 405) sends its next request on the same
    connection once its body is sent: it is answered."""
    host, port, _ = served
    sock = connect(host, port)
    body = b"x" * 100_000
    sock.sendall(b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
    responses = Responses(sock)
    assert status_of(responses.next()) == 405
    sock.sendall(body + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(responses.next()) == 200


def test_a_refusal_never_stands_in_for_an_answer_still_owed(
    served: tuple[str, int, list[bytes]],
) -> None:
    """A request pipelined behind one still being answered is refused (a head over the
    limit): the client gets the first answer, then the refusal, then a closed connection;
    never the refusal read as the first answer."""
    host, port, _ = served
    sock = connect(host, port)
    sock.sendall(
        b"GET /v1/users/u1/followers HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n"
    )
    received = answer(sock)
    assert status_of(received) == 404  # u1's (unknown) list, answered first
    assert received.count(b"HTTP/1.1 ") == 2 and b"HTTP/1.1 431 " in received


def test_a_body_of_more_chunks_than_the_limit_closes_the_connection(settings: Settings) -> None:
    """A route that reads its body: 9,000 one-byte chunks (JSON whitespace, so the body scan
    finds nothing wrong) are cut off at 8,192, long before the body timer (30 s here)."""
    with serving(settings, **{**LIMITS, "FANOUT_API_BODY_TIMEOUT_S": "30"}) as (base, _):
        host, port = base.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.sendall(
            b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + b"1\r\n \r\n" * 9000
        )
        assert closed_by_server(sock)
        assert get(f"{base}/healthz")[0] == 200


def test_pipelined_requests_cut_off_mid_answer_log_no_error(settings: Settings) -> None:
    """Cut off by the pipelining bound while the first request is answered on a thread: its
    answer is dropped quietly, never written to the closed connection (a traceback a client
    could cause at will)."""
    with serving(settings, **LIMITS) as (base, output):
        host, port = base.removeprefix("http://").split(":")
        for _ in range(5):
            sock = socket.create_connection((host, int(port)), timeout=10)
            send_all(sock, b"GET /v1/users/u1/followers HTTP/1.1\r\nHost: x\r\n\r\n" * 40)
            assert closed_by_server(sock)
        assert get(f"{base}/healthz")[0] == 200
    log = b"".join(output)
    assert b"Traceback" not in log and b"Exception in ASGI application" not in log, log[-3000:]
