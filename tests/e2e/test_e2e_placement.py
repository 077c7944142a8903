"""The product's central claim against the real thing: pods created with kubectl are mutated by
the real kube-apiserver calling cudasched's webhook (registered as ``cudasched manifests``
prints it), and the real kube-scheduler binds each only to a node that can run it.

Fleet: 63 nodes from the sample cluster's 21 real GFD label sets. Workloads: 300 generated pods
(KServe predictors on Alauda-labelled runtimes, well-known images, annotated pods, pods with their
own nodeSelector or affinity, opted-out and CPU pods). Which node can run which pod is cudasched's
own answer (``cudasched explain --workload pods.yaml --live -o json``, for the pods as created,
before admission), never re-derived here.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.fleet import cudasched_command
from tests.harness.kube import Api
from tests.harness.webhook import LiveWebhook, registered
from tests.harness.workloads import Workloads, generate, runtimes

NS = "e2e-placement"
PODS = 300

JSON = dict[str, Any]


def _gpus(pod: JSON) -> int:
    total = 0
    for container in pod["spec"]["containers"]:
        limits = container.get("resources", {}).get("limits", {})
        total += int(limits.get("nvidia.com/gpu", 0))
    return total


_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}
_SUFFIXES["m"] = 1e-3
#: What kube-scheduler's NodeResourcesFit counts for these pods (no ephemeral storage asked).
_FIT = ("cpu", "memory", "nvidia.com/gpu", "pods")


def _quantity(text: str | int) -> float:
    value = str(text)
    for suffix, factor in sorted(_SUFFIXES.items(), key=lambda kv: -len(kv[0])):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * factor
    return float(value)


def _requests(pod: JSON) -> dict[str, float]:
    """What the scheduler counts for a stored pod (requests defaulted from limits by the API
    server): the containers' sum, or the largest init container if larger, plus one pod."""

    def of(container: JSON) -> dict[str, float]:
        asked = container.get("resources", {}).get("requests", {})
        return {k: _quantity(v) for k, v in asked.items() if k in _FIT}

    total: Counter[str] = Counter()
    for container in pod["spec"]["containers"]:
        total.update(of(container))
    for container in pod["spec"].get("initContainers", []):
        for key, value in of(container).items():
            total[key] = max(total[key], value)
    total["pods"] += 1
    return dict(total)


@dataclass
class Placed:
    work: Workloads
    pods: dict[str, JSON]  # name -> the pod as stored (mutated, bound or not)
    everywhere: list[JSON]  # every pod of the cluster when scheduling settled
    nodes: dict[str, JSON]
    eligible: dict[str, set[str]]  # pod name -> nodes cudasched says can run it
    isvc_stderr: str
    create_seconds: float
    settle_seconds: float
    explain_seconds: float


def _settled(api: Api, names: set[str]) -> tuple[bool, dict[str, JSON]]:
    pods = {p["metadata"]["name"]: p for p in api.list(f"/api/v1/namespaces/{NS}/pods")}
    done = True
    for name in names:
        pod = pods.get(name)
        if pod is None:
            return False, pods
        if pod["spec"].get("nodeName"):
            continue
        conditions = pod.get("status", {}).get("conditions", [])
        if not any(
            c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
        ):
            done = False
    return done, pods


