"""The real ``fanout serve`` process on a free port, spoken to over HTTP; and its refusal to
listen beyond loopback without a token key."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.api.conftest import SECRET, Graph, hs256
from tests.conftest import run_cli, settings_env
from timeline_fanout.cli.settings import Settings
from timeline_fanout_devstack.ports import free_port, listens


def get(url: str, token: str | None = None) -> tuple[int, dict[str, str], Any]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


@contextmanager
def serving(settings: Settings, *args: str, **env: str) -> Iterator[tuple[str, list[bytes]]]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "timeline_fanout", "-v", "serve", "--port", str(port), *args],
        env=settings_env(settings) | env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    output: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if listens(process.pid, port) and get(f"{base}/healthz")[0] == 200:
                    break
            except OSError:
                pass
            assert process.poll() is None, process.stdout.read().decode()  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "fanout serve did not come up"
            time.sleep(0.2)
        yield base, output
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=30)
        output.append(out)


def test_fanout_serve_answers_over_http_and_never_logs_tokens(
    settings: Settings, graph: Graph
) -> None:
    graph.follow("alice", "bob")
    graph.post("bob", "p1")
    token, other = hs256("alice"), hs256("mallory")
    with serving(settings, "--workers", "2", FANOUT_API_JWT_SECRET=SECRET) as (base, output):
        status, _, body = get(f"{base}/v1/timelines/alice", token)
        assert status == 200 and [p["post_id"] for p in body["posts"]] == ["p1"]
        status, headers, body = get(f"{base}/v1/timelines/alice", other)
        assert status == 403 and headers["content-type"] == "application/problem+json"
        assert get(f"{base}/v1/timelines/alice")[0] == 401
        assert get(f"{base}/readyz")[0] == 200
    logged = b"".join(output).decode()
    assert "GET /v1/timelines/alice HTTP/1.1" in logged  # the access log is on (-v)...
    assert token not in logged and other not in logged  # ...and holds no token
    assert SECRET not in logged


def test_serve_refuses_a_public_address_without_auth(settings: Settings) -> None:
    done = run_cli(settings, "serve", "--host", "0.0.0.0", "--port", str(free_port()), timeout=30)
    assert done.returncode == 2
    message = done.stderr.decode()
    assert "FANOUT_API_JWT_SECRET" in message and "FANOUT_API_JWT_PUBLIC_KEY" in message


@pytest.mark.parametrize("secret", [" ", "x", "short-but-not-32-bytes"])
def test_serve_refuses_to_start_with_a_short_hs256_secret(settings: Settings, secret: str) -> None:
    """A one-byte or blank secret does not count as authentication, on any address."""
    for host in ("0.0.0.0", "127.0.0.1"):
        done = run_cli(
            settings,
            "serve",
            "--host",
            host,
            "--port",
            str(free_port()),
            timeout=30,
            env={"FANOUT_API_JWT_SECRET": secret},
        )
        assert done.returncode == 2, done.stderr
        message = " ".join(done.stderr.decode().split())
        assert "FANOUT_API_JWT_SECRET must be at least 32 bytes" in message
        assert f"'{secret}'" not in message  # the refused secret is not repeated
