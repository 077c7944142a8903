"""The recorded answers, through the real API server's policy: every pod CREATE the recorded
answers hold (``tests/answers``: the synthetic cluster's predictor pods, the bundled sample's
pods, the recorded reviews) that the policy mode can serve is created with the
MutatingAdmissionPolicy bound and no webhook, and the API server writes the webhook's answer.

How, and why this way: the webhook's answer is decided in process by the production
``Admitter`` (default configuration, no memo) over the case's own cluster objects, and its digest
must be the recorded one, so the comparison is against the recorded answer itself. The
``PlacementTable`` objects are written from those decisions by the controller's own functions
(``decide_all`` on each key's pod, ``tables``), since the cases' clusters (5,000 synthetic nodes)
are not in this API server; the controller's reading of a live cluster is proven by
``test_e2e_policy``. Each pod is then created as a server-side dry run (``dryRun=All``):
admission runs in full, nothing is stored and nothing is scheduled, so a case costs one request
per pod. A pod is served when the policy's ``matchConditions`` send it and its key has a
placement; the written requirement annotation and affinity must equal the webhook's, the
policy's marker read as the webhook's.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from cudasched.knowledge import KnowledgeBase
from cudasched.placement.merge import INJECTED_KEY, MARKER
from cudasched.placement.mergecel import POLICY_MARKER
from cudasched.settings.config import WebhookConfig
from cudasched.vocab import labels as L
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.policy.controller import decide_all
from cudasched.webhook.policy.sources import may_need_gpu
from cudasched.webhook.policy.table import tables
from cudasched.webhook.state.clusterstate import ClusterState
from cudasched.workloads.policykey import KEY_VERSION, key_pod, pod_key
from tests.answers.recorder import RECORD, cases
from tests.harness.controlplane.plane import ControlPlane
from tests.harness.kube import Api
from tests.harness.policy import delete_tables, install_policy
from tests.support.admission import applied

JSON = dict[str, Any]
#: Synthetic predictor pods checked (of 2,000 recorded; the first 1,000 are distinct pods, the
#: rest repeat them): bounded so the module takes about a minute.
SYNTHETIC = 300


@dataclass
class Served:
    """The pods the policy can serve, with the webhook's (recorded) answer for each."""

    pods: list[tuple[str, JSON]] = field(default_factory=list)  # (answer key, pod)
    webhook: dict[str, JSON] = field(default_factory=dict)  # answer key -> pod after it
    placements: dict[str, Any] = field(default_factory=dict)  # policy key -> Placement
    recorded_mismatch: list[str] = field(default_factory=list)
    cases: set[str] = field(default_factory=set)


def _skipped(pod: JSON) -> bool:
    return bool(pod["metadata"].get("annotations", {}).get(L.ANN_SKIP))


def _served(kb: KnowledgeBase) -> Served:
    recorded = orjson.loads(RECORD.read_bytes())
    config = WebhookConfig.from_mapping({"decisionCacheBytes": 0})
    admitter = Admitter.from_config(config, kb)
    out = Served()
    for case, kind, objects, bodies in cases():
        if kind != "pod":
            continue
        state = ClusterState.from_objects(*objects, kb=kb)
        for number, body in enumerate(bodies[:SYNTHETIC] if case.startswith("synth") else bodies):
            review = orjson.loads(body)
            request = review["request"]
            pod = request.get("object")
            if request.get("operation") != "CREATE" or not pod or pod["spec"].get("nodeName"):
                continue
            name = f"default/{case}/{number}"
            answer = admitter.review("pod", body, state)
            if recorded.get(name) != _digest(answer):
                out.recorded_mismatch.append(name)
            namespace = request.get("namespace") or pod["metadata"].get("namespace", "default")
            key = pod_key(pod, namespace)
            if key is None or not may_need_gpu(pod) or _skipped(pod):
                continue
            found = decide_all(admitter, {key: key_pod(pod, namespace)}, state)
            if key not in found:
                continue
            out.placements[key] = found[key]
            out.pods.append((name, _for_api(pod, namespace, number)))
            out.webhook[name] = applied(review, orjson.loads(answer)["response"])
            out.cases.add(case)
    return out


