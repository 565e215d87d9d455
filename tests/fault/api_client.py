"""An app's HTTP client for the fault scenarios, and every user's pages through the API
against the model."""

from __future__ import annotations

import http.client
from collections import Counter

import orjson

from tests.fault.harness import Model
from timeline_fanout.graph.timelines.reader import TimelineEntry

READ_LIMIT = 10  # the readers' page: shorter than most timelines, so it is not all of one


class Client:
    """One keep-alive connection; a dropped one is reopened (the server is never restarted,
    so a socket error is unexpected and counted)."""

    def __init__(self, base: str) -> None:
        self.host, _, port = base.removeprefix("http://").partition(":")
        self.port = int(port)
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        headers = {"content-type": "application/json"} if body is not None else {}
        try:
            self.conn.request(method, path, body, headers)
            response = self.conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            return 599, b"connection error"


def through_the_api(base: str, model: Model) -> Counter[str]:
    """Every user's timeline and lists as the API serves them, against the model."""
    client, found = Client(base), Counter[str]()
    for user in sorted(model.users):
        timeline = model.timeline(user)
        # The whole timeline, and the page the readers ask for: a page remembered by a server
        # process (graph/timelines/page_memo.py) must not outlive a change.
        for limit in (model.cap, READ_LIMIT):
            status, body = client.call("GET", f"/v1/timelines/{user}?limit={limit}")
            posts = orjson.loads(body)["posts"] if status == 200 else []
            got = [TimelineEntry(p["ts"], p["author"], p["post_id"]) for p in posts]
            found["api_timeline_wrong"] += got != timeline[:limit]
        for kind, expected in (
            ("followers", model.followers(user)),
            ("following", model.following(user)),
        ):
            status, body = client.call("GET", f"/v1/users/{user}/{kind}?limit=1000")
            members = set(orjson.loads(body)["members"]) if status == 200 else set()
            found[f"api_{kind}_wrong"] += members != expected
    return found
