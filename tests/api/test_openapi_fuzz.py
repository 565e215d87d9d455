"""Schemathesis, which nobody here wrote, against the OpenAPI document a real ``fanout serve``
serves, run as its own command (``st run``): every operation, schema-valid and schema-invalid
requests, all of its checks (``--checks all``: no 5xx, responses on schema, valid requests
accepted and invalid ones refused, auth honoured), with a token that may read and publish
anything, a bounded number of examples per operation and a fixed seed.

Cursors are generated from their published patterns (a user id; a timeline entry's
``time!author!post_id``), and the API accepts every string those patterns admit, so no check
is excluded. ``FANOUT_FUZZ_EXAMPLES`` sets the examples per operation (default 50: about
20 s here).

The server's access log shows what was sent (serve.log in the test's tmp dir), and
schemathesis's own report is beside it (schemathesis.txt, a JUnit file)."""

from __future__ import annotations

import os
import string
import subprocess
import sys
from pathlib import Path

from bench.support.server import api_server
from tests.api.conftest import SECRET, Graph, hs256
from timeline_fanout.cli.settings import Settings

EXAMPLES = os.environ.get("FANOUT_FUZZ_EXAMPLES", "50")
SCOPES = "fanout:read-all fanout:publish fanout:publish-all"


def test_the_served_api_keeps_to_its_openapi_document(
    settings: Settings, graph: Graph, tmp_path: Path
) -> None:
    # Short ids are what generated ones mostly are: many of them are known users with lists
    # and timelines, so requests reach the reads, not only the unknown user's 404.
    shorts = [c for c in string.ascii_letters + string.digits + "_.:@-" if c != "."]
    graph.follow("alice", *shorts)
    for user in shorts:
        graph.follow(user, "alice", "bob")
    graph.post("alice", "p1")
    graph.post("bob", "p2")
    st = Path(sys.executable).with_name("st")
    # The server's output to a file: a pipe nobody reads fills, and then the server waits.
    log = tmp_path / "serve.log"
    with api_server(settings, "--workers", "1", log=log, FANOUT_API_JWT_SECRET=SECRET) as base:
        done = subprocess.run(
            [
                str(st),
                "run",
                f"{base}/openapi.json",
                "--checks",
                "all",
                "--max-examples",
                EXAMPLES,
                "--seed",
                "1",
                "--header",
                f"Authorization: Bearer {hs256('app', SCOPES)}",
                "--request-timeout",
                "30",
                "--report",
                "junit",
                "--report-dir",
                str(tmp_path),
            ],
            capture_output=True,
            cwd=tmp_path,  # its cache (.schemathesis/) goes there
            timeout=300,
            check=False,
            env=os.environ | {"NO_COLOR": "1", "SCHEMATHESIS_HOOKS": ""},
        )
    out = done.stdout.decode(errors="replace")
    (tmp_path / "schemathesis.txt").write_text(out + done.stderr.decode(errors="replace"))
    assert done.returncode == 0, out[-6000:]
    assert "No issues found" in out or " passed" in out, out[-3000:]
