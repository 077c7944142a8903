"""Pipelined requests and the request-head guard (issue 22, the protocol defect).

Several requests written back to back on one connection arrive in reads whose boundaries fall
anywhere: the tail of one request's body and the start of the next request's head often share
a read. The head-size guard of :mod:`cudasched.webhook.server.protocol` must count only the bytes of
the head being received, never the body before it (a 35 KB review pipelined after another one
was refused 431 "request head exceeds 16384 bytes" under load).

The protocol classes are driven directly with the reads hypothesis chooses (a fake transport
that honours uvicorn's flow control), so the splits are exact and nothing depends on timing;
one test then pipelines real reviews over the real HTTPS server.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import socket
import ssl
from pathlib import Path
from typing import Any

import orjson
import pytest
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from uvicorn.server import ServerState

from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.webhook.server.app import POD_PATH
from cudasched.webhook.server.protocol import (
    ConnectionLimits,
    available_parsers,
    h11_event_limit,
    protocol_class,
)
from cudasched.webhook.server.serving import serve_in_thread
from cudasched.webhook.state.clusterstate import ClusterState

DATA = Path(__file__).parents[2] / "data" / "admission"
LIMIT = 16_384


class _Transport(asyncio.Transport):
    """What the protocol writes, and whether it paused reading or cut the connection."""

    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()
        self.closing = False
        self.paused = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self.closing:
            self.out += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_reading(self) -> bool:
        return not self.paused

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8443), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )


async def _echo_length(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Reads the whole body and answers 200 with its length; a head over the limit that
    arrived whole is refused 431 as the webhook's application does."""
    head = len(scope["raw_path"]) + sum(len(n) + len(v) + 4 for n, v in scope["headers"])
    if head > LIMIT:
        await send(
            {
                "type": "http.response.start",
                "status": 431,
                "headers": [(b"content-length", b"0"), (b"connection", b"close")],
            }
        )
        await send({"type": "http.response.body", "body": b""})
        return
    size = 0
    while scope["path"] != "/early":  # answers at once, leaving the body unread
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = str(size).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _request(body_size: int, pad: int, path: bytes = b"/mutate/pods") -> bytes:
    body = b"x" * body_size
    return (
        b"POST "
        + path
        + b" HTTP/1.1\r\nhost: webhook\r\ncontent-type: application/json\r\n"
        + (b"x-pad: " + b"p" * pad + b"\r\n" if pad else b"")
        + b"content-length: %d\r\n\r\n" % body_size
        + body
    )


def _answers(out: bytes) -> list[int]:
    """The status codes of the responses in ``out``."""
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", out)]


async def _serve(parser: str, reads: list[bytes], yields: list[int]) -> tuple[_Transport, Any]:
    """Feed ``reads`` to a fresh connection of the limited protocol, running the event loop
    ``yields[i]`` times after read ``i`` (0: the next read arrives before the application ran)
    and never while uvicorn has paused reading; then let every request finish."""
    refused: list[str] = []
    limits = ConnectionLimits(max_header_bytes=LIMIT, on_refused=refused.append)
    cls = protocol_class(parser, limits)
    config = uvicorn.Config(
        _echo_length,
        http=cls,
        lifespan="off",
        log_config=None,
        h11_max_incomplete_event_size=h11_event_limit(limits),
    )
    loop = asyncio.get_running_loop()
    proto = cls(config=config, server_state=ServerState(), app_state={}, _loop=loop)
    transport = _Transport()
    proto.connection_made(transport)
    for data, spins in zip(reads, yields, strict=True):
        for _ in range(1000):
            if not transport.paused:
                break
            await asyncio.sleep(0)
        assert not transport.paused, "reading stayed paused"
        if transport.closing:
            break
        proto.data_received(data)
        for _ in range(spins):
            await asyncio.sleep(0)
    for _ in range(1000):  # let the pipelined requests run to completion
        await asyncio.sleep(0)
    proto.connection_lost(None)
    return transport, refused


def _split(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % len(stream) for c in cuts} - {0})
    edges = [0, *points, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(edges)]


@pytest.mark.parametrize("parser", available_parsers())
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    requests=st.lists(
        st.tuples(st.integers(0, 40_000), st.integers(0, 12_000)), min_size=1, max_size=5
    ),
    cuts=st.lists(st.integers(0, 10**9), max_size=12),
    yields=st.lists(st.integers(0, 3), min_size=13, max_size=13),
)
def test_pipelined_requests_in_any_reads_are_all_answered(
    parser: str, requests: list[tuple[int, int]], cuts: list[int], yields: list[int]
) -> None:
    """Requests with bodies up to 40 KB and heads well under the limit, written back to back
    and read in any splits: every one is answered 200, none refused as a large head."""
    stream = b"".join(_request(size, pad) for size, pad in requests)
    reads = _split(stream, cuts)
    transport, refused = asyncio.run(_serve(parser, reads, yields[: len(reads)]))
    assert refused == []
    assert _answers(bytes(transport.out)) == [200] * len(requests), bytes(transport.out)[:300]