def _digest(answer: bytes) -> str:
    """The recorder's digest of an answer."""
    return hashlib.sha256(answer).hexdigest()[:16]


def _for_api(pod: JSON, namespace: str, number: int) -> JSON:
    """``pod`` as a client would POST it: in its namespace, a name of its own, nothing the API
    server writes itself."""
    out = copy.deepcopy(pod)
    meta = out["metadata"]
    for field_ in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"):
        meta.pop(field_, None)
    meta.pop("generateName", None)
    meta["name"] = f"answer-{number}-{meta.get('name', 'pod')}"[:63].rstrip("-.")
    meta["namespace"] = namespace
    out.pop("status", None)
    return out


def _as_webhook_marks(affinity: Any) -> Any:
    """``affinity`` with the policy's marker written as the webhook's."""
    text = orjson.dumps(affinity).decode()
    return orjson.loads(
        text.replace(orjson.dumps(POLICY_MARKER).decode(), orjson.dumps(MARKER).decode())
    )


@dataclass
class Created:
    served: Served
    by_policy: dict[str, JSON]


@pytest.fixture(scope="module")
def created(
    plane: ControlPlane, api: Api, kb: KnowledgeBase, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Created]:
    served = _served(kb)
    install_policy(plane, tmp_path_factory.mktemp("policy-answers"))
    delete_tables(api)
    written = tables(served.placements, KEY_VERSION)  # one set per namespace
    for namespace in sorted({t["metadata"]["namespace"] for t in written}):
        api.ensure_namespace(namespace)
    for table in written:
        api.create(table)
    for namespace in sorted({p["metadata"]["namespace"] for _, p in served.pods}):
        api.ensure_namespace(namespace)
        accounts = {
            p["spec"].get("serviceAccountName") or "default"
            for _, p in served.pods
            if p["metadata"]["namespace"] == namespace
        }
        for account in sorted(accounts - {"default"}):
            path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}"
            if not api.exists(path):
                api.create(
                    {
                        "apiVersion": "v1",
                        "kind": "ServiceAccount",
                        "metadata": {"name": account, "namespace": namespace},
                    }
                )
    first = served.pods[0][1]
    api.wait_for(
        "the policy to place pods",
        lambda: (
            L.ANN_REQUIREMENT
            in api.create(first, strict=False, dry_run=True)["metadata"].get("annotations", {})
        ),
        timeout=60,
        interval=0.5,
    )
    by_policy = {name: api.create(pod, strict=False, dry_run=True) for name, pod in served.pods}
    yield Created(served, by_policy)
    delete_tables(api)


def test_the_webhooks_answers_are_the_recorded_ones(created: Created) -> None:
    assert created.served.recorded_mismatch == []


def test_every_case_has_pods_the_policy_serves(created: Created) -> None:
    assert {"synthetic-pods", "sample-pods"} <= created.served.cases
    assert len(created.served.pods) >= SYNTHETIC // 2


def test_the_policy_writes_the_webhooks_requirement(created: Created) -> None:
    differ = [
        name
        for name, pod in created.by_policy.items()
        if pod["metadata"].get("annotations", {}).get(L.ANN_REQUIREMENT)
        != created.served.webhook[name]["metadata"].get("annotations", {}).get(L.ANN_REQUIREMENT)
    ]
    assert differ == []


def test_the_policy_writes_the_webhooks_affinity(created: Created) -> None:
    differ = [
        name
        for name, pod in created.by_policy.items()
        if _as_webhook_marks(pod["spec"].get("affinity"))
        != created.served.webhook[name]["spec"].get("affinity")
    ]
    assert differ == []
    marked = [
        name
        for name, pod in created.by_policy.items()
        if INJECTED_KEY in orjson.dumps(pod["spec"].get("affinity")).decode()
    ]
    assert len(marked) >= len(created.by_policy) // 2
