"""The fan-out's appends by quiet meta sets (``ms key len MA q k``, closed by ``mn``): every
append that was not stored is reported, with its group and key, and nothing else; a server that
is down or hung refuses its keys as before (docs/design/cache-failover.md).

Against memcached processes of the test's own, and a loopback server that dribbles its reply."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator

import pytest

from timeline_fanout.memcache import MemcacheCluster, Outcome, Refused
from timeline_fanout.memcache.pools import ServerPipe
from timeline_fanout.memcache.ring import EpochState
from timeline_fanout.memcache.trust import ServerTrust, TrustSettings
from timeline_fanout.memcache.wire import (
    QUIET_VALUE_MAX,
    AppendGroup,
    quiet_append_pipeline,
    quiet_end,
)
from timeline_fanout_devstack.memcached_processes import end, own_server, stop

BOUNDS = TrustSettings(timeout_s=0.3, retry_s=0.3)
ITEM_LIMIT = 1024 * 1024  # memcached's default -I
TOKEN = b"+0001700000000000/author/p1 "
Server = tuple[subprocess.Popen[bytes], tuple[str, int]]


@pytest.fixture
def three() -> Iterator[list[Server]]:
    with own_server() as a, own_server() as b, own_server() as c:
        yield [a, b, c]


@pytest.fixture
def cluster(three: list[Server]) -> Iterator[MemcacheCluster]:
    addresses = [address for _, address in three]
    cache = MemcacheCluster(
        addresses, trust=ServerTrust([f"{h}:{p}" for h, p in addresses], BOUNDS)
    )
    cache.settle()
    yield cache
    cache.close()


def name(server: Server) -> str:
    return f"{server[1][0]}:{server[1][1]}"


def test_a_quiet_append_pipeline_reports_exactly_the_keys_not_stored(
    cluster: MemcacheCluster,
) -> None:
    keys = [b"tl%d" % i for i in range(5000)]  # several pipelines per server
    present, missing = keys[::2], keys[1::2]
    cluster.add_many(dict.fromkeys(present, b"+a "))
    full = present[7]  # exists, and one more token would pass the item limit: NOT_STORED too
    big = next(  # the largest value the server stores under this key, within 8 bytes
        value
        for value in (b"x" * (ITEM_LIMIT - short) for short in range(0, 400, 8))
        if cluster.set_many({full: value})[full] is Outcome.STORED
    )
    assert len(TOKEN) <= QUIET_VALUE_MAX  # a timeline token goes by quiet meta sets

    refused = cluster.append_to_each([AppendGroup(TOKEN, keys), AppendGroup(b"+c ", keys[:10])])

    assert all(isinstance(r, Refused) for r in refused)
    assert sorted(refused) == sorted(
        [Refused(0, k, Outcome.NOT_STORED) for k in [*missing, full]]
        + [Refused(1, k, Outcome.NOT_STORED) for k in keys[1:10:2]]
    )
    values = cluster.get_many(keys)
    assert set(values) == set(present)  # a refused append creates nothing
    assert values[keys[0]] == b"+a " + TOKEN + b"+c "
    assert values[keys[-2]] == b"+a " + TOKEN
    assert values[full] == big


def test_many_small_groups_sent_together_are_answered_each_as_alone(
    cluster: MemcacheCluster,
) -> None:
    """A fan-out batch of posts with a few followers each: a server's small pipelines go out
    together (memcache/executor.py), and still every refusal names its own group and key, and
    each timeline takes its groups' tokens in the groups' order."""
    keys = [b"tl%d" % i for i in range(300)]
    present = set(keys[::3])
    cluster.add_many(dict.fromkeys(present, b"+a "))
    groups = [AppendGroup(b"+p%d " % g, keys[g % 290 : g % 290 + 7]) for g in range(1000)]
    groups.append(AppendGroup(b"+big ", keys))  # one of more commands than a small one

    refused = cluster.append_to_each(groups)

    assert sorted(refused) == sorted(
        Refused(g, k, Outcome.NOT_STORED)
        for g, (_, group_keys) in enumerate(groups)
        for k in group_keys
        if k not in present
    )
    values = cluster.get_many(keys)
    assert set(values) == present
    for key in present:
        tokens = b"".join(value for value, group_keys in groups if key in group_keys)
        assert values[key] == b"+a " + tokens


def test_a_value_too_large_for_the_server_is_too_large_and_the_item_is_kept(
    cluster: MemcacheCluster,
) -> None:
    """A value longer than QUIET_VALUE_MAX goes by classic ``append``: memcached answers a
    quiet one too large with a reply naming no key, and unlinks the item."""
    cluster.set_many({b"a": b"+a ", b"b": b"+b "})
    huge = b"+h " * (ITEM_LIMIT // 3 + 10)
    refused = cluster.append_to_each(
        [AppendGroup(TOKEN, [b"a", b"gone"]), AppendGroup(huge, [b"b"]), AppendGroup(TOKEN, [b"b"])]
    )
    assert sorted(refused) == [
        Refused(0, b"gone", Outcome.NOT_STORED),
        Refused(1, b"b", Outcome.TOO_LARGE),
    ]
    assert cluster.get_many([b"a", b"b", b"gone"]) == {b"a": b"+a " + TOKEN, b"b": b"+b " + TOKEN}


@pytest.mark.parametrize("how", ["killed", "hung"])
def test_a_down_servers_keys_are_refused_as_not_stored_and_its_epoch_revoked(
    three: list[Server], cluster: MemcacheCluster, how: str
) -> None:
    keys = [b"tl%d" % i for i in range(3000)]
    cluster.add_many(dict.fromkeys(keys, b"+a "))
    victim = three[0]
    on_victim = [k for k in keys if cluster.server_for(k) == name(victim)]
    assert 0 < len(on_victim) < len(keys)
    if how == "killed":
        end(victim[0])
    else:
        stop(victim[0])  # sent, never answered: found down by the timeout
    try:
        refused = cluster.append_to_each([AppendGroup(TOKEN, keys)])
        assert sorted(refused) == sorted(Refused(0, k, Outcome.NOT_STORED) for k in on_victim)
        live = [k for k in keys if k not in set(on_victim)]
        assert cluster.get_many(live) == dict.fromkeys(live, b"+a " + TOKEN)
        # The keys it missed are never served: its epoch is a new one, down, in the register.
        assert cluster.trust.ring.record.epoch(name(victim)).state is EpochState.DOWN
    finally:
        end(victim[0])


def test_a_quiet_reply_split_anywhere_is_found_whole() -> None:
    """``MN`` is found only at a line's start and only once it is whole, whatever the cut; a
    key holding ``MN`` does not end the replies."""
    replies = b"NS kaMN@e1\r\nNS kMN\r\nNS kxMN\r\nMN\r\n"
    for cut in range(len(replies)):
        assert quiet_end(replies[:cut], 0) == -1
    assert quiet_end(replies + b"NS kb@e1\r\n", 0) == len(replies)
    assert quiet_end(b"MN\r\n" + replies, 4) == 4 + len(replies)
    assert quiet_end(b"MN\r\n", 0) == 4


def test_a_pipe_reads_quiet_replies_dribbled_byte_by_byte(dribbler: Dribbler) -> None:
    """Two quiet pipelines in flight; the replies come one byte per read, the second
    pipeline's first bytes in the same stream: each ``receive_quiet`` returns its own."""
    pipe = ServerPipe("127.0.0.1", dribbler.port, 5.0)
    suffix = b"@e1"
    pipe.send(quiet_append_pipeline([b"a", b"MN", b"c"], suffix, TOKEN))
    pipe.send(quiet_append_pipeline([b"d"], suffix, TOKEN))
    first = pipe.receive_quiet()
    assert pipe.refusals(first, suffix) == [b"MN", b"c"]
    assert pipe.refusals(pipe.receive_quiet(), suffix) == []
    pipe.close()
    assert dribbler.requests == 2


class Dribbler:
    """A loopback server that answers each quiet pipeline (up to its ``mn``) with the reply
    memcached would give if only the keys ``MN`` and ``c`` were missing, then nothing for the
    next one, one byte per send."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.requests = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        replies = [b"NS kMN@e1\r\nNS kc@e1\r\nMN\r\n", b"MN\r\n"]
        buf = b""
        with conn:
            while self.requests < len(replies):
                while buf.count(b"mn\r\n") <= self.requests:
                    buf += conn.recv(1 << 16)
                self.requests += 1
            for byte in b"".join(replies):
                conn.sendall(bytes([byte]))
            conn.recv(1)  # until the client closes

    def close(self) -> None:
        self._listener.close()
        self._thread.join(5)


@pytest.fixture
def dribbler() -> Iterator[Dribbler]:
    server = Dribbler()
    yield server
    server.close()
