"""The audit's rules about the knowledge: too old, contradicted by the cluster, and placements
that a change of knowledge moved."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.bundle import builtin_bundle
from cudasched.knowledge.bundlecheck import BundleKnowledge, Sourced, knowledge_of
from cudasched.knowledge.images import ImageTable
from cudasched.operations.audit import audit
from cudasched.operations.audit.findings import AuditReport
from tests.support.admission import admitted_pod
from tests.support.builders import node
from tests.support.bundles import raised_12_4

#: The built-in knowledge's date.
DATE = builtin_bundle().meta.date


def _audit(
    snapshot: ClusterSnapshot,
    kb: KnowledgeBase,
    images: ImageTable,
    today: datetime.date | None = None,
    **options: Any,
) -> AuditReport:
    return audit(snapshot, Fleet.from_snapshot(snapshot, kb), images, today=today, **options)


def _codes(report: AuditReport, code: str) -> list[tuple[str, str]]:
    return [(f.object, f.message) for f in report.findings if f.code == code]


def test_knowledge_older_than_the_limit_is_reported(kb: KnowledgeBase, images: ImageTable) -> None:
    snapshot = bundled_snapshot()
    fresh = _audit(snapshot, kb, images, DATE + datetime.timedelta(days=120))
    stale = _audit(snapshot, kb, images, DATE + datetime.timedelta(days=121))
    strict = _audit(
        snapshot, kb, images, DATE + datetime.timedelta(days=31), max_knowledge_age_days=30
    )
    undated = _audit(snapshot, kb, images)
    assert _codes(fresh, "knowledge-stale") == [] and _codes(undated, "knowledge-stale") == []
    (found,) = _codes(stale, "knowledge-stale")
    assert found[0] == f"KnowledgeBundle/{kb.provenance.version}"
    day = (DATE + datetime.timedelta(days=121)).isoformat()
    assert f"is 121 days old on {day}, more than the 120 allowed" in found[1]
    assert len(_codes(strict, "knowledge-stale")) == 1


def test_a_driver_newer_than_every_known_release_and_an_unknown_gpu(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    newest = kb.drivers.latest_release(580)
    assert newest is not None
    nodes = [
        node("ahead", gpu="NVIDIA-H100-80GB-HBM3", driver="580.999.01"),
        node("branch", gpu="NVIDIA-H100-80GB-HBM3", driver="630.10.01"),
        node("known", gpu="NVIDIA-H100-80GB-HBM3", driver=str(newest)),
        node("new-gpu", gpu="NVIDIA-Z100", driver=str(newest), compute="9.0"),
    ]
    report = _audit(ClusterSnapshot.from_objects(nodes), kb, images)
    drivers = dict(_codes(report, "driver-release-unknown"))
    gpus = dict(_codes(report, "gpu-unknown"))
    assert set(drivers) == {"Node/ahead", "Node/branch"}
    assert f"its newest known release is {newest}" in drivers["Node/ahead"]
    assert "it knows no release of R630" in drivers["Node/branch"]
    assert set(gpus) == {"Node/new-gpu"} and "'NVIDIA-Z100'" in gpus["Node/new-gpu"]


def _raised_12_4(minimum: str) -> BundleKnowledge:
    """The built-in knowledge with CUDA 12.4's minimum driver raised to ``minimum``."""
    return knowledge_of(Sourced(raised_12_4(minimum), "test"))


@pytest.mark.parametrize("bound_to", [None, "dc1-t4-01"])
def test_a_placement_the_new_knowledge_moves_is_reported(
    kb: KnowledgeBase, bound_to: str | None
) -> None:
    sample = bundled_snapshot()
    admitted = admitted_pod(kb, sample, bound_to)
    assert "cudasched.io/requirement" in admitted["metadata"]["annotations"]
    snapshot = ClusterSnapshot.from_objects([*sample.nodes, admitted])
    same = _audit(snapshot, kb, ImageTable.builtin(kb))
    raised = _raised_12_4("555.42.02")
    moved = _audit(snapshot, raised.kb, raised.images)
    assert _codes(same, "placement-moved") == []
    ((ref, message),) = _codes(moved, "placement-moved")
    assert ref == "Pod/default/llm"
    assert "admitted for 'cuda>=12.4" in message and "no longer admits" in message
    assert "dc1-t4-01" in message and ("one of those" in message) == (bound_to is not None)


def test_a_change_that_moves_no_node_is_no_finding(kb: KnowledgeBase) -> None:
    sample = bundled_snapshot()
    snapshot = ClusterSnapshot.from_objects([*sample.nodes, admitted_pod(kb, sample)])
    nudged = _raised_12_4("550.54.15")  # between the old minimum and every node's driver
    report = _audit(snapshot, nudged.kb, nudged.images)
    assert _codes(report, "placement-moved") == []
