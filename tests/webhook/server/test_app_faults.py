"""Faults around the webhook: a flaky API server, rotating certificates, shutdown under load,
oversized and slow requests.

The server here is always the real one (uvicorn over HTTPS, the production Admitter) and the
cluster cache is the real :class:`ClusterCache` talking HTTP to the mock API server ``kmock``;
faults are scripted as API traffic, never by patching clients. Two tests start the real
``cudasched webhook`` command in a subprocess, because signal handling and certificate files
only behave for real in a separate process.

What each test holds the webhook to is what the API server needs from it: every admission
request gets a complete, well-formed answer within its time budget, readiness tells the truth,
and the failure mode (fail open with a warning, or ``failClosed``) decides whenever the
webhook cannot.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import kmock
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from cudasched.settings.config import WebhookConfig
from cudasched.webhook.admission.admitter import Admitter, Prepared
from cudasched.webhook.admission.review import MAX_WARNING_CHARS, Outcome
from cudasched.webhook.server.app import POD_PATH, WebhookApp
from cudasched.webhook.server.serving import RunningServer, serve_in_thread
from cudasched.webhook.server.tls import generate_self_signed, write_self_signed
from cudasched.webhook.state.clusterstate import ClusterState
from cudasched.webhook.state.source import StaticStateSource
from tests.harness.controlplane.processes import free_port
from tests.harness.webhook import LiveWebhook, webhook_process
from tests.support.admission import fleet_node
from tests.support.kube_api import write_kubeconfig
from tests.support.servers import make_cache, serving, trust

DATA = Path(__file__).parents[2] / "data" / "admission"
NODES = "/api/v1/nodes"

# The Triton 24.05 predictor pod needs CUDA 12.4: an r535 node (12.2) cannot run it, an r550
# node (12.4) can. onNoFit=deny makes the difference visible as allowed/denied.
OLD_NODE = ("a100-r535", "NVIDIA-A100-SXM4-80GB", "535.216.01")
NEW_NODE = ("h100-r550", "NVIDIA-H100-80GB-HBM3", "550.90.07")
DENY = {"onNoFit": "deny"}


def pod_review(uid: str) -> bytes:
    review = json.loads((DATA / "pod-predictor-triton.json").read_text(encoding="utf-8"))
    review["request"]["uid"] = uid
    return orjson.dumps(review)


def answer_of(resp: httpx.Response, uid: str) -> dict[str, Any]:
    """The AdmissionReview response, after checking it is complete and for ``uid``."""
    assert resp.status_code == 200, (resp.status_code, resp.text)
    doc = resp.json()
    assert doc["apiVersion"] == "admission.k8s.io/v1" and doc["kind"] == "AdmissionReview"
    response: dict[str, Any] = doc["response"]
    assert response["uid"] == uid
    return response


def client(srv: RunningServer) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=srv.url, verify=trust(srv.ca_pem), timeout=10)


async def eventually(predicate: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    """Poll an async condition; the timeout only guards against a hang."""
    async with asyncio.timeout(timeout):
        while not await predicate():
            await asyncio.sleep(0.02)


class Watchdog:
    """Polls /readyz and /mutate/pods in the background and records every result, so a test
    can assert that nothing failed at any moment of a fault, not just before and after."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.ready: list[int] = []
        self.problems: list[str] = []
        self.answers = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        i = 0
        while True:
            i += 1
            try:
                ready = await self.client.get("/readyz")
                self.ready.append(ready.status_code)
                resp = await self.client.post(POD_PATH, content=pod_review(f"dog-{i}"))
                answer_of(resp, f"dog-{i}")
                self.answers += 1
            except Exception as exc:  # recorded, asserted on at the end
                self.problems.append(repr(exc))
            await asyncio.sleep(0.01)

    def __enter__(self) -> Watchdog:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()


