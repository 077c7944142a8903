"""Limits against an attacker who can reach the webhook port (issue 13, items 1 to 4).

Every test drives the real HTTPS server; the memory and latency tests run the real
``cudasched webhook --cluster FILE`` process and measure it from outside (its RSS, its answers'
latency), the way a deployment would see it. Nothing is timed against a fixed budget except the
one the API server itself imposes: an admission answer must come back before the request's
deadline (``requestTimeoutSeconds``), or the API server applies its failure policy.

The numbers each test measured are printed (``pytest -s``) for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import json
import socket
import ssl
import statistics
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.settings.config import WebhookConfig
from cudasched.webhook.server.app import POD_PATH
from cudasched.webhook.server.protocol import available_parsers
from cudasched.webhook.server.serving import RunningServer, serve_in_thread
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support.webhook_process import webhook_process

DATA = Path(__file__).parents[2] / "data" / "admission"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
MIB = 1024 * 1024


def review(uid: str, affinity: dict[str, Any] | None = None, **annotations: str) -> bytes:
    doc = json.loads((DATA / "pod-predictor-triton.json").read_text(encoding="utf-8"))
    doc["request"]["uid"] = uid
    pod = doc["request"]["object"]
    if affinity is not None:
        pod["spec"]["affinity"] = affinity
    pod["metadata"].setdefault("annotations", {}).update(annotations)
    return orjson.dumps(doc)


def rack_affinity(i: int, values: int = 700) -> dict[str, Any]:
    """A distinct ~12 KB node affinity (under the merge memo's per-key cap of 16 KiB)."""
    expr = {
        "key": "example.com/rack",
        "operator": "In",
        "values": [f"rack-{i}-{j:04d}" for j in range(values)],
    }
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}}}


def decided(resp: httpx.Response, uid: str) -> dict[str, Any]:
    """A real decision for ``uid``: HTTP 200, the uid, a patch, no failure-mode warning."""
    assert resp.status_code == 200, (resp.status_code, resp.text[:300])
    answer = resp.json()["response"]
    assert answer["uid"] == uid
    assert "patch" in answer, answer
    assert not any("admitted unchanged" in w for w in answer.get("warnings", [])), answer
    return answer


@pytest.fixture(scope="module")
def sample_state() -> ClusterState:
    return ClusterState.from_snapshot(bundled_snapshot())


# --------------------------------------------------------------------------- item 1: memory


def test_memory_of_a_real_server_stays_bounded(tmp_path: Path) -> None:
    """1,500 distinct GPU pods with ~13 KB affinities each: before the fix the merge memo kept
    4,096 of them whatever their size (62 -> 1,133 MiB after 3,000 in the attack run); every
    memo is now bounded in bytes, so memory stops growing once they are full."""
    with webhook_process(tmp_path) as proc:
        tls = proc.tls()

        def send(numbers: range) -> None:
            with httpx.Client(base_url=proc.url, verify=tls, timeout=30) as c:
                for i in numbers:
                    decided(c.post(POD_PATH, content=review(f"m-{i}", rack_affinity(i))), f"m-{i}")

        def batch(start: int, stop: int) -> None:
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(send, [range(start + k, stop, 4) for k in range(4)]))

        before = proc.rss_bytes()
        batch(0, 500)  # every memo full by now (decision 16 MiB, affinity 8 MiB)
        filled = proc.rss_bytes()
        batch(500, 1500)
        after = proc.rss_bytes()
    print(
        f"\nRSS MiB: start {before / MIB:.0f}, after 500 {filled / MIB:.0f}, "
        f"after 1500 {after / MIB:.0f}"
    )
    assert after - filled < 24 * MIB, (before, filled, after)
    assert after < 200 * MIB  # the Deployment's limit is 256 MiB


# --------------------------------------------------------------------------- item 3: work


def _abusive_bodies() -> dict[str, bytes]:
    """Legal-size reviews (< 3 MiB) that cost the most per byte, from the attack run."""

    def with_annotation(uid: str, value: Any) -> bytes:
        doc = json.loads(review(uid))
        doc["request"]["object"]["metadata"]["annotations"]["x"] = value
        return json.dumps(doc, separators=(",", ":")).encode()  # orjson stops at 254 levels

    terms = [
        {
            "matchExpressions": [
                {"key": f"k{j}", "operator": "In", "values": [f"v{i}"]} for j in range(3)
            ]
        }
        for i in range(10_000)
    ]
    deep: Any = "bottom"
    for _ in range(900):
        deep = {"a": deep}
    return {
        "empty-lists": with_annotation("abuse-lists", [[] for _ in range(800_000)]),
        "deep": with_annotation("abuse-deep", deep),
        "10k-terms": review(
            "abuse-terms", {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}}
        ),
        "40k-values": review("abuse-values", rack_affinity(0, 40_000)),
    }


def test_normal_reviews_answered_in_time_while_abusive_ones_are_in_flight(tmp_path: Path) -> None:
    """Eight clients keep sending the costliest legal bodies; a ninth sends ordinary GPU pods
    (each one new, so each is decided, not recalled). Every ordinary review gets its decision
    before its deadline; every abusive one gets an answer without a 5xx: the over-limit answer
    (failure mode), or 429 when too many large bodies are already held."""
    bodies = _abusive_bodies()
    stop = threading.Event()
    abusive: list[int] = []
    deadline = WebhookConfig().server.request_timeout_seconds
    with webhook_process(tmp_path) as proc:
        tls = proc.tls()

        def abuse(name: str) -> None:
            with httpx.Client(base_url=proc.url, verify=tls, timeout=30) as c:
                while not stop.is_set():
                    resp = c.post(POD_PATH, content=bodies[name])
                    abusive.append(resp.status_code)
                    assert resp.status_code < 500, resp.text[:200]

        normal: list[float] = []
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(abuse, name) for name in list(bodies) * 2]
            time.sleep(1.0)  # let the abusive load build up
            try:
                with httpx.Client(base_url=proc.url, verify=tls, timeout=30) as c:
                    for i in range(40):
                        uid = f"normal-{i}"
                        started = time.perf_counter()
                        resp = c.post(POD_PATH, content=review(uid, **{"example.com/n": str(i)}))
                        normal.append(time.perf_counter() - started)
                        decided(resp, uid)
            finally:
                stop.set()
            for future in futures:
                future.result()
    print(
        f"\nnormal reviews under abuse: median {statistics.median(normal) * 1000:.0f} ms, "
        f"max {max(normal) * 1000:.0f} ms; abusive answers {len(abusive)} "
        f"({sorted(set(abusive))})"
    )
    assert max(normal) < deadline, normal
    assert abusive and all(code in (200, 429) for code in abusive)


