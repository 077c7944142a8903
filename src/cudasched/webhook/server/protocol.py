"""uvicorn's HTTP/1.1 protocols with the limits a webhook on every pod creation needs.

uvicorn (0.54) bounds request bodies through the application, but not what comes before it:

* **request head size**: with the httptools parser nothing caps it (a 96 MiB header was read
  for 57 s, and a 32 MiB one stalled every other request for 8 s); h11 refuses heads over its
  ``max_incomplete_event_size``. Both parsers here count the bytes of a request head as they
  arrive and answer ``431`` and cut the connection once ``max_header_bytes`` is passed, so at
  most two reads (256 KiB each) past the limit are ever buffered (a head that arrives whole in
  one read is measured by the application, same answer). Only head bytes count: a read that
  holds the end of one request's body and the start of the next request's head (pipelining)
  counts what the parser has reported of the new head (its target and complete fields), and
  the reads after it count whole while the head is still incomplete. A 431 is written only
  when no earlier request on the connection is still unanswered (it would be read as that
  request's answer); otherwise the connection is cut;
* **time to send the head**: a connection that never sends a complete head (2,000 half-open
  connections stayed open for minutes) is closed ``header_timeout`` seconds after it was
  opened, or after the first byte of its next request. An idle keep-alive connection is
  uvicorn's to close (``timeout_keep_alive``); bodies have their own deadline in the
  application (``requestTimeoutSeconds``);
* **connections**: beyond ``max_connections`` open connections, a new one is closed at once.

The number of header fields is checked by the application too (431), the same for both
parsers: the size cap already bounds their memory. Refusals are counted through
``on_refused`` with a closed vocabulary of reasons (``connections``, ``header_timeout``,
``header_too_large``: the label values of the metric that counts them,
:data:`cudasched.webhook.metrics.REFUSAL_REASONS`).
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ConnectionLimits",
    "available_parsers",
    "h11_event_limit",
    "protocol_class",
]


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_header_bytes: int = 16_384
    header_timeout: float = 5.0
    max_connections: int = 512
    on_refused: Callable[[str], None] | None = None


def available_parsers() -> tuple[str, ...]:
    """The HTTP parsers installed, fastest first."""
    return tuple(p for p in ("httptools", "h11") if importlib.util.find_spec(p) is not None)


_431 = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\n"
)


#: How often the open connections are checked for a head that takes too long.
SWEEP_SECONDS = 0.5


class _Guard:
    """The limits, shared by both protocols (mixed in before uvicorn's class).

    The head timeout costs nothing per request: a connection notes when its head started (a
    clock read), and one sweep per server and ``SWEEP_SECONDS`` closes the connections whose
    head is overdue (a timer per request was measurable at thousands of requests a second)."""

    limits: ConnectionLimits = ConnectionLimits()
    # Provided by uvicorn's protocol classes.
    connections: set[Any]
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    server_state: Any

    def _guard_setup(self) -> None:
        self._refused = False
        self._head_started: float | None = None
        self._head_bytes = 0
        self._in_head = True
        # A head began inside the read being parsed (after the body of the request before it).
        self._began_in_read = False

    def _refuse_connection(self, transport: asyncio.Transport) -> bool:
        """Close ``transport`` at once when the server already holds ``max_connections``."""
        self._guard_setup()
        if len(self.connections) < self.limits.max_connections:
            self._ensure_sweeper()
            return False
        self._refused = True
        transport.abort()
        self._count("connections")
        return True

    def _ensure_sweeper(self) -> None:
        """Start the server's sweep (once per server: it lives on uvicorn's shared state)."""
        state = self.server_state
        if getattr(state, "_cudasched_sweeping", False):
            return
        state._cudasched_sweeping = True
        connections, loop, timeout = self.connections, self.loop, self.limits.header_timeout

        def sweep() -> None:
            now = loop.time()
            for conn in list(connections):
                started = getattr(conn, "_head_started", None)
                if started is not None and conn._in_head and now - started > timeout:
                    conn._head_timed_out()
            loop.call_later(SWEEP_SECONDS, sweep)

        loop.call_later(SWEEP_SECONDS, sweep)

    def _count(self, reason: str) -> None:
        if self.limits.on_refused is not None:
            self.limits.on_refused(reason)

    def _start_head(self) -> None:
        """A request head may start now: count its bytes and time it."""
        self._in_head = True
        self._head_bytes = 0
        if self._head_started is None:
            self._head_started = self.loop.time()

    def _head_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._head_started = None

    def _head_timed_out(self) -> None:
        self._head_started = None
        if self._in_head and not self.transport.is_closing():
            self._count("header_timeout")
            self.transport.abort()

    def _head_reported(self) -> int:
        """The bytes of the current head the parser has reported so far (its target and its
        complete fields, 4 bytes of separators each): a lower bound of what it has read."""
        return 0

    def _after_data(self, size: int) -> None:
        """Called after the parser consumed a read of ``size`` bytes. When the head was under
        way before the read, the whole read was head. When the head began inside it (after
        the body of the previous request, pipelined), only what the parser reported of it is
        counted: the rest of that read is at most one read buffered."""
        if not self._in_head or self.transport.is_closing():
            return
        if self._began_in_read:
            self._began_in_read = False
            self._head_bytes = self._head_reported()
        else:
            self._head_bytes += size
        if self._head_bytes > self.limits.max_header_bytes:
            self._count("header_too_large")
            cycle = getattr(self, "cycle", None)
            if cycle is not None and not cycle.response_complete:
                # An earlier request on this connection is unanswered: a 431 now would be read
                # as its answer. Cut the connection instead.
                self.transport.abort()
                return
            message = f"request head exceeds {self.limits.max_header_bytes} bytes\n".encode()
            self.transport.write(
                _431 + b"content-length: " + str(len(message)).encode() + b"\r\n\r\n" + message
            )
            # Cut, not closed: a TLS close waits for the client's close_notify, reading and
            # decrypting whatever it keeps sending meanwhile. The answer usually leaves with
            # the write above (the socket takes it at once); if not, the client still sees the
            # connection reset.
            self.transport.abort()

    def _guard_lost(self) -> None:
        self._head_started = None
        self._in_head = False


def _httptools_class() -> type[asyncio.Protocol]:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class LimitedHttpToolsProtocol(_Guard, HttpToolsProtocol):
        # asyncio.Protocol takes any BaseTransport; uvicorn's protocols narrow it as here.
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if self._refuse_connection(transport):
                return
            super().connection_made(transport)
            self._start_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._guard_lost()
            if not self._refused:
                super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            self._began_in_read = False
            super().data_received(data)
            self._after_data(len(data))

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._start_head()
            self._began_in_read = True

        def _head_reported(self) -> int:
            return len(self.url) + sum(len(n) + len(v) + 4 for n, v in self.headers)

        def on_headers_complete(self) -> None:
            self._head_complete()
            super().on_headers_complete()

    return LimitedHttpToolsProtocol


def _h11_class() -> type[asyncio.Protocol]:
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class LimitedH11Protocol(_Guard, H11Protocol):
        # asyncio.Protocol takes any BaseTransport; uvicorn's protocols narrow it as here.
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if self._refuse_connection(transport):
                return
            super().connection_made(transport)
            self._start_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._guard_lost()
            if not self._refused:
                super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            before = self.cycle
            if not self._in_head and self.conn.their_state is h11.IDLE:
                # h11 has consumed the previous request whole (body included): this read
                # starts with the next request's head.
                self._start_head()
            super().data_received(data)
            if self.cycle is not before:  # h11 delivered a complete request head
                self._head_complete()
            self._after_data(len(data))

    return LimitedH11Protocol


def protocol_class(parser: str, limits: ConnectionLimits) -> type[asyncio.Protocol]:
    """A uvicorn protocol class for ``parser`` (``httptools`` or ``h11``) enforcing ``limits``.

    For h11, pass :func:`h11_event_limit` as uvicorn's ``h11_max_incomplete_event_size`` so
    h11's own (coarser) limit never answers first."""
    base = _httptools_class() if parser == "httptools" else _h11_class()
    return type(base.__name__, (base,), {"limits": limits})


def h11_event_limit(limits: ConnectionLimits) -> int:
    """h11's buffer limit: our head limit plus one read of the transport (256 KiB), so the
    application of our limit (after each read) always comes first."""
    return limits.max_header_bytes + 256 * 1024 + 16 * 1024
