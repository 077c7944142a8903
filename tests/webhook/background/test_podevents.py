"""The NoCompatibleNode Event on each pod of a controller no node can run, over HTTP in the
kmock API server: a controller's pod has no name at admission, so the pods are found after
they are stored (the namespace's unbound pods, by their controller) and each gets one Warning
Event regarding it (kind Pod, its name and uid), once; pods of another controller, bound pods,
pods the webhook did not judge get none, nor do any once a node that can run them joined."""

from __future__ import annotations

from typing import Any

import kmock
import pytest

from cudasched.kube.client import make_client
from cudasched.vocab import labels as L
from cudasched.webhook.admission.review import Placement
from cudasched.webhook.background.nofit import NoFitReporter
from cudasched.webhook.background.podevents import PodEvents, pod_reference
from cudasched.webhook.metrics import WebhookMetrics
from tests.support.builders import pod
from tests.support.k8s_schema import assert_valid_event
from tests.support.servers import events, eventually

PODS = "/api/v1/namespaces/ml/pods"
NOTE = "cudasched: no node can run CUDA 13.2; newest driver supports 12.8 (60 nodes)"
OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "train-7d9", "uid": "rs-1"}


def _owner_placement(uid: str | None = "rs-1", check: Any = None) -> Placement:
    return Placement(
        "apps", "ReplicaSet", "apps/v1", "ml", "train-7d9", uid, NOTE, check, for_owner=True
    )


def _replica(
    name: str,
    *,
    owner: dict[str, Any] | None = None,
    judged: bool = True,
    node: str | None = None,
) -> dict[str, Any]:
    annotations = {L.ANN_REQUIREMENT: "cuda>=13.2 (annotation)"} if judged else {}
    made = pod(name, "ml", annotations=annotations, node_name=node, generate_name="train-7d9-")
    made["metadata"]["uid"] = f"uid-{name}"
    ref = dict(owner if owner is not None else OWNER)
    made["metadata"]["ownerReferences"] = [{**ref, "controller": True}]
    return made


class _State:
    synced = True

    def __init__(self) -> None:
        self.fit = False

    def fits(self, key: Any, selection: Any) -> bool:
        return self.fit


def _counter(metrics: WebhookMetrics, result: str) -> float:
    value: float = metrics.events.labels(reason="NoCompatibleNode", result=result)._value.get()
    return value


def _pod_events(client: Any, state: _State, metrics: WebhookMetrics, **kw: Any) -> PodEvents:
    results = {
        r: metrics.events.labels(reason="NoCompatibleNode", result=r)
        for r in ("sent", "failed", "dropped", "no_client")
    }
    return PodEvents(
        reason="NoCompatibleNode",
        results=results,
        client_of=lambda: client,
        state_of=lambda: state,
        reporting_instance="test",
        **kw,
    )


def test_only_a_judged_unbound_pod_of_the_controller_is_a_subject() -> None:
    placement = _owner_placement()
    ref = pod_reference(placement, _replica("train-7d9-a"))
    assert ref is not None
    assert (ref.api_version, ref.kind, ref.name, ref.namespace, ref.uid) == (
        "v1",
        "Pod",
        "train-7d9-a",
        "ml",
        "uid-train-7d9-a",
    )
    other = {**OWNER, "name": "serve-1", "uid": "rs-2"}
    reborn = {**OWNER, "uid": "rs-old"}  # the same name, another incarnation
    not_controller = _replica("train-7d9-d")
    not_controller["metadata"]["ownerReferences"][0]["controller"] = False
    deleting = _replica("train-7d9-e")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-07T10:00:00Z"
    refused = [
        _replica("train-7d9-b", node="gpu-1"),
        _replica("train-7d9-c", owner=other),
        _replica("train-7d9-f", owner=reborn),
        _replica("train-7d9-g", judged=False),
        not_controller,
        deleting,
    ]
    assert [pod_reference(placement, p) for p in refused] == [None] * len(refused)
    # A controller whose uid admission did not see is matched by kind and name.
    assert pod_reference(_owner_placement(uid=None), _replica("train-7d9-f", owner=reborn))


