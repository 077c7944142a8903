"""Recording Events (events.k8s.io/v1), against the kmock API server with the real lightkube
client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import kmock as kmock_lib
import pytest
from lightkube import AsyncClient

from cudasched.kube.client import make_client
from cudasched.kube.events import (
    FIELD_MAX_CHARS,
    NOTE_MAX_CHARS,
    EventRecorder,
    ObjectReference,
    OncePerInterval,
    record_event,
)
from tests.support.k8s_schema import assert_valid_event

EVENTS = kmock_lib.resource("events.k8s.io/v1/events")
CORE_EVENTS = kmock_lib.resource("v1/events")
POD = ObjectReference(api_version="v1", kind="Pod", name="llm-0", uid="pod-uid", namespace="ml")


@pytest.fixture
async def client(kmock: Any) -> AsyncIterator[AsyncClient]:
    c = make_client(server=str(kmock.url).rstrip("/"))
    yield c
    await c.close()


def stored_events(kmock: Any) -> list[dict[str, Any]]:
    return [dict(obj.raw) for (res, _ns, _name), obj in kmock.objects.items() if res == EVENTS]


async def test_event_regarding_a_namespaced_object(kmock: Any, client: AsyncClient) -> None:
    await record_event(
        client,
        regarding=POD,
        type="Warning",
        reason="NoCompatibleNode",
        action="Admit",
        note="no node runs CUDA 12.4",
        reporting_controller="cudasched-webhook",
        reporting_instance="cudasched-webhook-7d9f",
        namespace="elsewhere",  # an Event lives with the namespaced object it is about
    )
    (event,) = stored_events(kmock)
    assert_valid_event(event)
    assert event["metadata"]["namespace"] == "ml"
    assert event["metadata"]["name"].startswith("llm-0.")
    assert event["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "llm-0",
        "namespace": "ml",
        "uid": "pod-uid",
    }
    assert event["type"] == "Warning"
    assert event["reason"] == "NoCompatibleNode"
    assert event["action"] == "Admit"
    assert event["note"] == "no node runs CUDA 12.4"
    assert event["reportingController"] == "cudasched-webhook"
    assert event["reportingInstance"] == "cudasched-webhook-7d9f"
    assert "deprecatedSource" not in event  # no host given
    assert not [res for (res, _ns, _name) in kmock.objects if res == CORE_EVENTS]


async def test_recorder_binds_controller_namespace_and_host(
    kmock: Any, client: AsyncClient
) -> None:
    recorder = EventRecorder(
        client,
        reporting_controller="cudasched-agent",
        reporting_instance="gpu-1",
        host="gpu-1",
        action="Probe",
    )
    node = ObjectReference(api_version="v1", kind="Node", name="gpu-1")
    await recorder.record(node, type="Normal", reason="A", note="first")
    await recorder.record(node, type="Warning", reason="B" * 300, note="x" * 5000)
    events = sorted(stored_events(kmock), key=lambda e: e["reason"])
    for event in events:
        assert_valid_event(event)
    assert [e["reason"] for e in events] == ["A", "B" * FIELD_MAX_CHARS]
    assert {e["metadata"]["namespace"] for e in events} == {"default"}
    assert len({e["metadata"]["name"] for e in events}) == 2  # never the same name twice
    assert events[0]["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-1"}
    assert events[0]["action"] == "Probe"
    assert events[1]["deprecatedSource"] == {"component": "cudasched-agent", "host": "gpu-1"}
    assert events[1]["note"] == "x" * NOTE_MAX_CHARS


async def test_api_errors_propagate(kmock: Any, client: AsyncClient) -> None:
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
    with pytest.raises(Exception, match="403"):
        await record_event(
            client,
            regarding=POD,
            type="Normal",
            reason="R",
            note="n",
            reporting_controller="c",
            reporting_instance="i",
        )


def test_one_event_per_subject_per_interval_and_a_bounded_memory() -> None:
    now = [0.0]
    gate: OncePerInterval[str] = OncePerInterval(600.0, 2, clock=lambda: now[0])
    assert gate.due("a")
    gate.sent("a")
    now[0] = 599.0
    assert not gate.due("a")  # inside the interval
    assert gate.due("b")  # asking does not remember: a send that failed leaves it due
    now[0] = 600.0
    assert gate.due("a")
    gate.sent("a")
    gate.sent("b")
    gate.sent("c")  # a third subject: the one sent longest ago ("a") is forgotten
    assert gate.due("a") and not gate.due("b") and not gate.due("c")
