"""Kueue flavors by CUDA class: every labelled GPU node in exactly one flavor whose nodeLabels
it carries, flavors oldest CUDA first with their GPUs as quota, and each flavor's workloads the
ones the engine says all its nodes can run; ``cudasched kueue`` prints them."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.operations.drivers.demand import cluster_demand
from cudasched.operations.kueueflavors import FLAVOR_KEYS, OPTIONAL_KEYS, FlavorPlan, kueue_flavors
from cudasched.vocab.labelsyntax import dns_subdomain_ok
from cudasched.vocab.requirements import Policy
from tests.support import builders


def _plan(snapshot: ClusterSnapshot, kb: KnowledgeBase, images: ImageTable) -> FlavorPlan:
    fleet = Fleet.from_snapshot(snapshot, kb)
    demand = cluster_demand(snapshot, fleet, images, Policy.STRICT)
    return kueue_flavors(snapshot, fleet, demand, Policy.STRICT)


def test_every_labelled_gpu_node_is_in_one_flavor_it_matches(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    snapshot = bundled_snapshot()
    plan = _plan(snapshot, kb, images)
    labels = {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in snapshot.nodes}
    placed = [n for f in plan.flavors for n in f.nodes]
    assert len(placed) == len(set(placed)) and placed
    mismatched = [
        (f.name, n)
        for f in plan.flavors
        for n in f.nodes
        if any(labels[n].get(k) != v for k, v in f.node_labels.items())
    ]
    assert mismatched == []
    assert all(tuple(f.node_labels)[:3] == FLAVOR_KEYS for f in plan.flavors)
    # the data-center flag too, where the agent wrote it (forward compatibility needs it)
    assert all(
        f.node_labels.get(k) == labels[f.nodes[0]].get(k)
        for f in plan.flavors
        for k in OPTIONAL_KEYS
    )
    assert any(f.node_labels.get(OPTIONAL_KEYS[0]) == "false" for f in plan.flavors)
    codes = [int(f.node_labels["cudasched.io/cuda.code"]) for f in plan.flavors]
    assert codes == sorted(codes)
    assert all(dns_subdomain_ok(f.name) for f in plan.flavors)
    assert len({f.name for f in plan.flavors}) == len(plan.flavors)


def test_a_flavor_serves_the_workloads_every_node_of_it_runs(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    by_name = {f.name: f for f in _plan(bundled_snapshot(), kb, images).flavors}
    qwen = "InferenceService/team-nlp/qwen2-7b"  # CUDA 12.8
    assert qwen in by_name["cuda-12-8-h100-80gb-hbm3"].serves
    assert qwen not in by_name["cuda-12-4-h100-80gb-hbm3"].serves
    assert by_name["cuda-11-4-k80"].serves == ()


def test_the_cluster_queue_orders_the_flavors_with_their_gpus(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    nodes = [
        builders.node("new-1", gpu="NVIDIA-H100-80GB-HBM3", driver="570.124.06", count=8),
        builders.node("new-2", gpu="NVIDIA-H100-80GB-HBM3", driver="570.133.20", count=8),
        builders.node("old-1", gpu="NVIDIA-H100-80GB-HBM3", driver="550.90.07", count=4),
        builders.node("bare", gpu="NVIDIA-L4", driver="550.90.07", scheme="gfd"),
    ]
    plan = _plan(ClusterSnapshot.from_objects(nodes), kb, images)
    queue = plan.cluster_queue()
    [group] = queue["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu"]
    assert [(f["name"], f["resources"][0]["nominalQuota"]) for f in group["flavors"]] == [
        ("cuda-12-4-h100-80gb-hbm3", 4),
        ("cuda-12-8-h100-80gb-hbm3", 16),
    ]
    assert plan.unlabelled == ("bare",)


def test_cli_prints_flavors_then_the_cluster_queue() -> None:
    done = CliRunner().invoke(app, ["kueue"])
    assert done.exit_code == 0, done.output
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert {d["kind"] for d in docs[:-1]} == {"ResourceFlavor"}
    assert docs[-1]["kind"] == "ClusterQueue" and docs[-1]["metadata"]["name"] == "gpu"
    assert "# serves: InferenceService/team-nlp/qwen2-7b" in done.stdout
    as_json = json.loads(CliRunner().invoke(app, ["kueue", "-o", "json", "--queue", "a"]).stdout)
    assert as_json["clusterQueue"]["metadata"]["name"] == "a"
    assert {f["name"] for f in as_json["flavors"]} == {d["metadata"]["name"] for d in docs[:-1]}
    bad = CliRunner().invoke(app, ["kueue", "--queue", "Bad_Queue"])
    assert bad.exit_code == 2 and "invalid --queue" in bad.stderr