async def test_each_pod_of_the_controller_gets_one_event(kmock: kmock.KubernetesEmulator) -> None:
    for made in (
        _replica("train-7d9-a"),
        _replica("train-7d9-b"),
        _replica("train-7d9-c", node="gpu-1"),
        _replica("serve-1-a", owner={**OWNER, "name": "serve-1", "uid": "rs-2"}),
    ):
        await kmock.post(PODS, json=made)
    metrics = WebhookMetrics()
    state = _State()
    client = make_client(server=str(kmock.url).rstrip("/"))
    sweeper = _pod_events(client, state, metrics)
    assert await sweeper.sweep(_owner_placement(check=("key", "selection"))) == 2
    found = events(kmock)
    for event in found:
        assert_valid_event(event)
    assert sorted((e["regarding"]["name"], e["regarding"]["uid"]) for e in found) == [
        ("train-7d9-a", "uid-train-7d9-a"),
        ("train-7d9-b", "uid-train-7d9-b"),
    ]
    assert {(e["regarding"]["kind"], e["regarding"]["apiVersion"]) for e in found} == {
        ("Pod", "v1")
    }
    assert {(e["type"], e["reason"], e["note"], e["action"]) for e in found} == {
        ("Warning", "NoCompatibleNode", NOTE, "Admit")
    }
    assert {e["metadata"]["namespace"] for e in found} == {"ml"}

    # Swept again (the next round): once per pod.
    await kmock.post(PODS, json=_replica("train-7d9-d"))
    assert await sweeper.sweep(_owner_placement(check=("key", "selection"))) == 1
    assert len(events(kmock)) == 3 and _counter(metrics, "sent") == 3

    # A node that can run them joined: no Event for the next pod.
    state.fit = True
    await kmock.post(PODS, json=_replica("train-7d9-e"))
    assert await sweeper.sweep(_owner_placement(check=("key", "selection"))) == 0
    assert len(events(kmock)) == 3


async def test_the_reporter_sweeps_the_pods_of_a_reported_controller(
    kmock: kmock.KubernetesEmulator,
) -> None:
    """A pod's admission reports its controller; the pods stored after it get their Events
    (the controller gets its own), and more sweeps than ``max_owners`` are dropped."""
    await kmock.post(PODS, json=_replica("train-7d9-a"))
    metrics = WebhookMetrics()
    client = make_client(server=str(kmock.url).rstrip("/"))
    reporter = NoFitReporter(
        metrics=metrics,
        client_of=lambda: client,
        lookup=lambda p: ...,
        state_of=_State,
        reporting_instance="test",
    )
    reporter.pods.delays = (0.05, 0.3, 60.0)  # the last round outlives the test
    reporter.pods.max_owners = 1
    await reporter.start()
    try:
        reporter.observe(_owner_placement())
        await eventually(lambda: len(events(kmock)) == 2)
        await kmock.post(PODS, json=_replica("train-7d9-b"))  # a replica made a little later
        await eventually(lambda: len(events(kmock)) == 3)
        other = Placement(
            "apps", "ReplicaSet", "apps/v1", "ml", "serve-1", "rs-2", NOTE, for_owner=True
        )
        reporter.observe(other)  # the one sweep allowed is still running
        await eventually(lambda: _counter(metrics, "dropped") == 1)
    finally:
        await reporter.stop()
    regarding = sorted(f"{e['regarding']['kind']}/{e['regarding']['name']}" for e in events(kmock))
    assert regarding == [
        "Pod/train-7d9-a",
        "Pod/train-7d9-b",
        "ReplicaSet/serve-1",  # its own Event is not a sweep: never dropped for one
        "ReplicaSet/train-7d9",
    ]


async def test_a_refused_list_is_counted_never_raised() -> None:
    class Refusing:
        def list(self, *args: Any, **kwargs: Any) -> Any:
            raise PermissionError("no RBAC")

    metrics = WebhookMetrics()
    sweeper = _pod_events(Refusing(), _State(), metrics)
    assert await sweeper.sweep(_owner_placement()) == 0
    assert _counter(metrics, "failed") == 1
    nobody = _pod_events(None, _State(), metrics)
    assert await nobody.sweep(_owner_placement()) == 0
    assert _counter(metrics, "no_client") == 1


@pytest.mark.parametrize("synced", [False, True])
def test_an_unsynced_snapshot_keeps_the_admissions_answer(synced: bool) -> None:
    state = _State()
    state.synced = synced
    state.fit = True
    sweeper = _pod_events(None, state, WebhookMetrics())
    assert sweeper._still_no_fit(_owner_placement(check=("key", "selection"))) is not synced


async def test_one_sweep_tells_a_pod_once_however_short_the_interval(
    kmock: kmock.KubernetesEmulator,
) -> None:
    await kmock.post(PODS, json=_replica("train-7d9-a"))
    client = make_client(server=str(kmock.url).rstrip("/"))
    sweeper = _pod_events(client, _State(), WebhookMetrics(), interval=0.0)
    told: set[str] = set()
    rounds = [await sweeper.sweep(_owner_placement(), told) for _ in range(2)]
    later = await sweeper.sweep(_owner_placement(), set())  # another sweep, past the interval
    assert (rounds, later, told) == ([1, 0], 1, {"uid-train-7d9-a"})
