"""``operations.fit``: which nodes a workload's own scheduling constraints let it use."""

from __future__ import annotations

from typing import Any

import pytest

from cudasched.operations.fit import allocatable_gpus, gpu_count, tolerates, usable, why_not
from tests.support import builders

TAINT = {"key": "dedicated", "value": "inference", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "matches"),
    [
        ({"key": "dedicated", "operator": "Equal", "value": "inference"}, True),
        ({"key": "dedicated", "value": "inference", "effect": "NoSchedule"}, True),
        ({"key": "dedicated", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),  # an empty key with Exists tolerates every taint
        ({"key": "dedicated", "value": "batch"}, False),
        ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
        ({"value": "inference"}, False),  # an empty key needs Exists
    ],
)
def test_tolerations_match_as_kubernetes_matches_them(
    toleration: dict[str, Any], matches: bool
) -> None:
    assert tolerates([toleration], TAINT) is matches


def test_gpu_count_is_the_scheduler_request() -> None:
    spec = builders.pod(gpus=2)["spec"]
    spec["containers"].append({"name": "b", "resources": {"limits": {"nvidia.com/gpu": "1"}}})
    spec["initContainers"] = [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]
    assert gpu_count(spec) == 4
    assert gpu_count(builders.pod(gpus=None)["spec"]) == 0


def test_a_node_is_ruled_out_by_selector_taint_or_gpus() -> None:
    nodes = [
        builders.node("a", count=8, labels={"rack": "ws"}),
        builders.node("b", count=8, labels={"rack": "other"}),
        builders.node("c", count=8, labels={"rack": "ws"}, taints=[TAINT]),
        builders.node("d", count=2, labels={"rack": "ws"}),
        builders.node(
            "e", count=8, labels={"rack": "ws"}, taints=[{**TAINT, "effect": "PreferNoSchedule"}]
        ),
    ]
    spec = builders.pod(gpus=4, node_selector={"rack": "ws"})["spec"]
    found = usable(spec, nodes)
    assert found["a"] is None and found["e"] is None  # PreferNoSchedule does not block
    assert "nodeSelector" in (found["b"] or "")
    assert found["c"] == "taint dedicated=inference:NoSchedule not tolerated"
    assert "asks for 4 GPUs and the node has 2 allocatable" in (found["d"] or "")
    assert allocatable_gpus(nodes[3]) == 2 and allocatable_gpus({"kind": "Node"}) is None
    assert why_not(builders.pod(gpus=None)["spec"], nodes[3]) is None
