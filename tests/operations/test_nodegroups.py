"""Declared node groups in the audit: a pending workload no node can run gets a scale-up hint
when a node group that may be empty declares labels that run it (node-template documents,
Karpenter NodePools and Cluster API machine groups), and no hint otherwise."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot, load_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.nodes.autoscaling import CAPI_LABELS_ANNOTATION, node_template
from cudasched.operations.audit import AuditReport, audit
from cudasched.operations.audit.nodegroups import (
    NodeGroup,
    groups_from_snapshot,
    groups_from_templates,
)
from cudasched.vocab.errors import InputError

PENDING = Path(__file__).parents[1] / "data" / "audit" / "pending.yaml"
# pending.yaml: Pod ml/cuda-smoke needs CUDA 12.8, InferenceService llm/qwen a CUDA 12.8
# runtime, LLMInferenceService llm/llama-d CUDA 13.0; the cluster's best driver is R550 (12.4).
L4_R570 = ("NVIDIA L4", "570.124.06")  # CUDA 12.8: runs the 12.8 workloads, not the 13.0 one


def _fixes(
    snapshot: ClusterSnapshot,
    kb: KnowledgeBase,
    images: ImageTable,
    groups: tuple[NodeGroup, ...] = (),
) -> dict[str, str]:
    report: AuditReport = audit(
        snapshot, Fleet.from_snapshot(snapshot, kb), images, node_groups=groups
    )
    return {f.object: f.fix or "" for f in report.findings if f.code == "no-compatible-node"}


def _with(
    snapshot: ClusterSnapshot, *objects: dict[str, Any], nodes: tuple = ()
) -> ClusterSnapshot:
    return dataclasses.replace(
        snapshot, other=(*snapshot.other, *objects), nodes=(*snapshot.nodes, *nodes)
    )


def _labels(kb: KnowledgeBase, gpu: str = L4_R570[0], driver: str = L4_R570[1]) -> dict[str, str]:
    return node_template(gpu, driver, kb)["labels"]


def test_without_declared_groups_there_is_no_hint(kb: KnowledgeBase, images: ImageTable) -> None:
    fixes = _fixes(load_snapshot(PENDING), kb, images)
    assert set(fixes) >= {"Pod/ml/cuda-smoke", "InferenceService/llm/qwen"}
    assert not any("declared node group" in fix for fix in fixes.values())


def test_a_node_template_that_runs_it_is_named_in_the_fix(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    doc = node_template(*L4_R570, kb)
    groups = tuple(groups_from_templates([doc], "groups.json"))
    fixes = _fixes(load_snapshot(PENDING), kb, images, groups)
    for ref in ("Pod/ml/cuda-smoke", "InferenceService/llm/qwen"):
        assert fixes[ref].startswith(
            "declared node group node template nvidia-l4-570-124-06 (size unknown; driver "
            "570.124.06, CUDA 12.8, cc 8.9, NVIDIA-L4) can run it: the autoscaler can add a node "
            "from it"
        ), fixes[ref]
        assert "; otherwise upgrade the driver of gpu-l4-1" in fixes[ref]
    # CUDA 13.0 needs R580: the R570 group is no home for it.
    assert "declared node group" not in fixes["LLMInferenceService/llm/llama-d"]


def test_a_template_with_an_older_driver_gives_no_hint(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    groups = tuple(groups_from_templates([node_template("NVIDIA L4", "550.90.07", kb)], "f"))
    assert len(groups) == 1
    fixes = _fixes(load_snapshot(PENDING), kb, images, groups)
    assert set(fixes) >= {"Pod/ml/cuda-smoke", "InferenceService/llm/qwen"}
    assert not any("declared node group" in fix for fix in fixes.values())


def test_an_empty_karpenter_nodepool_is_a_home_and_a_used_one_is_not_offered(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    pool = node_template(*L4_R570, kb, instance_types=("g6.xlarge",))["declarations"]["karpenter"]
    snapshot = _with(load_snapshot(PENDING), pool)
    [group] = groups_from_snapshot(snapshot)
    assert group.empty is True
    fix = _fixes(snapshot, kb, images)["Pod/ml/cuda-smoke"]
    assert fix.startswith(
        "declared node group Karpenter NodePool nvidia-l4-570-124-06 (no node now; driver"
    ), fix
    # The same NodePool with a node: that node was judged already (and here it is an R550 one).
    node = json.loads(json.dumps(load_snapshot(PENDING).nodes[1]))
    node["metadata"]["name"] = "karpenter-node"
    node["metadata"]["labels"]["karpenter.sh/nodepool"] = pool["metadata"]["name"]
    used = _with(load_snapshot(PENDING), pool, nodes=(node,))
    assert groups_from_snapshot(used)[0].empty is False
    assert "declared node group" not in _fixes(used, kb, images)["Pod/ml/cuda-smoke"]


def _machine_deployment(labels: str, replicas: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"clusterName": "gpu"}
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": {
            "name": "l4-r570",
            "namespace": "capi",
            "annotations": {CAPI_LABELS_ANNOTATION: labels},
        },
        "spec": spec,
    }


def test_cluster_api_groups_scaled_to_zero_are_offered(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    declared = node_template(*L4_R570, kb)["declarations"]["capi"]["annotations"]
    annotation = declared[CAPI_LABELS_ANNOTATION]
    zero = _with(load_snapshot(PENDING), _machine_deployment(annotation, 0))
    fix = _fixes(zero, kb, images)["Pod/ml/cuda-smoke"]
    assert fix.startswith("declared node group MachineDeployment capi/l4-r570 (no node now; driver")
    two = _with(load_snapshot(PENDING), _machine_deployment(annotation, 2))
    assert "declared node group" not in _fixes(two, kb, images)["Pod/ml/cuda-smoke"]
    unknown = groups_from_snapshot(
        _with(load_snapshot(PENDING), _machine_deployment(annotation, None))
    )
    assert unknown[0].empty is None
    broken = _with(load_snapshot(PENDING), _machine_deployment("no equals sign", 0))
    assert groups_from_snapshot(broken) == []


def test_template_documents_accept_a_list_a_name_and_refuse_other_things(kb: KnowledgeBase) -> None:
    doc = node_template(*L4_R570, kb, providers=())
    named = {**doc, "name": "asg-l4"}
    groups = groups_from_templates([[doc, named]], "f.json")
    assert [g.name for g in groups] == ["node template 1 of f.json", "asg-l4"]
    with pytest.raises(InputError, match="document 1 is not a node template"):
        groups_from_templates([{"kind": "Node"}], "f.json")


def test_cli_reads_node_templates_from_yaml_or_json(tmp_path: Path, kb: KnowledgeBase) -> None:
    doc = node_template(*L4_R570, kb)
    as_yaml = tmp_path / "groups.yaml"
    as_yaml.write_text(yaml.safe_dump_all([doc, node_template("NVIDIA L4", "550.90.07", kb)]))
    as_json = tmp_path / "groups.json"
    as_json.write_text(json.dumps([doc]))
    for path in (as_yaml, as_json):
        result = CliRunner().invoke(
            app,
            ["audit", "--cluster", str(PENDING), "--node-templates", str(path), "-o", "json"],
        )
        assert result.exit_code == 1, result.output  # the findings stay errors
        findings = json.loads(result.stdout)["findings"]
        [smoke] = [f for f in findings if f["object"] == "Pod/ml/cuda-smoke"]
        assert smoke["fix"].startswith("declared node group node template nvidia-l4-570-124-06")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("", "is empty"),
        ("kind: Node\n", "document 1 is not a node template"),
        ("labels: [1, 2\n", "is not YAML or JSON"),
    ],
)
def test_cli_bad_node_templates_file_is_one_line_exit_2(
    tmp_path: Path, content: str, fragment: str
) -> None:
    path = tmp_path / "groups.yaml"
    path.write_text(content)
    result = CliRunner().invoke(
        app, ["audit", "--cluster", str(PENDING), "--node-templates", str(path)]
    )
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("cudasched: error: ") and fragment in line
