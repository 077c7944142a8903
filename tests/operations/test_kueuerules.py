"""The audit's Kueue rules, through ``audit``: a flavor selecting GPU nodes without declaring
the CUDA class label, and a flavor whose GPU nodes run several CUDA versions."""

from __future__ import annotations

from typing import Any

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.operations.audit import audit
from tests.support import builders


def _flavor(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": labels},
    }


def _kueue(objects: list[dict[str, Any]], kb: KnowledgeBase, images: ImageTable) -> Any:
    nodes = [
        builders.node("h100-570", gpu="NVIDIA-H100-80GB-HBM3", driver="570.124.06"),
        builders.node("h100-550", gpu="NVIDIA-H100-80GB-HBM3", driver="550.90.07"),
        builders.node("cpu", gpu=None, driver=None),
    ]
    snapshot = ClusterSnapshot.from_objects([*nodes, *objects])
    findings = audit(snapshot, Fleet.from_snapshot(snapshot, kb), images).findings
    return sorted((f.code, f.object) for f in findings if f.code.startswith("kueue-"))


def test_a_flavor_by_product_alone_lacks_the_key_and_spans_two_classes(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    by_product = _flavor("h100", {"cudasched.io/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    assert _kueue([by_product], kb, images) == [
        ("kueue-flavor-spans-cuda-classes", "ResourceFlavor/h100"),
        ("kueue-flavor-without-cuda-key", "ResourceFlavor/h100"),
    ]


def test_flavors_by_class_and_flavors_of_no_gpu_node_are_fine(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    flavors = [
        _flavor("cuda-12-8", {"cudasched.io/cuda.code": "12080"}),
        _flavor("cuda-12-4", {"cudasched.io/cuda.code": "12040"}),
        _flavor("cpu", {"kubernetes.io/hostname": "cpu"}),
    ]
    assert _kueue(flavors, kb, images) == []
    one_node = _flavor("one", {"kubernetes.io/hostname": "h100-570"})
    assert _kueue([one_node], kb, images) == [
        ("kueue-flavor-without-cuda-key", "ResourceFlavor/one")
    ]
