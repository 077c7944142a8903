"""Kueue's own flavor assigner over the flavors ``cudasched kueue`` writes (issue 31).

Kueue (sigs.k8s.io/kueue, the release ``tests/e2e/kueuematch/go.mod`` pins) matches a workload's
node affinity against a ResourceFlavor's ``nodeLabels``, keeping only the keys the flavors
declare (kueue#15136). The flavors declare the agent's CUDA class; the affinity the webhook
injects says "runs CUDA X" with the driver version. These tests run Kueue's own code
(``tests/harness/kueuematch``), not a copy of its rules, over the flavors of
``examples/dra-kueue-cluster.yaml`` and its workloads' pods with the affinity the webhook's
placer writes, and compare the flavors Kueue admits each to with ``explain``'s answer for the
flavors' nodes:

* with ``placement.boundCudaClass`` on, Kueue admits a workload only to flavors whose every
  node ``explain`` says can run it;
* with it off (the default), Kueue admits the CUDA 12.8 workload to the CUDA 12.4 flavor,
  whose nodes cannot run it: the gap the setting exists for.

No control plane: the assigner runs over a Kueue scheduler-cache snapshot, as Kueue's own
unit tests build it. Without Go (and no cached build) the tests skip, except under CI.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot, load_snapshot
from cudasched.explain.eligibility import explain_many, requirement_from_annotations
from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.vocab import labels as L
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.requirements import Policy
from cudasched.webhook.admission.placer import Placer
from cudasched.webhook.state.clusterstate import ClusterState
from tests.harness.binaries import BuildError, find_go
from tests.harness.kueuematch import Verdict, build_kueuematch, flavors_admitting

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "dra-kueue-cluster.yaml"


@pytest.fixture(scope="module")
def kueuematch() -> Path:
    try:
        return build_kueuematch()
    except BuildError as exc:
        if find_go() is None and not os.environ.get("CI"):
            pytest.skip("e2e: no Go toolchain to build Kueue's flavor assigner")
        pytest.fail(f"e2e: kueuematch cannot be built: {exc}", pytrace=False)


@pytest.fixture(scope="module")
def cluster() -> ClusterSnapshot:
    return load_snapshot(CLUSTER)


@pytest.fixture(scope="module")
def flavors() -> dict[str, Any]:
    """``cudasched kueue -o json`` of the example cluster."""
    done = CliRunner().invoke(app, ["kueue", "--cluster", str(CLUSTER), "-o", "json"])
    assert done.exit_code == 0, done.output
    plan: dict[str, Any] = json.loads(done.stdout)
    return plan


def _templates(
    cluster: ClusterSnapshot, kb: KnowledgeBase, bound: bool
) -> dict[str, dict[str, Any]]:
    """Each GPU pod of the cluster as a pod template with the affinity the webhook's placer
    injects into it (``placement.boundCudaClass`` = ``bound``)."""
    config = WebhookConfig.from_mapping({"placement": {"boundCudaClass": bound}})
    placer = Placer(config, kb)
    state = ClusterState.from_objects(cluster.nodes, [], [], [], kb=kb)
    out = {}
    for pod in cluster.pods:
        requirement = requirement_from_annotations(pod)
        assert requirement is not None
        compiled = placer.compile(requirement, Policy.STRICT, state)
        spec = placer.merge(pod["spec"], compiled)
        out[pod["metadata"]["name"]] = {"spec": spec}
    return out


def _runnable(cluster: ClusterSnapshot, kb: KnowledgeBase, bound: bool) -> dict[str, set[str]]:
    """Per pod, the nodes ``explain`` (the engine and the pod's selectors) says can run it."""
    fleet = Fleet(cluster.nodes, kb)
    found = explain_many(
        cluster.pods, fleet, Policy.STRICT, kb, LabelScheme.CUDASCHED, class_bound=bound
    )
    return {
        pod["metadata"]["name"]: {n.node for n in exp.nodes if n.eligible}
        for pod, exp in zip(cluster.pods, found, strict=True)
    }


def _kueue(
    binary: Path, flavors: dict[str, Any], templates: dict[str, dict[str, Any]]
) -> dict[str, Verdict]:
    objects = [f["object"] for f in flavors["flavors"]]
    return flavors_admitting(binary, objects, flavors["clusterQueue"], templates)


def _flavors_running(flavors: dict[str, Any], nodes: set[str]) -> list[str]:
    return [f["name"] for f in flavors["flavors"] if set(f["nodes"]) <= nodes]


def test_with_the_class_bound_kueue_admits_only_flavors_whose_nodes_run_the_workload(
    kueuematch: Path, cluster: ClusterSnapshot, flavors: dict[str, Any], kb: KnowledgeBase
) -> None:
    runnable = _runnable(cluster, kb, bound=True)
    found = _kueue(kueuematch, flavors, _templates(cluster, kb, bound=True))
    assert set(found) == {"vllm-cu128", "triton-cu124"}
    assert {name: v["accepts"] for name, v in found.items()} == {
        name: _flavors_running(flavors, nodes) for name, nodes in runnable.items()
    }
    # The CUDA 12.8 workload: the R570 H100s and the R580 L4, never the R550 H100.
    assert found["vllm-cu128"]["accepts"] == ["cuda-12-8-h100-80gb-hbm3", "cuda-13-0-l4"]
    assert found["vllm-cu128"]["assigned"] == "cuda-12-8-h100-80gb-hbm3"
    assert (
        "doesn't match node affinity" in found["vllm-cu128"]["refusals"]["cuda-12-4-h100-80gb-hbm3"]
    )
    # Kueue keeps the class key of the affinity: the flavors declare it.
    assert "cudasched.io/cuda.code" in found["vllm-cu128"]["labelKeys"]


def test_without_it_kueue_admits_a_flavor_that_cannot_run_the_workload(
    kueuematch: Path, cluster: ClusterSnapshot, flavors: dict[str, Any], kb: KnowledgeBase
) -> None:
    """The recorded gap (design.md, "Kueue flavors"): the default affinity bounds the CUDA
    part with driver.code, a key no flavor declares, so Kueue drops it, admits the CUDA 12.8
    workload to the CUDA 12.4 flavor first (oldest first), and the scheduler then finds no
    node there. Why ``placement.boundCudaClass`` exists."""
    runnable = _runnable(cluster, kb, bound=False)
    found = _kueue(kueuematch, flavors, _templates(cluster, kb, bound=False))
    cannot = set(found["vllm-cu128"]["accepts"]) - set(
        _flavors_running(flavors, runnable["vllm-cu128"])
    )
    assert cannot == {"cuda-12-4-h100-80gb-hbm3"}
    assert found["vllm-cu128"]["assigned"] == "cuda-12-4-h100-80gb-hbm3"
    assert "cudasched.io/driver.code" not in found["vllm-cu128"]["labelKeys"]


def test_a_flavor_without_the_class_key_admits_what_its_nodes_cannot_run(
    kueuematch: Path, cluster: ClusterSnapshot, flavors: dict[str, Any], kb: KnowledgeBase
) -> None:
    """The example's own ``h100`` flavor declares the GPU product only: in a ClusterQueue of
    its own, Kueue drops the class bound too and admits the CUDA 12.8 workload onto R550
    nodes; ``audit`` reports that flavor (``kueue-flavor-without-cuda-key``)."""
    (bare,) = [o for o in cluster.other if o.get("kind") == "ResourceFlavor"]
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "h100"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "h100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 24}],
                        }
                    ],
                }
            ],
        },
    }
    found = flavors_admitting(kueuematch, [bare], queue, _templates(cluster, kb, bound=True))
    runs = _runnable(cluster, kb, bound=True)["vllm-cu128"]
    h100s = {n for f in flavors["flavors"] if "h100" in f["name"] for n in f["nodes"]}
    assert found["vllm-cu128"]["accepts"] == ["h100"]
    assert h100s - runs == {"h100-r550-1"}  # a node of that flavor cannot run it
    done = CliRunner().invoke(app, ["audit", "--cluster", str(CLUSTER), "-o", "json"])
    codes = {(f["code"], f["object"]) for f in json.loads(done.stdout)["findings"]}
    assert ("kueue-flavor-without-cuda-key", "ResourceFlavor/h100") in codes


