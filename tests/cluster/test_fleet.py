"""The fleet: one index of nodes and KServe objects for admission, explain and operations."""

from __future__ import annotations

from typing import Any

import pytest

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.nodes.scheme import GfdKeys
from cudasched.vocab.errors import InputError
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.versions import CudaVersion
from tests.support import builders


def _node(name: str, **labels: Any) -> dict[str, Any]:
    """A node with exactly ``labels`` (malformed ones included)."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def _runtime(name: str, namespace: str | None = None) -> dict[str, Any]:
    """A ServingRuntime, written without a namespace when ``namespace`` is None."""
    return builders.runtime(
        name,
        namespace,
        kind="ServingRuntime",
        image="kserve/sklearnserver:v0.15",
        formats=[{"name": "sklearn", "autoSelect": True}],
    )


def _isvc(name: str, namespace: str | None = None) -> dict[str, Any]:
    predictor = {"model": {"modelFormat": {"name": "sklearn"}}}
    return builders.isvc(name, namespace, predictor=predictor)


def test_sample_fleet_groups_pools_and_summarises_drivers(kb: KnowledgeBase) -> None:
    sample = bundled_snapshot()
    fleet = Fleet.from_snapshot(sample, kb)
    assert len(fleet) == len(sample.nodes)
    assert fleet.group_count < len(fleet)  # alike GPU nodes share their facts
    assert 0 < len(fleet.gpu_nodes) < len(fleet)  # the CPU node is not a GPU node
    assert fleet.drivers.newest_cuda is not None
    assert fleet.drivers.gpu_nodes == len(fleet.gpu_nodes)
    assert fleet.resolve_scheme("auto") in (LabelScheme.CUDASCHED, LabelScheme.GFD)
    assert fleet.resolve_scheme(LabelScheme.GFD) is LabelScheme.GFD
    for node, _, facts in fleet.members():
        assert facts.has_gpu == (node in fleet.gpu_nodes) or not facts.has_gpu


def test_driver_summary_counts_nodes_with_the_newest_cuda(kb: KnowledgeBase) -> None:
    nodes = [
        builders.node("a", driver="550.90.07"),  # CUDA 12.4
        builders.node("b", driver="570.124.06"),  # CUDA 12.8
        builders.node("c", driver="570.124.06"),
    ]
    fleet = Fleet(nodes, kb)
    assert fleet.drivers.newest_cuda == CudaVersion(12, 8)
    assert fleet.drivers.nodes_with_newest == 2
    assert fleet.drivers.describe() == "newest driver supports 12.8 (2 nodes)"
    assert Fleet([], kb).drivers.describe() == "no GPU node reports a CUDA version"


def test_strict_and_tolerant_fleets(kb: KnowledgeBase) -> None:
    nameless = {"apiVersion": "v1", "kind": "Node", "metadata": {}}
    odd_label = _node("odd", zone={"not": "a string"})
    with pytest.raises(InputError, match=r"no metadata\.name"):
        Fleet([nameless], kb)
    with pytest.raises(InputError, match="expected string keys and string values"):
        Fleet([odd_label], kb)
    tolerant = Fleet([nameless, odd_label, _node("ok")], kb, tolerant=True)
    assert [n.name for n in tolerant.nodes] == ["odd", "ok"]
    assert dict(tolerant.nodes[0].labels) == {}


def test_one_namespace_rule_for_runtimes_and_services(kb: KnowledgeBase) -> None:
    """A namespaced object written without a namespace is in ``default`` everywhere."""
    fleet = Fleet(
        [],
        kb,
        inference_services=[_isvc("no-ns"), _isvc("in-ns", "team")],
        serving_runtimes=[_runtime("rt-b"), _runtime("rt-a", "default"), _runtime("rt-t", "team")],
    )
    assert [r["metadata"]["name"] for r in fleet.serving_runtimes("default")] == ["rt-a", "rt-b"]
    assert [r["metadata"]["name"] for r in fleet.serving_runtimes("team")] == ["rt-t"]
    assert fleet.inference_service("default", "no-ns") is not None
    no_ns = fleet.runtime_of("default", "no-ns")
    assert no_ns is not None and no_ns.name == "rt-a"  # the default namespace's runtimes only
    in_ns = fleet.runtime_of("team", "in-ns")
    assert in_ns is not None and in_ns.name == "rt-t"


def test_runtime_errors_raise_strictly_and_are_unknown_tolerantly(kb: KnowledgeBase) -> None:
    broken = _runtime("rt", "team")
    broken["spec"]["supportedModelFormats"] = "not a list"
    isvc = _isvc("svc", "team")
    for tolerant in (False, True):
        fleet = Fleet(
            [], kb, inference_services=[isvc], serving_runtimes=[broken], tolerant=tolerant
        )
        assert fleet.runtime_of("team", "svc") is None
        with pytest.raises(InputError):
            fleet.select_runtime(isvc)


def test_first_of_two_services_with_one_name_wins(kb: KnowledgeBase) -> None:
    first, second = _isvc("svc", "team"), _isvc("svc", "team")
    fleet = Fleet([], kb, inference_services=[first, second])
    assert fleet.inference_service("team", "svc") is first


def test_partitions_are_shared_by_key_sets_that_split_alike(kb: KnowledgeBase) -> None:
    nodes = [
        builders.node(f"n{i}", gpu=None, driver=None, labels={"zone": "ba"[i % 2], "rack": "r1"})
        for i in range(6)
    ]
    fleet = Fleet(nodes, kb)
    by_zone = fleet.partition(("zone",))
    assert len(by_zone.first) == 2 and by_zone.size == 6
    assert fleet.partition(("zone", "rack")) is by_zone  # the rack splits nothing further
    assert fleet.partition(("zone",)) is by_zone
    answers = by_zone.gather(
        [tuple(f"b{p}" for p in by_zone.members[0]), tuple(f"a{p}" for p in by_zone.members[1])]
    )
    assert answers == ("b0", "a1", "b2", "a3", "b4", "a5")
    assert fleet.gfd_keys in (GfdKeys.NEW, GfdKeys.DEPRECATED)
