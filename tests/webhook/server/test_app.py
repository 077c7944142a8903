"""The webhook's ASGI application, exercised as the API server uses it: a real uvicorn server on
127.0.0.1 with a self-signed certificate, requests over TLS verified against its CA, and the
ASGI callable driven directly where no network is needed.

The shared fake admission (``tests/support/fakeadmission``) plays admission where a test
needs to control what the decision does (block, raise, deny); one test runs the real Admitter
on the bundled cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.settings.config import WebhookConfig
from cudasched.webhook.server.app import WebhookApp
from cudasched.webhook.server.serving import RunningServer, serve_in_thread
from cudasched.webhook.state.source import StaticStateSource
from tests.support.admission import Unsynced, call_app, client, review
from tests.support.fakeadmission import FakeAdmission

DATA = Path(__file__).parents[2] / "data" / "admission"


@pytest.fixture()
def standin() -> FakeAdmission:
    return FakeAdmission()


@pytest.fixture()
def server(standin: FakeAdmission) -> Iterator[RunningServer]:
    cfg = WebhookConfig.from_mapping({"server": {"maxBodyBytes": 4096}})
    with serve_in_thread(object(), config=cfg, admission=standin) as srv:
        yield srv
    standin.release.set()


def metric(text: str, line_prefix: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_prefix + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# ---------------------------------------------------------------------- plain endpoints


def test_health_ready_and_metrics(server: RunningServer) -> None:
    with client(server) as c:
        assert c.get("/healthz").status_code == 200
        ready = c.get("/readyz")
        assert ready.status_code == 200 and ready.text.strip() == "ok"
        metrics = c.get("/metrics")
        assert metrics.status_code == 200
        assert metrics.headers["content-type"].startswith("text/plain")
        assert "cudasched_webhook_request_duration_seconds" in metrics.text
        assert "cudasched_cache_synced" in metrics.text
        assert c.head("/healthz").status_code == 200


def test_two_servers_keep_separate_metrics(server: RunningServer, standin: FakeAdmission) -> None:
    """Each app has its own registry: a second server in the same process starts cleanly
    and its counters do not include the first one's requests."""
    with client(server) as c:
        assert c.post("/mutate/pods", content=review()).status_code == 200
    with serve_in_thread(object(), admission=standin) as other, client(other) as c2:
        text = c2.get("/metrics").text
        assert (
            metric(
                text,
                'cudasched_webhook_requests_total{endpoint="/mutate/pods",outcome="unchanged"}',
            )
            == 0
        )
    with client(server) as c:
        text = c.get("/metrics").text
        assert (
            metric(
                text,
                'cudasched_webhook_requests_total{endpoint="/mutate/pods",outcome="unchanged"}',
            )
            == 1
        )


# ---------------------------------------------------------------------- request errors


def test_unknown_path_and_wrong_methods(server: RunningServer) -> None:
    with client(server) as c:
        assert c.get("/mutate/nodes").status_code == 404
        wrong = c.get("/mutate/pods")
        assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
        assert c.put("/mutate/inferenceservices", content=b"{}").status_code == 405
        assert c.post("/healthz", content=b"").status_code == 405


def test_oversized_bodies_are_refused(server: RunningServer, standin: FakeAdmission) -> None:
    big = review(padding="x" * 5000)
    with client(server) as c:
        declared = c.post("/mutate/pods", content=big)
        assert declared.status_code == 413
        assert "4096" in declared.text

    def chunks() -> Iterator[bytes]:  # no Content-Length: the server counts while reading
        for i in range(0, len(big), 1000):
            yield big[i : i + 1000]

    with client(server) as c:
        streamed = c.post("/mutate/pods", content=chunks())
        assert streamed.status_code == 413
    assert standin.calls == 0
    with client(server) as c:  # the server is still fine afterwards
        assert c.post("/mutate/pods", content=review()).status_code == 200


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1, 2]", orjson.dumps({"apiVersion": "v1", "kind": "Pod"}), b""],
)
def test_malformed_reviews_get_one_line_400(server: RunningServer, body: bytes) -> None:
    with client(server) as c:
        resp = c.post("/mutate/pods", content=body)
    assert resp.status_code == 400
    assert resp.text.count("\n") == 1 and resp.text.strip()


def test_uid_is_echoed_and_outcomes_counted(server: RunningServer, standin: FakeAdmission) -> None:
    with client(server) as c:
        for mode, uid in (("unchanged", "a-1"), ("patch", "b-2"), ("deny", "c-3")):
            standin.mode = mode
            resp = c.post("/mutate/inferenceservices", content=review(uid))
            assert resp.status_code == 200
            assert resp.headers["content-type"] == "application/json"
            answer = resp.json()["response"]
            assert answer["uid"] == uid
        text = c.get("/metrics").text
    for outcome in ("unchanged", "patched", "denied"):
        prefix = (
            f'cudasched_webhook_requests_total{{endpoint="/mutate/inferenceservices",'
            f'outcome="{outcome}"}}'
        )
        assert metric(text, prefix) == 1, outcome


# ---------------------------------------------------------------------- failure modes