@pytest.mark.parametrize("parser", available_parsers())
def test_a_body_then_the_next_head_in_one_read(parser: str) -> None:
    """The reported case, exactly: the tail of a 35 KB body and the start of the next
    request's head in one read."""
    first, second = _request(35_000, 0), _request(35_000, 0)
    reads = [first[:200], first[200:] + second[:60], second[60:]]
    transport, refused = asyncio.run(_serve(parser, reads, [0, 0, 0]))
    assert refused == []
    assert _answers(bytes(transport.out)) == [200, 200]


@pytest.mark.parametrize("parser", available_parsers())
@pytest.mark.parametrize("split", [1, 100, 4096, 9000])
@pytest.mark.parametrize("answered_first", [True, False])
def test_a_head_over_the_limit_is_still_refused_whatever_came_before(
    parser: str, split: int, answered_first: bool
) -> None:
    """The guard still works: a 40 KB head that arrives in pieces after a body is refused 431
    (by the protocol as it grows, or by the application once complete), never answered 200.
    While the request before it is still unanswered no 431 is written (the client would take
    it for the earlier request's answer): the connection is cut, or the head waits for it."""
    first, second = _request(20_000, 0), _request(10, 40_000)
    stream = first + second
    start = len(first) - 500  # one read holds the body's tail and the next head's start
    reads = [stream[:start], stream[start : len(first) + split]]
    reads += [stream[i : i + 4096] for i in range(len(first) + split, len(stream), 4096)]
    # The first request can be answered once its body is complete, after the second read.
    spins = [0, 100 if answered_first else 0] + [0] * (len(reads) - 2)
    transport, refused = asyncio.run(_serve(parser, reads, spins))
    statuses = _answers(bytes(transport.out))
    assert transport.closing
    assert statuses == [200, 431] or (not answered_first and statuses == []), statuses
    if answered_first:
        assert refused == ["header_too_large"]


@pytest.mark.parametrize("parser", available_parsers())
def test_an_unread_body_after_an_early_answer_is_not_a_head(parser: str) -> None:
    """An answer sent before the body was read (the application refusing early): the rest of
    that body still arrives and is skipped by the parser; it is not the next head."""
    first, second = _request(40_000, 0, b"/early"), _request(100, 0)
    stream = first + second
    reads = [stream[:300]] + [stream[i : i + 8192] for i in range(300, len(stream), 8192)]
    transport, refused = asyncio.run(_serve(parser, reads, [50] * len(reads)))
    assert refused == []
    assert _answers(bytes(transport.out)) == [200, 200]


# ----------------------------------------------------------------- the real HTTPS server


def _review(uid: str, size: int) -> bytes:
    doc = json.loads((DATA / "pod-predictor-triton.json").read_text(encoding="utf-8"))
    doc["request"]["uid"] = uid
    doc["request"]["object"]["metadata"].setdefault("annotations", {})["example.com/pad"] = (
        "p" * size
    )
    return orjson.dumps(doc)


@pytest.mark.parametrize("parser", available_parsers())
def test_pipelined_reviews_over_https_are_all_decided(parser: str) -> None:
    """Eight 35 KB reviews written in one go on one TLS connection: eight 200 answers."""
    from cudasched.settings.config import WebhookConfig

    config = WebhookConfig.from_mapping({"server": {"httpParser": parser}})
    state = ClusterState.from_snapshot(bundled_snapshot())
    with serve_in_thread(state, config=config) as srv:
        ctx = ssl.create_default_context(cadata=srv.ca_pem.decode())
        raw = socket.create_connection((srv.host, srv.port), timeout=30)
        with ctx.wrap_socket(raw, server_hostname="localhost") as sock:
            out = b""
            for i in range(8):
                body = _review(f"pipe-{i}", 35_000)
                out += (
                    b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n" % (POD_PATH.encode(), len(body))
                ) + body
            sock.sendall(out)
            received = b""
            while received.count(b"HTTP/1.1 ") < 8 or not received.endswith(b"}"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
    assert _answers(received) == [200] * 8, received[:300]
    for i in range(8):
        assert f'"uid":"pipe-{i}"'.encode() in received.replace(b" ", b"")
