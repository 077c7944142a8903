"""What the webhook says about the knowledge it follows: an Event regarding its own Pod only
when a check is news (a swap, a failure that starts, changes or lasts another hour, a
recovery), every check counted, and Events sent on the server's loop to a real lightkube
client against kmock."""

from __future__ import annotations

import asyncio
import calendar
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kmock as kmock_lib
import pytest
from lightkube import AsyncClient

from cudasched.knowledge.bundlecheck import Sourced, builtin_knowledge, knowledge_of
from cudasched.knowledge.following import (
    Followed,
    FollowOutcome,
    FollowResult,
    failed,
    started,
    unchanged,
    updated,
)
from cudasched.kube.client import make_client
from cudasched.kube.events import ObjectReference
from cudasched.webhook.background.knowledgereport import KnowledgeReporter, own_pod
from cudasched.webhook.metrics import WebhookMetrics
from tests.support.bundles import planted
from tests.support.k8s_schema import assert_valid_event
from tests.support.servers import eventually

EVENTS = kmock_lib.resource("events.k8s.io/v1/events")
REF = "registry.example.com/cudasched/knowledge:stable"
POD = ObjectReference("v1", "Pod", "cudasched-webhook-7d9f", uid="uid-7d9f", namespace="cudasched")
NEWER = knowledge_of(Sourced(planted(["new-release"], version="2026.09.15"), REF))


def test_own_pod_is_named_by_the_downward_api(tmp_path: Path) -> None:
    env = {"POD_NAME": "cudasched-webhook-7d9f", "POD_NAMESPACE": "cudasched", "POD_UID": "u1"}
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("from-the-account\n")
    full = own_pod(env, namespace_file)
    from_file = own_pod({"POD_NAME": "w-1"}, namespace_file)
    outside = own_pod({}, namespace_file)
    no_namespace = own_pod({"POD_NAME": "w-1"}, tmp_path / "missing")
    assert full == ObjectReference("v1", "Pod", "cudasched-webhook-7d9f", "u1", "cudasched")
    assert from_file == ObjectReference("v1", "Pod", "w-1", None, "from-the-account")
    assert outside is None and no_namespace is None


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _said(metrics: WebhookMetrics, reason: str) -> float:
    return float(metrics.events.labels(reason=reason, result="no_client")._value.get())


def _sequence() -> list[tuple[FollowOutcome, float]]:
    """A follower's checks, each with the time it happened."""
    state: Followed = started(REF, builtin_knowledge())
    steps: list[tuple[FollowOutcome, float]] = []

    def step(outcome: FollowOutcome, at: float) -> None:
        nonlocal state
        state = outcome.followed
        steps.append((outcome, at))

    step(unchanged(state, 0), 0)
    step(failed(state, FollowResult.REFUSED, "digest", "blob altered", 10), 10)
    step(failed(state, FollowResult.REFUSED, "digest", "blob altered", 20), 20)
    step(failed(state, FollowResult.REFUSED, "digest", "blob altered", 3700), 3700)
    step(failed(state, FollowResult.UNREACHABLE, "timeout", "no answer", 3710), 3710)
    step(unchanged(state, 3720), 3720)
    step(unchanged(state, 3730), 3730)
    step(updated(state, NEWER, "sha256:" + "a" * 64, 3740), 3740)
    return steps


def test_an_event_only_when_a_check_is_news() -> None:
    clock = _Clock()
    metrics = WebhookMetrics()
    reporter = KnowledgeReporter(metrics, clock=clock, repeat_seconds=3600)
    for outcome, at in _sequence():
        clock.now = 1000.0 + at
        reporter.observe(outcome)
    said = {
        reason: _said(metrics, reason)
        for reason in (
            "KnowledgeRefused",
            "KnowledgeUnreachable",
            "KnowledgeRecovered",
            "KnowledgeUpdated",
        )
    }
    knowledge = metrics.knowledge_metrics()
    checks = {
        result.value: knowledge.checks.labels(outcome=result.value)._value.get()
        for result in FollowResult
    }
    digest = knowledge.failures.labels(reason="digest")._value.get()
    # The refusal said when it started and again an hour later; the recovery once.
    assert said == {
        "KnowledgeRefused": 2,
        "KnowledgeUnreachable": 1,
        "KnowledgeRecovered": 1,
        "KnowledgeUpdated": 1,
    }
    assert checks == {"updated": 1, "unchanged": 3, "refused": 3, "unreachable": 1}
    assert digest == 3 and knowledge.consecutive_failures._value.get() == 0


def _age(metrics: WebhookMetrics) -> float:
    """The age gauge as a scrape reads it (evaluated then)."""
    (line,) = [
        line
        for line in metrics.render().decode().splitlines()
        if line.startswith("cudasched_knowledge_bundle_age_seconds ")
    ]
    return float(line.split()[1])


def test_the_knowledge_in_use_and_its_age() -> None:
    metrics = WebhookMetrics()
    builtin, newer = builtin_knowledge().kb.provenance, NEWER.kb.provenance
    noon = 43_200.0 + calendar.timegm(newer.date.timetuple())
    reporter = KnowledgeReporter(metrics, wall=lambda: noon)
    reporter.in_use(builtin)
    old_age = _age(metrics)
    reporter.in_use(newer)
    text = metrics.render().decode()
    info = [line for line in text.splitlines() if line.startswith("cudasched_knowledge_info{")]
    (one,) = info
    assert 'version="2026.09.15"' in one and one.endswith(" 1.0"), "one series: the one in use"
    assert _age(metrics) == 43_200.0
    assert old_age == 43_200.0 + (newer.date - builtin.date).days * 86_400


@pytest.fixture
async def client(kmock: Any) -> AsyncIterator[AsyncClient]:
    c = make_client(server=str(kmock.url).rstrip("/"))
    yield c
    await c.close()


async def test_a_refusal_is_an_event_on_the_webhooks_pod(kmock: Any, client: AsyncClient) -> None:
    metrics = WebhookMetrics()
    reporter = KnowledgeReporter(
        metrics, client_of=lambda: client, regarding=POD, reporting_instance="w-7d9f"
    )
    reporter.start(asyncio.get_running_loop())
    state = started(REF, builtin_knowledge())
    refused = failed(state, FollowResult.REFUSED, "schema", "schema 2, expected 1", 5.0)
    await asyncio.to_thread(reporter.observe, refused)  # the follower's thread
    sent = metrics.events.labels(reason="KnowledgeRefused", result="sent")
    await eventually(lambda: sent._value.get() == 1)
    reporter.stop()
    (event,) = [dict(o.raw) for (res, _ns, _n), o in kmock.objects.items() if res == EVENTS]
    assert_valid_event(event)
    assert event["regarding"]["name"] == POD.name and event["regarding"]["uid"] == POD.uid
    assert (event["type"], event["reason"]) == ("Warning", "KnowledgeRefused")
    assert event["metadata"]["namespace"] == "cudasched"
    assert "refused (schema)" in event["note"] and event["reportingInstance"] == "w-7d9f"