@pytest.fixture(scope="module")
def placed(
    plane: ControlPlane, api: Api, webhook: LiveWebhook, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Placed]:
    tmp = tmp_path_factory.mktemp("placement")
    api.ensure_namespace(NS)
    work = generate(PODS, NS)
    runtimes_file = tmp / "runtimes.yaml"
    runtimes_file.write_text(yaml.safe_dump_all(runtimes()))
    isvc_file = tmp / "isvcs.yaml"
    isvc_file.write_text(yaml.safe_dump_all(work.services))
    pods_file = tmp / "pods.yaml"
    pods_file.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": work.pods}))

    with registered(api, webhook.registration()):
        plane.kubectl("apply", "--validate=strict", "-f", str(runtimes_file))
        # the webhook reads runtimes from its watch cache: wait until it holds them
        webhook.wait_cached("clusterservingruntimes", len(runtimes()))
        isvc = plane.kubectl("apply", "--validate=strict", "-f", str(isvc_file))
        webhook.wait_cached("inferenceservices", len(work.services))
        began = time.monotonic()
        plane.kubectl("create", "--validate=strict", "-f", str(pods_file), timeout=600)
        created = time.monotonic()
        names = {p["metadata"]["name"] for p in work.pods}
        pods: dict[str, JSON] = {}

        def settled() -> bool:
            nonlocal pods
            ok, pods = _settled(api, names)
            return ok

        api.wait_for("every pod bound or unschedulable", settled, timeout=300, interval=1.0)
        time.sleep(3)  # the scheduler's retries of unschedulable pods change nothing; let them run
        _, pods = _settled(api, names)
        settle = time.monotonic() - created

    nodes = {n["metadata"]["name"]: n for n in api.list("/api/v1/nodes")}
    everywhere = list(api.list("/api/v1/pods"))
    t0 = time.monotonic()
    explained = subprocess.run(
        [
            *cudasched_command(),
            "explain",
            "--workload",
            str(pods_file),
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
    explain_seconds = time.monotonic() - t0
    assert explained.returncode == 0, explained.stderr
    report = json.loads(explained.stdout)
    eligible: dict[str, set[str]] = {}
    for row in report.get("workloads", [report]):
        name = row["summary"]["workload"].rsplit("/", 1)[-1]
        eligible[name] = {n["node"] for n in row["nodes"] if n["eligible"]}
    try:
        yield Placed(
            work,
            pods,
            everywhere,
            nodes,
            eligible,
            isvc.stderr,
            created - began,
            settle,
            explain_seconds,
        )
    finally:
        plane.kubectl(
            "delete", "pods", "--all", "-n", NS, "--force", "--grace-period=0", "--wait=false"
        )
        plane.kubectl("delete", "-f", str(isvc_file), "--wait=false")
        plane.kubectl("delete", "-f", str(runtimes_file), "--wait=false")


def test_every_workload_was_explained(placed: Placed) -> None:
    assert set(placed.eligible) == {p["metadata"]["name"] for p in placed.work.pods}
    assert len(placed.nodes) >= 50


def test_no_pod_is_bound_to_a_node_that_cannot_run_it(placed: Placed) -> None:
    wrong = []
    bound = 0
    for name, pod in placed.pods.items():
        node = pod["spec"].get("nodeName")
        if not node:
            continue
        bound += 1
        skipped = pod["metadata"].get("annotations", {}).get("cudasched.io/skip") == "true"
        if not skipped and node not in placed.eligible[name]:
            wrong.append(f"{name} on {node}")
    assert not wrong, f"{len(wrong)} pods on nodes cudasched says cannot run them: {wrong[:10]}"
    assert bound >= PODS // 2, f"only {bound} of {PODS} pods bound: the fleet should hold most"


def test_no_pod_is_pending_while_a_node_that_can_run_it_has_room(placed: Placed) -> None:
    """Room is what kube-scheduler's resource fit counts (CPU, memory, GPUs, pod slots) over
    every pod bound to the node, in any namespace; a Pending pod must not fit on any node
    cudasched says can run it."""
    used: dict[str, Counter[str]] = defaultdict(Counter)
    for pod in placed.everywhere:
        node = pod["spec"].get("nodeName")
        if node and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            used[node].update(_requests(pod))
    free = {
        name: {
            key: _quantity(node["status"]["allocatable"].get(key, 0)) - used[name][key]
            for key in _FIT
        }
        for name, node in placed.nodes.items()
    }
    stranded = []
    pending = 0
    for name, pod in placed.pods.items():
        if pod["spec"].get("nodeName"):
            continue
        pending += 1
        asked = _requests(pod)
        room = [
            n
            for n in placed.eligible[name]
            if all(free[n][key] >= asked.get(key, 0) for key in _FIT)
        ]
        if room:
            message = next(
                (
                    c.get("message", "")
                    for c in pod.get("status", {}).get("conditions", [])
                    if c["type"] == "PodScheduled"
                ),
                "",
            )
            stranded.append(f"{name} (asks {asked}; room on {room[:3]}; scheduler: {message})")
    assert not stranded, f"pods Pending beside a node that can run them: {stranded[:5]}"
    # the mix is sized so that some pods have nowhere to go: the check above is not vacuous
    assert pending > 0


def test_webhook_constrained_gpu_pods_and_left_others_alone(placed: Placed) -> None:
    outcomes: dict[str, list[str]] = defaultdict(list)
    for name, pod in placed.pods.items():
        annotations = pod["metadata"].get("annotations", {})
        terms = (
            pod["spec"]
            .get("affinity", {})
            .get("nodeAffinity", {})
            .get("requiredDuringSchedulingIgnoredDuringExecution", {})
            .get("nodeSelectorTerms", [])
        )
        injected = any(
            e.get("key") == "cudasched.io/injected"
            for t in terms
            for e in t.get("matchExpressions", [])
        )
        kind = name.split("-")[-1] if not name.startswith("svc-") else "predictor"
        outcomes[kind].append("injected" if injected else "plain")
        if kind in ("skip", "cpu"):
            assert not injected, f"{name} was constrained"
            assert "cudasched.io/requirement" not in annotations, name
    # every predictor pod got the affinity of its runtime's CUDA (Alauda label or image)
    assert set(outcomes["predictor"]) == {"injected"}
    assert "injected" in outcomes["annotated"]
    assert "injected" in outcomes["selector"] and "injected" in outcomes["affinity"]


def test_user_constraints_survive_the_mutation(placed: Placed) -> None:
    by_name = {p["metadata"]["name"]: p for p in placed.work.pods}
    selectors = affinities = 0
    for name, pod in placed.pods.items():
        wanted = by_name[name]["spec"]
        if "nodeSelector" in wanted:
            selectors += 1
            assert pod["spec"]["nodeSelector"] == wanted["nodeSelector"]
        if "affinity" in wanted:
            affinities += 1
            mine = wanted["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"][0]["matchExpressions"][0]
            for term in pod["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"]:
                assert mine in term["matchExpressions"], name
    # one pod in eight of each kind (workloads.generate cycles through eight kinds)
    assert selectors == affinities == PODS // 8


def test_timings_are_reported(placed: Placed, capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        bound = sum(1 for p in placed.pods.values() if p["spec"].get("nodeName"))
        print(
            f"\n[e2e placement] {PODS} pods created through the webhook in "
            f"{placed.create_seconds:.1f}s; scheduled ({bound} bound) {placed.settle_seconds:.1f}s "
            f"later; explain over {len(placed.nodes)} nodes took {placed.explain_seconds:.1f}s"
        )


def test_without_the_webhook_the_same_pods_land_where_they_cannot_run(
    placed: Placed, plane: ControlPlane, api: Api, tmp_path: Path
) -> None:
    """The control: the image pods of the same mix, in a namespace no webhook configuration
    selects, are placed by the scheduler on nodes cudasched says cannot run them (the failure
    cudasched exists to prevent), so the checks above are not passing by luck."""
    namespace = "e2e-unguarded"
    api.ensure_namespace(namespace)
    pods = []
    for pod in placed.work.pods:
        if pod["metadata"]["name"].endswith("-image"):
            copy_ = json.loads(json.dumps(pod))
            copy_["metadata"]["namespace"] = namespace
            pods.append(copy_)
    path = tmp_path / "unguarded.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": pods}))
    try:
        plane.kubectl("create", "-f", str(path))
        names = {p["metadata"]["name"] for p in pods}
        stored: dict[str, JSON] = {}

        def scheduled() -> bool:
            nonlocal stored
            stored = {
                p["metadata"]["name"]: p for p in api.list(f"/api/v1/namespaces/{namespace}/pods")
            }
            return all(
                stored[n]["spec"].get("nodeName")
                or any(
                    c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                    for c in stored[n].get("status", {}).get("conditions", [])
                )
                for n in names
            )

        api.wait_for("the unguarded pods to be scheduled", scheduled, timeout=120, interval=1)
        assert not any(
            "cudasched.io/requirement" in p["metadata"].get("annotations", {})
            for p in stored.values()
        )
        wrong = [
            f"{n} on {p['spec']['nodeName']}"
            for n, p in stored.items()
            if p["spec"].get("nodeName") and p["spec"]["nodeName"] not in placed.eligible[n]
        ]
        assert wrong, "without the webhook every pod still landed where it can run"
    finally:
        plane.kubectl(
            "delete",
            "pods",
            "--all",
            "-n",
            namespace,
            "--force",
            "--grace-period=0",
            "--wait=false",
        )
