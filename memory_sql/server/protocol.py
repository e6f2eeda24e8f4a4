"""The HTTP connection protocol ``memory-sql serve`` runs: uvicorn's h11 protocol with a
deadline for a request's headers.

uvicorn closes an idle kept-alive connection (``timeout_keep_alive``) but waits forever for the
headers of a request once a client has started sending them, or on a new connection that sends
nothing: a thousand such connections hold the server's connection limit and nothing else gets
in. :func:`guarded_protocol` gives each connection ``header_timeout`` seconds, from when it
opens or its last response ends, to send a whole request head; else it is closed. The body is
bounded by :mod:`.requests` (``server_body_timeout_seconds``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger("memory_sql.server.connections")


def guarded_protocol(header_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol, closing connections whose request head takes longer than
    ``header_timeout`` seconds (pass as ``uvicorn.run(http=…)``)."""

    class GuardedH11Protocol(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._head_deadline: asyncio.TimerHandle | None = None

        # uvicorn's stubs widen it to BaseTransport; a TCP connection gives a Transport.
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE:  # still waiting for a whole request head
                if self._head_deadline is None:
                    self._arm()
            else:
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._head_deadline = self.loop.call_later(header_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def _too_slow(self) -> None:
            self._head_deadline = None
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            logger.warning(
                "closed a connection that sent no whole request head within %g s "
                "(server_header_timeout_seconds)",
                header_timeout,
            )
            self.transport.close()

    return GuardedH11Protocol
