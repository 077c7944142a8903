"""The policy's CEL stays inside the API server's budgets for the largest table it supports: one
PlacementTable object at the controller's bounds in the pod's namespace (4,096 keys, most of
the 900,000 bytes it allows an object, a placement of 128 terms of 32 expressions), a pod
whose own affinity makes the cross product reach the limit of 128 terms, and one whose cross
product goes past it (the webhook leaves such a pod unconstrained; so must the policy, by its
own rule and not by running out of budget). The policy is switched to ``failurePolicy: Fail``
for the test, so a cost error would refuse the pod instead of silently admitting it
unplaced."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from cudasched.vocab import labels as L
from cudasched.vocab.placementtable import MAX_KEYS
from cudasched.webhook.policy.table import MAX_TABLE_BYTES, Placement, tables
from cudasched.workloads.policykey import KEY_VERSION, pod_key
from tests.harness.controlplane.plane import ControlPlane
from tests.harness.kube import Api
from tests.harness.policy import install_policy, table_path

NS = "e2e-policy-cost"
POLICY = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/cudasched-placement"
JSON = dict[str, Any]
TERMS, EXPRESSIONS = 128, 32


def _pod(name: str, user_terms: int) -> JSON:
    pod: JSON = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "serviceAccountName": "default",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.local/cost/probe:1",
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1"},
                        "requests": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
    }
    if user_terms:
        terms = [
            {"matchExpressions": [{"key": f"zone-{i}", "operator": "Exists"}]}
            for i in range(user_terms)
        ]
        pod["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
        }
    return pod


def _big_placement() -> Placement:
    terms = tuple(
        {
            "matchExpressions": [
                {"key": f"cudasched.io/k{j}", "operator": "In", "values": [str(i), str(j)]}
                for j in range(EXPRESSIONS)
            ]
        }
        for i in range(TERMS)
    )
    return Placement("cuda>=12.4 (cost probe)", terms)


@pytest.fixture(scope="module")
def table(plane: ControlPlane, api: Api, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The table, written as the controller writes it; its name."""
    install_policy(plane, tmp_path_factory.mktemp("policy-cost"))
    api.ensure_namespace(NS)
    small = Placement("x", None)
    entries = {f"{KEY_VERSION}|{NS}|{i:05d}|{'x' * 100}": small for i in range(MAX_KEYS - 2)}
    for name in ("fits", "past"):
        key = pod_key(_pod(name, 0), NS)
        assert key is not None
        entries[key] = _big_placement()
    (obj,) = tables(entries, KEY_VERSION)  # one object: the bounds of one
    assert len(orjson.dumps(obj)) > MAX_TABLE_BYTES * 0.8
    api.create(obj)
    api.patch(POLICY, {"spec": {"failurePolicy": "Fail"}})
    name = obj["metadata"]["name"]
    try:
        yield name
    finally:
        api.patch(POLICY, {"spec": {"failurePolicy": "Ignore"}})
        api.delete(table_path(NS, name))


def _placed(created: JSON) -> bool:
    return L.ANN_REQUIREMENT in created["metadata"].get("annotations", {})


def test_the_largest_table_places_within_the_budget(table: str, api: Api) -> None:
    # the API server's informers pick the table up within moments
    names = itertools.count()
    api.wait_for(
        "the policy to read the table",
        lambda: _placed(api.create(_pod(f"warm-{next(names)}", 0), strict=False)),
        timeout=60,
        interval=1.0,
    )
    created = api.create(_pod("fits", 1))  # 1 user term x 128 of ours: 128 terms
    assert _placed(created)
    terms = created["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert len(terms) == TERMS
    assert all(len(t["matchExpressions"]) == 1 + 1 + EXPRESSIONS for t in terms)


def test_past_the_merge_limit_the_pod_is_left_as_the_webhook_leaves_it(
    table: str, api: Api
) -> None:
    created = api.create(_pod("past", 4))  # 4 x 128: past the limit of 128 terms
    assert not _placed(created)
    terms = created["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert len(terms) == 4


def test_the_table_is_within_etcds_object_limit(table: str, api: Api) -> None:
    stored = api.get(table_path(NS, table))
    assert len(orjson.dumps(stored)) < 1_500_000