# --------------------------------------------------------------------------- items 2 and 4


@pytest.fixture(params=available_parsers())
def limited(request: pytest.FixtureRequest, sample_state: ClusterState) -> Iterator[RunningServer]:
    """The in-process server with each installed HTTP parser and short limits."""
    config = WebhookConfig.from_mapping(
        {
            "server": {
                "httpParser": request.param,
                "headerTimeoutSeconds": 1.0,
                "maxConnections": 8,
            }
        }
    )
    with serve_in_thread(sample_state, config=config) as srv:
        yield srv


def _tls_client(srv: RunningServer, timeout: float = 10.0) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cadata=srv.ca_pem.decode())
    raw = socket.create_connection((srv.host, srv.port), timeout=timeout)
    return ctx.wrap_socket(raw, server_hostname="localhost")


def _read_until_closed(sock: socket.socket, limit: float = 20.0) -> bytes:
    """Everything the server sends until it closes the connection (``limit`` guards a hang)."""
    sock.settimeout(limit)
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
        pass
    return out


def _ordinary_review_works(srv: RunningServer) -> None:
    with httpx.Client(
        base_url=srv.url, verify=ssl.create_default_context(cadata=srv.ca_pem.decode())
    ) as c:
        decided(c.post(POD_PATH, content=review("after")), "after")


def test_oversized_request_head_is_refused_early(limited: RunningServer) -> None:
    """A client streaming a 64 MiB header is answered 431 once 16 KiB of it have arrived and
    cut off: it cannot even finish sending (what it managed to send sits in kernel buffers,
    never read by the server)."""
    sock = _tls_client(limited)
    sock.sendall(b"POST /mutate/pods HTTP/1.1\r\nhost: x\r\nx-big: ")
    chunk = b"a" * 65536
    sent = 0
    with pytest.raises((BrokenPipeError, ConnectionResetError, ssl.SSLError, TimeoutError)):
        while sent < 64 * MIB:
            sock.sendall(chunk)
            sent += len(chunk)
    sock.close()
    metrics = limited.app.metrics.render().decode()
    assert 'cudasched_webhook_connections_refused_total{reason="header_too_large"} 1.0' in metrics
    _ordinary_review_works(limited)


def test_a_head_over_the_limit_in_one_read_is_refused_too(limited: RunningServer) -> None:
    """20 KB of header sent at once arrives in one read: complete before the protocol can
    count it, refused by the application with the same 431."""
    with httpx.Client(
        base_url=limited.url, verify=ssl.create_default_context(cadata=limited.ca_pem.decode())
    ) as c:
        resp = c.get("/healthz", headers={"x-big": "a" * 20_000})
        assert resp.status_code == 431, resp.text
        assert c.get("/healthz", headers={"x-ok": "a" * 10_000}).status_code == 200


def test_header_fields_are_counted(limited: RunningServer) -> None:
    sock = _tls_client(limited)
    body = review("many-headers")
    headers = b"".join(b"x-h%d: v\r\n" % i for i in range(150))
    sock.sendall(
        b"POST /mutate/pods HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        + headers
        + b"content-length: %d\r\n\r\n" % len(body)
        + body
    )
    answer = _read_until_closed(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]


def test_incomplete_heads_and_silent_handshakes_are_closed(limited: RunningServer) -> None:
    """A connection that never completes its request head, and one that never even starts
    TLS, are closed by the server after the header timeout (1 s here)."""
    half = _tls_client(limited)
    half.sendall(b"POST /mutate/pods HTTP/1.1\r\nhost: x\r\n")  # never finished
    silent = socket.create_connection((limited.host, limited.port), timeout=20)
    started = time.monotonic()
    assert _read_until_closed(half) == b""
    silent.settimeout(20)
    assert silent.recv(1) == b""  # the server gave up on the handshake
    elapsed = time.monotonic() - started
    half.close()
    silent.close()
    assert elapsed < 15, elapsed  # not asyncio's 60 s handshake default, nor never
    _ordinary_review_works(limited)


def test_connections_beyond_the_cap_are_closed_at_once(limited: RunningServer) -> None:
    idle = [_tls_client(limited) for _ in range(8)]  # the cap
    try:
        extra = _tls_client(limited)
        extra.settimeout(5)
        try:
            extra.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            refused = extra.recv(100) == b""
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            refused = True
        extra.close()
        assert refused
    finally:
        for sock in idle:
            sock.close()
    # Slots free again once those are gone.
    deadline = time.monotonic() + 10
    while True:
        try:
            _ordinary_review_works(limited)
            break
        except (httpx.HTTPError, AssertionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    metrics = httpx.get(
        limited.url + "/metrics", verify=ssl.create_default_context(cadata=limited.ca_pem.decode())
    ).text
    assert 'cudasched_webhook_connections_refused_total{reason="connections"} 1.0' in metrics