def _gpu_pod(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "serving", "annotations": annotations},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "serving",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }


def test_on_the_bundled_sample_kueue_admits_exactly_where_explain_says(
    kueuematch: Path, kb: KnowledgeBase
) -> None:
    """The bundled sample cluster's 13 flavors and a workload per CUDA version and policy
    (forward compatibility with the image shipping cuda-compat): with the class bound, the
    flavors Kueue's code accepts are exactly those every node of which ``explain`` says runs
    the workload."""
    done = CliRunner().invoke(app, ["kueue", "-o", "json"])
    assert done.exit_code == 0, done.output
    plan = json.loads(done.stdout)
    sample = bundled_snapshot()
    nodes = [n for n in sample.nodes if n["metadata"]["name"] not in plan["unlabelled"]]
    pods = [
        _gpu_pod(
            f"cu{cuda.replace('.', '')}-{policy}",
            {
                L.ANN_CUDA_VERSION: cuda,
                L.ANN_POLICY: policy,
                L.ANN_SHIPS_CUDA_COMPAT: "true",
            },
        )
        for cuda in ("11.8", "12.2", "12.4", "12.6", "12.8", "13.0")
        for policy in ("strict", "minor-compat", "forward-compat")
    ]
    cluster = dataclasses.replace(sample, nodes=tuple(nodes), pods=tuple(pods))
    runnable = _runnable(cluster, kb, bound=True)
    found = _kueue(kueuematch, plan, _templates(cluster, kb, bound=True))
    expected = {name: _flavors_running(plan, runs) for name, runs in runnable.items()}
    # every flavor runs a workload on all its nodes or on none (a flavor is one class and GPU)
    partly = [
        (name, f["name"])
        for name, runs in runnable.items()
        for f in plan["flavors"]
        if set(f["nodes"]) & runs and not set(f["nodes"]) <= runs
    ]
    assert partly == []
    assert {name: v["accepts"] for name, v in found.items()} == expected
    assert sum(len(v) for v in expected.values()) > 40
    assert {len(v) for v in expected.values()} != {len(plan["flavors"])}  # some are refused