# --------------------------------------------------------------------------- watch faults


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A metav1.Status failure, as the API server sends it in a body or an ERROR event."""
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _gone() -> dict[str, Any]:
    return _status(410, "Expired", "too old resource version: 1 (42)")


def _unavailable() -> dict[str, Any]:
    return _status(
        503, "ServiceUnavailable", "the server is currently unable to handle the request"
    )


@pytest.mark.parametrize("fault", ["cut-mid-event", "gone-event", "gone-http", "outage-503"])
async def test_watch_faults_while_serving(kmock: kmock.KubernetesEmulator, fault: str) -> None:
    """The nodes watch breaks while requests keep arriving: readiness never drops, every
    request is answered, and cluster changes after the fault still reach decisions.

    ``outage-503`` is the API server going away once the cache has synced (a control-plane
    restart): four watch attempts in a row get 503, then it is back."""
    await kmock.post(NODES, json=fleet_node(*OLD_NODE))
    first_watch = kmock[kmock.action.WATCH, kmock.resource("v1/nodes")][:1]
    if fault == "cut-mid-event":
        # One whole event (the capable node appears), then half of the next, then EOF.
        first_watch << (
            {"type": "ADDED", "object": fleet_node(*NEW_NODE)},
            b'{"type": "MODIFIED", "object": {"apiVersion": "v1", "kind": "No',
        )
    elif fault == "gone-event":
        first_watch << ({"type": "ERROR", "object": _gone()},)
    elif fault == "gone-http":
        first_watch << 410 << _gone()
    else:
        kmock[kmock.action.WATCH, kmock.resource("v1/nodes")][:4] << 503 << _unavailable()
    watches_needed = 5 if fault == "outage-503" else 2
    cache = make_cache(str(kmock.url))
    async with serving(cache, DENY) as srv, client(srv) as c:

        async def synced() -> bool:
            return (await c.get("/readyz")).status_code == 200

        await eventually(synced)
        with Watchdog(c) as dog:
            # Wait for the fault to have happened and the watch to be re-established.
            async def rewatched() -> bool:
                watches = [r for r in list(kmock) if r.url.path == NODES]
                return sum(r.url.query.get("watch") == "true" for r in watches) >= watches_needed

            await eventually(rewatched)

            async def admitted() -> bool:
                resp = await c.post(POD_PATH, content=pod_review("after"))
                return bool(answer_of(resp, "after")["allowed"])

            if fault == "cut-mid-event":
                # The whole event before the cut was applied.
                await eventually(admitted)
            # Changes made after the fault reach decisions: the capable node is created
            # through the API (a no-op for the cache when the stream already added it)...
            await kmock.post(NODES, json=fleet_node(*NEW_NODE))
            await eventually(admitted)
            # ... and deleted again.
            await kmock.delete(f"{NODES}/{NEW_NODE[0]}")

            async def denied() -> bool:
                resp = await c.post(POD_PATH, content=pod_review("gone"))
                return not answer_of(resp, "gone")["allowed"]

            await eventually(denied)
            await asyncio.sleep(0.1)
    # serve_in_thread gives the app its own registry; the cache reports into its own.
    metrics = cache.metrics.render().decode()
    assert dog.problems == []
    assert dog.answers > 0 and set(dog.ready) == {200}
    reason = "gone" if fault.startswith("gone") else "watch_error"
    assert f'cudasched_cache_watch_restarts_total{{kind="nodes",reason="{reason}"}}' in metrics


async def _async(value: bool) -> bool:
    return value


@pytest.mark.parametrize("fail_closed", [False, True], ids=["fail-open", "fail-closed"])
async def test_api_server_unreachable_at_start(fail_closed: bool) -> None:
    """Until the first list succeeds the webhook is not ready and answers every admission
    request by the failure mode; once the API server appears it serves real decisions."""
    port = free_port()
    cache = make_cache(f"http://127.0.0.1:{port}")
    async with serving(cache, {**DENY, "failClosed": fail_closed}) as srv, client(srv) as c:
        await asyncio.sleep(0.3)  # several failed connection attempts
        ready = await c.get("/readyz")
        assert ready.status_code == 503
        assert "waiting for the first list" in ready.text and "last error" in ready.text
        started = time.monotonic()
        answers = [
            answer_of(await c.post(POD_PATH, content=pod_review(f"early-{i}")), f"early-{i}")
            for i in range(5)
        ]
        # Answered at once, not after a connection timeout to the API server.
        assert time.monotonic() - started < 2.0
        for answer in answers:
            assert answer["allowed"] is (not fail_closed)
            assert "patch" not in answer
            assert len(answer["warnings"]) == 1
            assert len(answer["warnings"][0]) <= MAX_WARNING_CHARS
            assert "not ready" in answer["warnings"][0]
            if fail_closed:
                assert answer["status"]["code"] == 503 and answer["status"]["message"]
        metrics = (await c.get("/metrics")).text
        assert (
            'cudasched_webhook_fallbacks_total{endpoint="/mutate/pods",reason="not_synced"} '
            "5.0" in metrics
        )

        async with kmock.KubernetesEmulator() as api, kmock.Server(api, port=port):
            await api.post(NODES, json=fleet_node(*NEW_NODE))

            async def ready_now() -> bool:
                return (await c.get("/readyz")).status_code == 200

            await eventually(ready_now)
            answer = answer_of(await c.post(POD_PATH, content=pod_review("late")), "late")
            assert answer["allowed"] is True and "patch" in answer
            assert not answer.get("warnings")
            # Close the watches while the mock server is still up.
            await cache.stop()


# --------------------------------------------------------------------------- limits


def _asgi_app(**kwargs: Any) -> WebhookApp:
    state = ClusterState.from_objects([fleet_node(*NEW_NODE)], [], [], [])
    cfg = WebhookConfig()
    return WebhookApp(Admitter.from_config(cfg), StaticStateSource(state), **kwargs)


def test_oversized_body_refused_without_reading_it() -> None:
    """A declared Content-Length over the cap is refused before a single body message is
    pulled; an undeclared (chunked) body is cut off as soon as it passes the cap."""
    app = _asgi_app(max_body_bytes=10_000)
    try:
        for declared in (True, False):
            pulled = 0
            sent: list[dict[str, Any]] = []

            async def receive() -> dict[str, Any]:
                nonlocal pulled
                pulled += 1
                return {"type": "http.request", "body": b"x" * 4096, "more_body": True}

            async def send(message: dict[str, Any], out: list[dict[str, Any]] = sent) -> None:
                out.append(message)

            headers = [(b"content-length", b"1073741824")] if declared else []
            scope = {"type": "http", "method": "POST", "path": POD_PATH, "headers": headers}
            asyncio.run(app(scope, receive, send))
            assert sent[0]["status"] == 413
            assert (b"connection", b"close") in sent[0]["headers"]
            # 10 000 bytes fit in three 4 KiB messages; the third one crosses the cap.
            assert pulled == (0 if declared else 3)
    finally:
        app.close()


def test_huge_declared_body_answered_before_it_is_sent() -> None:
    """Over HTTPS: a client announces a gigabyte and sends nothing; it gets 413 at once and
    the connection is closed, so the server never waits for (or buffers) the body."""
    state = ClusterState.from_objects([fleet_node(*NEW_NODE)], [], [], [])
    with serve_in_thread(state) as srv:
        raw = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        with trust(srv.ca_pem).wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(
                b"POST /mutate/pods HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n{"
            )
            received = b""
            while chunk := tls.recv(65536):
                received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 413"), head
        assert b"exceeds the limit" in body
        with httpx.Client(base_url=srv.url, verify=trust(srv.ca_pem)) as c:
            answer_of(c.post(POD_PATH, content=pod_review("next")), "next")


def test_stalled_and_abandoned_uploads() -> None:
    """A client that sends the head and part of the body, then stalls, is answered 408 once
    the time budget is spent (the request never holds a review thread); one that hangs up
    mid-body costs nothing. The server keeps answering others throughout."""
    state = ClusterState.from_objects([fleet_node(*NEW_NODE)], [], [], [])
    cfg = WebhookConfig.from_mapping({"server": {"requestTimeoutSeconds": 0.5}})
    body = pod_review("stalled")
    head = (
        b"POST /mutate/pods HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    with serve_in_thread(state, config=cfg) as srv:
        verify = trust(srv.ca_pem)
        # Hang up half-way through the body, twice.
        for _ in range(2):
            raw = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            with verify.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(head + body[: len(body) // 2])
        # Stall half-way: the 10 s socket timeout is only a guard against a hang.
        raw = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        with verify.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(head + body[: len(body) // 2])
            with httpx.Client(base_url=srv.url, verify=verify, timeout=10) as c:
                answer_of(c.post(POD_PATH, content=pod_review("meanwhile")), "meanwhile")
            received = b""
            while b"\r\n\r\n" not in received and (chunk := tls.recv(65536)):
                received += chunk
        assert received.startswith(b"HTTP/1.1 408"), received[:200]
        with httpx.Client(base_url=srv.url, verify=verify, timeout=10) as c:
            answer = answer_of(c.post(POD_PATH, content=pod_review("after")), "after")
            assert "patch" in answer
            metrics = c.get("/metrics").text
    # The stalled and abandoned requests were refused before admission ran.
    assert 'cudasched_webhook_requests_total{endpoint="/mutate/pods",outcome="error"} 3.0' in (
        metrics
    )


class SlowAdmitter(Admitter):
    """The production Admitter behind a delay: stands for a decision that is slow for any
    reason (a pathological pod, a starved CPU). Never cheap enough for the event loop, so
    every first-seen review waits in a review thread."""

    delay = 0.0

    def answer_inline(self, prepared: Prepared, state: ClusterState) -> None:
        return None

    def answer(self, prepared: Prepared, state: ClusterState) -> tuple[bytes, Outcome]:
        time.sleep(self.delay)
        return super().answer(prepared, state)


@pytest.mark.parametrize("fail_closed", [False, True], ids=["fail-open", "fail-closed"])
def test_slow_decisions_answered_by_failure_mode_within_budget(fail_closed: bool) -> None:
    """More slow decisions than review threads: every request is still answered within its
    budget (queued ones too) by the failure mode, and health stays responsive."""
    state = ClusterState.from_objects([fleet_node(*OLD_NODE)], [], [], [])
    budget = 0.4
    cfg = WebhookConfig.from_mapping(
        {**DENY, "failClosed": fail_closed, "server": {"requestTimeoutSeconds": budget}}
    )
    slow = SlowAdmitter.from_config(cfg)
    slow.delay = 1.5
    with serve_in_thread(state, config=cfg, admission=slow) as srv:
        results: dict[str, tuple[float, httpx.Response]] = {}

        def send(uid: str) -> None:
            with httpx.Client(base_url=srv.url, verify=trust(srv.ca_pem), timeout=10) as c:
                started = time.monotonic()
                resp = c.post(POD_PATH, content=pod_review(uid))
                results[uid] = (time.monotonic() - started, resp)

        threads = [threading.Thread(target=send, args=(f"slow-{i}",)) for i in range(8)]
        for t in threads:
            t.start()
        with httpx.Client(base_url=srv.url, verify=trust(srv.ca_pem), timeout=10) as c:
            assert c.get("/healthz").status_code == 200
        for t in threads:
            t.join(15)
        # Once the stuck decisions drain, real answers come back.
        slow.delay = 0.0
        time.sleep(1.6)
        with httpx.Client(base_url=srv.url, verify=trust(srv.ca_pem), timeout=10) as c:
            final = answer_of(c.post(POD_PATH, content=pod_review("fast")), "fast")
    assert len(results) == 8
    for uid, (elapsed, resp) in results.items():
        answer = answer_of(resp, uid)
        # Generous against scheduling noise, far below the 1.5 s decision and the API
        # server's own 10 s timeout.
        assert elapsed < budget + 1.0, (uid, elapsed)
        assert answer["allowed"] is (not fail_closed)
        assert "exceeded" in answer["warnings"][0]
        if fail_closed:
            assert answer["status"]["code"] == 504
    # The real decision: no node runs CUDA 12.4 here, and onNoFit is deny.
    assert final["allowed"] is False and final["status"]["code"] == 403


# --------------------------------------------------------------------------- the real process


@contextlib.asynccontextmanager
async def running_webhook(
    tmp: Path, api_url: str, config: dict[str, Any], ca_file: Path
) -> AsyncIterator[LiveWebhook]:
    """``cudasched webhook`` in its own process (the harness's :func:`webhook_process`),
    watching the mock API server and serving the certificate files ``config`` names, trusted
    through ``ca_file``. Started and stopped in a thread: the mock API server runs on this
    test's event loop, which must keep serving while the process lists it."""
    kubeconfig = write_kubeconfig(tmp, api_url)
    stack = contextlib.ExitStack()
    started = webhook_process(tmp / "webhook", kubeconfig, config=config, ca_file=ca_file)
    hook = await asyncio.to_thread(stack.enter_context, started)
    try:
        yield hook
    finally:
        await asyncio.to_thread(stack.close)


def _kubelet_secret_dir(directory: Path, generation: int, files: dict[str, bytes]) -> None:
    """Lay out (or update) a Secret volume the way the kubelet does: files in a timestamped
    directory, ``..data`` a symlink to it swapped atomically, each key a symlink through
    ``..data``. A rotation is one rename, so readers never see half a pair."""
    target = directory / f"..gen_{generation}"
    target.mkdir()
    for name, content in files.items():
        (target / name).write_bytes(content)
        (target / name).chmod(0o600)
    tmp_link = directory / "..data_tmp"
    tmp_link.symlink_to(target.name)
    previous = (directory / "..data").resolve() if (directory / "..data").exists() else None
    os.replace(tmp_link, directory / "..data")
    for name in files:
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")
    if previous is not None:
        shutil.rmtree(previous)


def _served_leaf(port: int, verify: ssl.SSLContext) -> bytes:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        verify.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def _leaf_der(bundle_cert_pem: bytes) -> bytes:
    return x509.load_pem_x509_certificates(bundle_cert_pem)[0].public_bytes(Encoding.DER)


async def test_certificate_rotated_while_serving(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    """The real command serving from a kubelet-style Secret volume; the Secret is updated
    (new CA and certificate) under steady load on both fresh and kept-alive connections:
    no request fails and new handshakes get the new certificate."""
    await kmock.post(NODES, json=fleet_node(*NEW_NODE))
    first = generate_self_signed(ip_addresses=("127.0.0.1",))
    second = generate_self_signed(ip_addresses=("127.0.0.1",))
    secret = tmp_path / "tls"
    secret.mkdir()
    _kubelet_secret_dir(secret, 1, {"tls.crt": first.cert_pem, "tls.key": first.key_pem})
    both = trust(first.ca_pem + second.ca_pem)  # clients trust both CAs during a rollover
    bundle = tmp_path / "trusted.pem"
    bundle.write_bytes(first.ca_pem + second.ca_pem)
    server = {"certFile": str(secret / "tls.crt"), "keyFile": str(secret / "tls.key")}
    config = {"server": {**server, "workers": 1}}
    async with running_webhook(tmp_path, str(kmock.url), config, bundle) as proc:
        assert _served_leaf(proc.port, both) == _leaf_der(first.cert_pem)
        failures: list[str] = []
        answered = 0
        stop = asyncio.Event()

        async def hammer(name: str, keep_alive: bool) -> None:
            nonlocal answered
            limits = httpx.Limits(max_keepalive_connections=10 if keep_alive else 0)
            async with httpx.AsyncClient(
                base_url=proc.url, verify=both, limits=limits, timeout=10
            ) as c:
                i = 0
                while not stop.is_set():
                    i += 1
                    uid = f"{name}-{i}"
                    try:
                        answer = answer_of(await c.post(POD_PATH, content=pod_review(uid)), uid)
                        assert answer["allowed"] and "patch" in answer
                        answered += 1
                    except Exception as exc:
                        failures.append(f"{uid}: {exc!r}")

        tasks = [
            asyncio.create_task(hammer("fresh", False)),
            asyncio.create_task(hammer("kept", True)),
        ]
        await eventually(lambda: _async(answered >= 20), 20)
        await asyncio.to_thread(
            _kubelet_secret_dir,
            secret,
            2,
            {"tls.crt": second.cert_pem, "tls.key": second.key_pem},
        )
        seen = answered
        await eventually(lambda: _async(answered >= seen + 30), 20)
        stop.set()
        await asyncio.gather(*tasks)
        served = await asyncio.to_thread(_served_leaf, proc.port, both)
    assert failures == [], failures[:5]
    assert served == _leaf_der(second.cert_pem)


@pytest.mark.parametrize("workers", [1, 2])
async def test_sigterm_under_load_finishes_every_request(
    kmock: kmock.KubernetesEmulator, tmp_path: Path, workers: int
) -> None:
    """SIGTERM while many requests are in flight (their bodies still being uploaded): each
    gets a complete 200 answer with a real decision, and the process exits 0. With two
    pre-forked workers the supervisor forwards the signal and both drain."""
    await kmock.post(NODES, json=fleet_node(*NEW_NODE))
    tls_dir = tmp_path / "tls"
    bundle = generate_self_signed(ip_addresses=("127.0.0.1",))
    cert, key, ca = write_self_signed(tls_dir, bundle)
    server = {"certFile": str(cert), "keyFile": str(key), "requestTimeoutSeconds": 8}
    config = {"server": {**server, "workers": workers}}
    verify = trust(bundle.ca_pem)
    async with running_webhook(tmp_path, str(kmock.url), config, Path(ca)) as proc:
        started = 0
        all_started = asyncio.Event()
        n = 12

        async def slow_body(uid: str) -> AsyncIterator[bytes]:
            nonlocal started
            body = pod_review(uid)
            step = len(body) // 8 + 1
            for i in range(0, len(body), step):
                yield body[i : i + step]
                if i == 0:
                    started += 1
                    if started == n:
                        all_started.set()
                await asyncio.sleep(0.12)

        finished: list[float] = []

        async def one(uid: str) -> httpx.Response:
            async with httpx.AsyncClient(base_url=proc.url, verify=verify, timeout=20) as c:
                resp = await c.post(POD_PATH, content=slow_body(uid))
                finished.append(time.monotonic())
                return resp

        uids = [f"term-{i}" for i in range(n)]
        tasks = [asyncio.create_task(one(uid)) for uid in uids]
        async with asyncio.timeout(20):
            await all_started.wait()
        await asyncio.sleep(0.1)  # every request's head is at the server, bodies half sent
        proc.process.send_signal(signal.SIGTERM)
        terminated = time.monotonic()
        responses = await asyncio.gather(*tasks, return_exceptions=True)
        code = await asyncio.to_thread(proc.process.wait, 30)
        output = proc.log()[-3000:]
    problems = [f"{u}: {r!r}" for u, r in zip(uids, responses, strict=True) if not _ok(r)]
    assert problems == [], (problems[:3], output)
    for uid, resp in zip(uids, responses, strict=True):
        assert isinstance(resp, httpx.Response)
        answer = answer_of(resp, uid)
        assert answer["allowed"] is True
        # A real decision; with two workers, one may (rarely) still be listing the cluster,
        # and then its answer comes from the failure mode, which is just as complete.
        assert "patch" in answer or (workers > 1 and "not ready" in answer["warnings"][0])
    # Every request was still in flight when the signal arrived.
    assert len(finished) == n and min(finished) > terminated
    assert code == 0, output


def _ok(resp: object) -> bool:
    return isinstance(resp, httpx.Response) and resp.status_code == 200