@pytest.mark.parametrize("fail_closed", [False, True])
def test_not_synced_answers_by_failure_mode(fail_closed: bool) -> None:
    standin = FakeAdmission()
    cfg = WebhookConfig.from_mapping({"failClosed": fail_closed})
    with serve_in_thread(Unsynced(), config=cfg, admission=standin) as srv, client(srv) as c:
        ready = c.get("/readyz")
        assert ready.status_code == 503
        assert "waiting for the first list of nodes" in ready.text
        answer = c.post("/mutate/pods", content=review("u-9")).json()["response"]
        assert c.post("/mutate/pods", content=b"{").status_code == 400
    assert answer["uid"] == "u-9"
    assert answer["allowed"] is (not fail_closed)
    assert "not ready" in answer["warnings"][0] and len(answer["warnings"][0]) <= 120
    if fail_closed:
        assert answer["status"]["code"] == 503
    assert standin.calls == 0  # admission never ran on an unsynced snapshot


@pytest.mark.parametrize("fail_closed", [False, True])
def test_time_budget_overrun_is_answered_without_waiting(fail_closed: bool) -> None:
    standin = FakeAdmission("block")
    cfg = WebhookConfig.from_mapping(
        {"failClosed": fail_closed, "server": {"requestTimeoutSeconds": 0.3}}
    )
    try:
        with serve_in_thread(object(), config=cfg, admission=standin) as srv, client(srv) as c:
            answer = c.post("/mutate/pods", content=review("slow-1")).json()["response"]
            # The decision is still blocked: the answer came from the failure mode.
            assert standin.entered.is_set() and not standin.release.is_set()
            text = c.get("/metrics").text
            assert c.get("/healthz").status_code == 200
            standin.release.set()
    finally:
        standin.release.set()
    assert answer["uid"] == "slow-1"
    assert answer["allowed"] is (not fail_closed)
    assert "exceeded" in answer["warnings"][0]
    assert (
        metric(text, 'cudasched_webhook_fallbacks_total{endpoint="/mutate/pods",reason="timeout"}')
        == 1
    )


@pytest.mark.parametrize("fail_closed", [False, True])
def test_internal_error_is_answered_by_failure_mode(fail_closed: bool) -> None:
    cfg = WebhookConfig.from_mapping({"failClosed": fail_closed})
    with (
        serve_in_thread(object(), config=cfg, admission=FakeAdmission("raise")) as srv,
        client(srv) as c,
    ):
        resp = c.post("/mutate/pods", content=review("boom"))
    assert resp.status_code == 200
    answer = resp.json()["response"]
    assert answer["uid"] == "boom" and answer["allowed"] is (not fail_closed)
    if fail_closed:
        assert answer["status"]["code"] == 500


# ---------------------------------------------------------------------- the real Admitter


def test_real_admitter_on_the_bundled_cluster() -> None:
    from cudasched.cluster.snapshot import bundled_snapshot
    from cudasched.webhook.state.clusterstate import ClusterState

    snap = bundled_snapshot()
    state = ClusterState.from_objects(
        snap.nodes, snap.inference_services, snap.serving_runtimes, snap.cluster_serving_runtimes
    )
    body = (DATA / "pod-job-gpu.json").read_bytes()
    uid = json.loads(body)["request"]["uid"]
    with serve_in_thread(state) as srv, client(srv) as c:
        resp = c.post("/mutate/pods", content=body)
        text = c.get("/metrics").text
    assert resp.status_code == 200
    answer = resp.json()
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == uid and answer["response"]["allowed"] is True
    outcome = "patched" if "patch" in answer["response"] else "unchanged"
    assert (
        metric(
            text, f'cudasched_webhook_requests_total{{endpoint="/mutate/pods",outcome="{outcome}"}}'
        )
        == 1
    )


# ---------------------------------------------------------------------- ASGI invariants


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)


@pytest.fixture(scope="module")
def real_app() -> Iterator[WebhookApp]:
    """The production Admitter behind the ASGI app, on an empty synced cluster."""
    from cudasched.webhook.admission.admitter import Admitter
    from cudasched.webhook.state.clusterstate import ClusterState

    state = ClusterState.from_objects([], [], [], [])
    admission = Admitter.from_config(WebhookConfig())
    app = WebhookApp(admission, StaticStateSource(state), request_timeout=5)
    yield app
    app.close()


@settings(max_examples=60)
@given(
    uid=st.text(min_size=1, max_size=40),
    request=st.dictionaries(
        st.sampled_from(["operation", "kind", "object", "namespace", "subResource"]), _json
    ),
    garbage=st.binary(max_size=64),
    use_garbage=st.booleans(),
    path=st.sampled_from(["/mutate/pods", "/mutate/inferenceservices"]),
)
def test_every_body_gets_a_well_formed_answer(
    real_app: WebhookApp,
    uid: str,
    request: dict[str, Any],
    garbage: bytes,
    use_garbage: bool,
    path: str,
) -> None:
    """Whatever arrives, the server answers 200 with the request's uid or a one-line 400;
    never a 500 and never a hang."""
    if use_garbage:
        body = garbage
    else:
        body = orjson.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {**request, "uid": uid},
            }
        )
    status, out = call_app(real_app, path, body)
    assert status in (200, 400)
    if status == 200:
        answer = orjson.loads(out)
        assert answer["kind"] == "AdmissionReview"
        assert answer["response"]["uid"] == uid
    else:
        assert out.endswith(b"\n") and out.count(b"\n") == 1
