"""The private members of uvicorn's httptools protocol that ``BoundedHttpTools`` relies on,
named here and nowhere else.

uvicorn offers no public hook between a read and its parse, so bounding a request's head means
replacing ``HttpToolsProtocol.data_received``, and the replacement has to take the same steps
uvicorn's does: cancel the keep-alive timer when data arrives, and hand an ``Upgrade`` request to
the websocket protocol or warn. Those steps are private methods of uvicorn's. Each is called
through one method of ``UvicornHttpTools`` below, and ``PRIVATE_METHODS`` states the signature
each had in the uvicorn versions pyproject.toml allows; tests/api/test_uvicorn_contract.py
compares it with the installed uvicorn and names the method that an upgrade removed or changed.
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# Each private method called below: its parameters and return annotation, as uvicorn declares them.
PRIVATE_METHODS: dict[str, tuple[tuple[str, ...], object]] = {
    "_unset_keepalive_if_required": (("self",), None),
    "_should_upgrade": (("self",), bool),
    "_unsupported_upgrade_warning": (("self",), None),
}


class UvicornHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol with its private steps under names of ours."""

    def cancel_keep_alive(self) -> None:
        """Data arrived, so the connection is no longer idle: uvicorn's keep-alive timer stops."""
        self._unset_keepalive_if_required()

    def take_upgrade(self) -> None:
        """The parser met an ``Upgrade`` request: the connection goes to uvicorn's websocket
        protocol when uvicorn would take it there, else uvicorn logs why it was not."""
        if self._should_upgrade():
            self.handle_websocket_upgrade()
        else:
            self._unsupported_upgrade_warning()
