"""The policy mode on a real Kubernetes 1.37 API server: cudasched's placement as a
MutatingAdmissionPolicy the API server runs itself, its PlacementTables kept by the policy
controller, no webhook on the request path.

The proof of equivalence: 300 generated pods (the placement test's mix: KServe predictors on
Alauda-labelled runtimes, well-known images, annotated pods, pods with their own nodeSelector or
required affinity, opted-out and CPU pods) are created once through the webhook (its answers
recorded, and the controller learns their keys from the running pods), deleted, and created
again with no webhook registered: every pod's requirement annotation is the webhook's, its
required affinity admits exactly the nodes the webhook's admitted (matched with Kubernetes'
node-affinity rules over every node), and the scheduler binds none to a node
``cudasched explain`` says cannot run it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cudasched.vocab import labels as L
from cudasched.vocab.nodeaffinity import Node, RequiredNodeAffinity
from cudasched.webhook.policy.controller import LEASE_NAME
from cudasched.workloads.policykey import pod_key
from tests.harness.controlplane.plane import ControlPlane
from tests.harness.fleet import cudasched_command
from tests.harness.kube import Api
from tests.harness.policy import (
    Controller,
    controller_process,
    install_policy,
    wait_for_keys,
)
from tests.harness.webhook import LiveWebhook, registered
from tests.harness.workloads import Workloads, generate, runtimes

NS = "e2e-policy"
PODS = 300
JSON = dict[str, Any]
INJECTED = "cudasched.io/injected"


@dataclass
class Installed:
    objects: list[JSON]
    controller: Controller
    workdir: Path


@pytest.fixture(scope="module")
def installed(
    plane: ControlPlane, api: Api, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Installed]:
    workdir = tmp_path_factory.mktemp("policy")
    objects = install_policy(plane, workdir)
    with controller_process(workdir, plane.kubeconfig, "replica-a") as controller:
        # A namespace without keys has no table: the controller's lease says it runs.
        lease = "/apis/coordination.k8s.io/v1/namespaces/cudasched/leases/" + LEASE_NAME
        api.wait_for(
            "the controller's lease",
            lambda: (
                api.exists(lease) and api.get(lease)["spec"].get("holderIdentity") == "replica-a"
            ),
            timeout=120,
        )
        yield Installed(objects, controller, workdir)


def _markers(pod: JSON) -> set[str]:
    terms = (
        pod["spec"]
        .get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms", [])
    )
    return {
        e["operator"] for t in terms for e in t.get("matchExpressions", []) if e["key"] == INJECTED
    }


def _admitted(pod: JSON, nodes: list[Node]) -> frozenset[str]:
    affinity = RequiredNodeAffinity.from_pod_spec(pod["spec"])
    return frozenset(n.name for n in affinity.filter(nodes))


def _create_all(
    plane: ControlPlane, work: Workloads, path: Path
) -> subprocess.CompletedProcess[str]:
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": work.pods}))
    return plane.kubectl("create", "--validate=strict", "-f", str(path), timeout=600)


def _stored(api: Api, work: Workloads) -> dict[str, JSON]:
    names = {p["metadata"]["name"] for p in work.pods}
    pods = {p["metadata"]["name"]: p for p in api.list(f"/api/v1/namespaces/{NS}/pods")}
    assert names <= pods.keys()
    return {n: pods[n] for n in names}


def _delete_all(plane: ControlPlane, api: Api) -> None:
    plane.kubectl("delete", "pods", "--all", "-n", NS, "--force", "--grace-period=0")
    api.wait_for(
        "the pods gone", lambda: not list(api.list(f"/api/v1/namespaces/{NS}/pods")), timeout=120
    )


@dataclass
class Rounds:
    work: Workloads
    webhook: dict[str, JSON]
    policy: dict[str, JSON]
    nodes: list[Node]
    policy_stderr: str
    pods_file: Path


@pytest.fixture(scope="module")
def rounds(
    plane: ControlPlane,
    api: Api,
    webhook: LiveWebhook,
    installed: Installed,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Rounds]:
    tmp = tmp_path_factory.mktemp("rounds")
    api.ensure_namespace(NS)
    work = generate(PODS, NS)
    for name, objs in (("runtimes", runtimes()), ("isvcs", work.services)):
        path = tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump_all(objs))
        plane.kubectl("apply", "--validate=strict", "-f", str(path))
    webhook.wait_cached("inferenceservices", len(work.services))
    pods_file = tmp / "pods.yaml"
    # Round 1: the webhook decides; the controller learns the keys from the running pods.
    with registered(api, webhook.registration(only_namespaces=[NS])):
        _create_all(plane, work, pods_file)
        by_webhook = _stored(api, work)
    wanted = {
        k
        for p in work.pods
        if "cudasched.io/requirement"
        in by_webhook[p["metadata"]["name"]]["metadata"].get("annotations", {})
        and (k := pod_key(p, NS)) is not None
    }
    wait_for_keys(api, wanted, controller=installed.controller)
    _delete_all(plane, api)
    # Round 2: no webhook registered; the API server's policy decides.
    done = _create_all(plane, work, pods_file)
    by_policy = _stored(api, work)
    nodes = [Node.from_k8s(n) for n in api.list("/api/v1/nodes")]
    try:
        yield Rounds(work, by_webhook, by_policy, nodes, done.stderr, pods_file)
    finally:
        plane.kubectl("delete", "namespace", NS, "--wait=false")


def test_policy_installs_with_strict_field_validation(installed: Installed, api: Api) -> None:
    kinds = {o["kind"] for o in installed.objects}
    assert {
        "CustomResourceDefinition",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    } <= kinds
    hooks = api.get("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations")
    assert hooks["items"] == []  # no webhook on the request path


def test_the_unplaced_warning_policy_type_checks(installed: Installed, api: Api) -> None:
    path = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/cudasched-unplaced"

    def checked() -> bool:
        return "typeChecking" in api.get(path).get("status", {})

    api.wait_for("the policy's type checking", checked, timeout=60)
    warnings = api.get(path)["status"]["typeChecking"].get("expressionWarnings", [])
    assert warnings == []


def test_every_pod_gets_the_webhooks_requirement(rounds: Rounds) -> None:
    differ = [
        name
        for name, pod in rounds.policy.items()
        if pod["metadata"].get("annotations", {}).get(L.ANN_REQUIREMENT)
        != rounds.webhook[name]["metadata"].get("annotations", {}).get(L.ANN_REQUIREMENT)
    ]
    assert differ == []
    placed = sum(
        1
        for p in rounds.policy.values()
        if L.ANN_REQUIREMENT in p["metadata"].get("annotations", {})
    )
    assert placed >= PODS // 2


def test_every_pods_affinity_admits_the_webhooks_nodes(rounds: Rounds) -> None:
    differ = [
        name
        for name, pod in rounds.policy.items()
        if _admitted(pod, rounds.nodes) != _admitted(rounds.webhook[name], rounds.nodes)
    ]
    assert differ == []
    narrowed = [
        n for n, p in rounds.policy.items() if len(_admitted(p, rounds.nodes)) < len(rounds.nodes)
    ]
    assert len(narrowed) >= PODS // 3


def test_the_policy_placed_them_and_never_with_the_webhook(rounds: Rounds) -> None:
    assert all(_markers(p) <= {"DoesNotExist"} for p in rounds.webhook.values())
    assert all(_markers(p) <= {"NotIn"} for p in rounds.policy.values())
    assert sum(1 for p in rounds.policy.values() if _markers(p) == {"NotIn"}) >= PODS // 3


def test_user_terms_are_kept(rounds: Rounds) -> None:
    by_name = {p["metadata"]["name"]: p for p in rounds.work.pods}
    kept = 0
    for name, pod in rounds.policy.items():
        wanted = by_name[name]["spec"]
        if "nodeSelector" in wanted:
            assert pod["spec"]["nodeSelector"] == wanted["nodeSelector"]
        if "affinity" in wanted:
            mine = wanted["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"][0]["matchExpressions"][0]
            terms = pod["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"]
            assert all(mine in t["matchExpressions"] for t in terms), name
            kept += 1
    assert kept == PODS // 8


def test_the_scheduler_binds_none_where_explain_says_it_cannot_run(
    rounds: Rounds, plane: ControlPlane, api: Api
) -> None:
    names = set(rounds.policy)

    def settled() -> bool:
        pods = {p["metadata"]["name"]: p for p in api.list(f"/api/v1/namespaces/{NS}/pods")}
        return all(
            pods[n]["spec"].get("nodeName")
            or any(
                c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in pods[n].get("status", {}).get("conditions", [])
            )
            for n in names
        )

    api.wait_for("every pod bound or unschedulable", settled, timeout=300, interval=1.0)
    pods = {p["metadata"]["name"]: p for p in api.list(f"/api/v1/namespaces/{NS}/pods")}
    explained = subprocess.run(
        [
            *cudasched_command(),
            "explain",
            "--workload",
            str(rounds.pods_file),
            "--kubeconfig",
            str(plane.kubeconfig),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert explained.returncode == 0, explained.stderr
    report = json.loads(explained.stdout)
    eligible = {
        row["summary"]["workload"].rsplit("/", 1)[-1]: {
            n["node"] for n in row["nodes"] if n["eligible"]
        }
        for row in report.get("workloads", [report])
    }
    wrong = [
        f"{n} on {p['spec']['nodeName']}"
        for n, p in pods.items()
        if n in names
        and p["spec"].get("nodeName")
        and p["metadata"].get("annotations", {}).get("cudasched.io/skip") != "true"
        and p["spec"]["nodeName"] not in eligible[n]
    ]
    assert wrong == []
    assert sum(1 for n in names if pods[n]["spec"].get("nodeName")) >= PODS // 2


def test_a_gpu_pod_the_tables_do_not_know_is_warned_about(
    installed: Installed, plane: ControlPlane, api: Api, tmp_path: Path
) -> None:
    api.ensure_namespace("e2e-policy-new")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "brand-new", "namespace": "e2e-policy-new"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.local/never/seen:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(pod))
    done = plane.kubectl("create", "--validate=strict", "-f", str(path))
    assert "cudasched: no CUDA requirement is known" in done.stderr
    stored = api.get("/api/v1/namespaces/e2e-policy-new/pods/brand-new")
    assert _markers(stored) == set()


def test_both_modes_never_both_add_terms(
    installed: Installed, plane: ControlPlane, api: Api, webhook: LiveWebhook, tmp_path: Path
) -> None:
    """With the webhook registered as ``--mode both`` prints it: a pod the tables know is
    placed by the policy alone (the webhook's condition skips it), a pod they do not know by
    the webhook alone; no pod gets both."""
    ns = "e2e-policy-both"
    api.ensure_namespace(ns)

    def pod(name: str, image: str, container: str) -> JSON:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "containers": [
                    {
                        "name": container,
                        "image": image,
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ]
            },
        }

    def create(*pods: JSON) -> None:
        path = tmp_path / f"{pods[0]['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": list(pods)}))
        plane.kubectl("create", "--validate=strict", "-f", str(path))

    taught = pod("taught", "nvcr.io/nvidia/tritonserver:24.05-py3", "main")
    create(taught)  # unplaced: the tables learn its key from the running pod
    key = pod_key(taught, ns)
    assert key is not None
    wait_for_keys(api, {key}, controller=installed.controller)
    with registered(api, webhook.registration(only_namespaces=[ns], beside_policy=True)):
        create(
            pod("known", "nvcr.io/nvidia/tritonserver:24.05-py3", "main"),
            pod("unknown", "nvcr.io/nvidia/tritonserver:24.05-py3", "other-name"),
        )
    stored = {p["metadata"]["name"]: p for p in api.list(f"/api/v1/namespaces/{ns}/pods")}
    assert _markers(stored["known"]) == {"NotIn"}
    assert _markers(stored["unknown"]) == {"DoesNotExist"}
    assert all(_markers(p) != {"NotIn", "DoesNotExist"} for p in stored.values())
