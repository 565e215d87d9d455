"""Loopback ports for servers started by this machine's own processes, and proof of who holds one.

A port picked free (bound to 0, read, closed) can be taken by another process before the server
meant for it binds: two test workers starting stacks at once, or anything else on the machine.
A server that then fails to bind may still *seem* to start, because whoever won the port answers
the readiness probe. So a started server counts as up only once its own process is seen
listening on the port (:func:`listens`), and an address meant to refuse connections is held
bound, not listening, for as long as it is used (:func:`refusing_address`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column


def free_port() -> int:
    """A port nobody holds at this instant; it may be taken before it is used (see the module)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def refusing_address() -> Iterator[tuple[str, int]]:
    """A loopback address that refuses connections until the block ends.

    The socket is bound and never listens, so a connection attempt is refused at once, and no
    other process can bind the port meanwhile (a port merely picked free could be taken by
    another test's server and answer).
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield "127.0.0.1", sock.getsockname()[1]


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == _LISTEN and int(local.rpartition(":")[2], 16) == port:
                inodes.add(inode)
    return inodes


def listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a listening TCP socket on ``port`` (Linux ``/proc``).

    Where ``/proc`` is missing the answer is True: the check narrows a race, it cannot be the
    only thing that makes a server start.
    """
    if not Path("/proc/net/tcp").exists():
        return True
    inodes = _listening_inodes(port)
    if not inodes:
        return False
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False
