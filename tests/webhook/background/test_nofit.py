"""NoCompatibleNode Events and the gauge, end to end: the real HTTPS server and watch cache,
Events recorded over HTTP in the kmock API server.

An InferenceService that needs CUDA 12.9 is admitted into a cluster whose newest driver runs
CUDA 12.8: the answer warns at once, and once the service is stored the webhook records one
Warning Event regarding it (rate-limited, never for a dry run, never for a service that is not
stored) and counts it in ``cudasched_webhook_no_compatible_node_objects`` until a node that can
run it joins.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx
import kmock
import orjson
import pytest

from cudasched.webhook.admission.review import Placement
from cudasched.webhook.background.nofit import NoFitReporter
from cudasched.webhook.metrics import WebhookMetrics
from cudasched.webhook.server.app import ISVC_PATH
from tests.support.admission import fleet_node, nodes, runtimes
from tests.support.k8s_schema import assert_valid_event
from tests.support.servers import EVENTS, events, eventually, make_cache, serving, trust

DATA = Path(__file__).parents[2] / "data" / "admission"
NODES = "/api/v1/nodes"
ISVCS = "/apis/serving.kserve.io/v1beta1/namespaces/ml/inferenceservices"
CLUSTER_RUNTIMES = "/apis/serving.kserve.io/v1alpha1/clusterservingruntimes"
GAUGE = re.compile(
    rb'^cudasched_webhook_no_compatible_node_objects\{kind="InferenceService"\} (\S+)$', re.M
)


def isvc_review(uid: str, *, dry_run: bool = False, operation: str = "CREATE") -> bytes:
    review = json.loads((DATA / "isvc-create.json").read_text(encoding="utf-8"))
    review["request"]["uid"] = uid
    review["request"]["dryRun"] = dry_run
    review["request"]["operation"] = operation
    if operation == "UPDATE":
        review["request"]["object"]["metadata"]["uid"] = "isvc-uid-1"
        review["request"]["object"]["metadata"]["generation"] = 2
    return orjson.dumps(review)


def stored_isvc() -> dict[str, Any]:
    obj = json.loads((DATA / "isvc-create.json").read_text(encoding="utf-8"))["request"]["object"]
    obj["metadata"]["uid"] = "isvc-uid-1"
    return obj


async def gauge(client: httpx.AsyncClient) -> float:
    found = GAUGE.search((await client.get("/metrics")).content)
    assert found is not None
    return float(found.group(1))


async def counter(client: httpx.AsyncClient, result: str) -> float:
    pattern = rb'^cudasched_webhook_events_total\{reason="NoCompatibleNode",result="%s"\} (\S+)$'
    found = re.search(pattern % result.encode(), (await client.get("/metrics")).content, re.M)
    return float(found.group(1)) if found else 0.0


async def populate(emulator: Any) -> None:
    for node in nodes():
        await emulator.post(NODES, json=node)
    for runtime in runtimes():
        await emulator.post(CLUSTER_RUNTIMES, json=runtime)


async def test_event_gauge_rate_limit_and_dry_run(kmock: kmock.KubernetesEmulator) -> None:
    await populate(kmock)
    cache = make_cache(str(kmock.url))
    async with (
        serving(cache, {}) as srv,
        httpx.AsyncClient(base_url=srv.url, verify=trust(srv.ca_pem)) as c,
    ):
        await eventually(lambda: cache.synced)
        # A dry run warns like the real request but records nothing.
        dry = (await c.post(ISVC_PATH, content=isvc_review("dry-1", dry_run=True))).json()
        assert dry["response"]["allowed"] and "no node can run" in dry["response"]["warnings"][0]

        answer = (await c.post(ISVC_PATH, content=isvc_review("create-1"))).json()
        assert answer["response"]["allowed"] is True
        assert "no node can run" in answer["response"]["warnings"][0]
        assert events(kmock) == []  # not before the service is stored (it has no uid yet)

        await kmock.post(ISVCS, json=stored_isvc())
        await eventually(lambda: len(events(kmock)) == 1)
        (event,) = events(kmock)
        assert_valid_event(event)
        assert event["type"] == "Warning" and event["reason"] == "NoCompatibleNode"
        assert event["action"] == "Admit"
        assert event["reportingController"] == "cudasched-webhook"
        assert event["regarding"] == {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "name": "llm-next",
            "namespace": "ml",
            "uid": "isvc-uid-1",
        }
        assert event["metadata"]["namespace"] == "ml"
        assert "no node can run" in event["note"] and "12.9" in event["note"]
        assert await gauge(c) == 1

        # The same service admitted again (an UPDATE) within the interval: no second Event.
        again = await c.post(ISVC_PATH, content=isvc_review("update-1", operation="UPDATE"))
        assert again.json()["response"]["allowed"] is True
        await eventually(lambda: counter(c, "rate_limited"))
        assert len(events(kmock)) == 1 and await counter(c, "sent") == 1
        assert await gauge(c) == 1

        # A node that can run CUDA 12.9 joins: the service no longer counts.
        new = fleet_node("b200-r575", "NVIDIA-B200", "575.57.08")
        await kmock.post(NODES, json=new)
        await eventually(lambda: len(cache.state.nodes) == len(nodes()) + 1)
        assert await gauge(c) == 0
        assert len(events(kmock)) == 1


async def test_event_failures_never_reach_admission(kmock: kmock.KubernetesEmulator) -> None:
    """The API server refusing Events (no RBAC, say) is logged and counted; answers are
    unchanged and on time."""
    await populate(kmock)
    await kmock.post(ISVCS, json=stored_isvc())
    (
        kmock[kmock.action.CREATE, EVENTS]
        << 403
        << {
            "apiVersion": "v1",
            "kind": "Status",
            "status": "Failure",
            "reason": "Forbidden",
            "code": 403,
        }
    )
    cache = make_cache(str(kmock.url))
    async with (
        serving(cache, {}) as srv,
        httpx.AsyncClient(base_url=srv.url, verify=trust(srv.ca_pem)) as c,
    ):
        await eventually(lambda: cache.synced)
        answer = (await c.post(ISVC_PATH, content=isvc_review("create-1"))).json()
        assert answer["response"]["allowed"] is True
        await eventually(lambda: counter(c, "failed"))
        assert await counter(c, "sent") == 0
        assert await gauge(c) == 1


async def test_service_never_stored_gets_no_event() -> None:
    """A CREATE whose object never reaches the cache (denied later by another webhook or by
    validation) is not reported; and repeats beyond the bound are forgotten, oldest first."""
    metrics = WebhookMetrics()
    state = type("S", (), {"synced": True, "fits": lambda self, k, t: False})()
    reporter = NoFitReporter(
        metrics=metrics,
        client_of=lambda: pytest.fail("nothing may be sent"),
        lookup=lambda p: None,
        state_of=lambda: state,
        reporting_instance="test",
        store_wait=0.2,
        max_tracked=3,
    )
    await reporter.start()
    try:
        for i in range(5):
            reporter.observe(
                Placement("serving.kserve.io", "InferenceService", "v", "ml", f"s{i}", None, "x")
            )
        await eventually(
            lambda: (
                metrics.events.labels(reason="NoCompatibleNode", result="not_stored")._value.get()
                == 5
            )
        )
        assert [p.name for p in reporter.tracked] == ["s2", "s3", "s4"]
        await asyncio.sleep(0.3)
        reporter.refresh()  # gone from the cache past the grace period: no longer counted
        assert reporter.tracked == []
    finally:
        await reporter.stop()
