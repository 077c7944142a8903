"""The device classes a cluster's demand needs: one per requirement and policy, merged when two
groups select the same devices, a requirement no GPU meets listed with its reason."""

from __future__ import annotations

from dataclasses import replace

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.operations.deviceclasses import classes_for_demand
from cudasched.operations.drivers.demand import Demand, DemandGroup, cluster_demand
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import parse_compute_capability, parse_cuda


def test_every_workload_of_the_sample_is_served_by_one_class(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    snapshot = bundled_snapshot()
    demand = cluster_demand(snapshot, Fleet.from_snapshot(snapshot, kb), images, Policy.STRICT)
    plan = classes_for_demand(demand, kb)
    served = [ref for c in plan.classes for ref in c.workloads]
    unserved = [ref for refs, _ in plan.unservable for ref in refs]
    assert sorted(served + unserved) == sorted(ref for g in demand.groups for ref in g.workloads)
    assert len(served) == len(set(served))
    assert len({c.draft.name for c in plan.classes}) == len(plan.classes)


def test_groups_that_differ_only_in_words_share_a_class(kb: KnowledgeBase) -> None:
    req = Requirement(cuda=parse_cuda("12.8"))
    demand = Demand(
        (
            DemandGroup(0, req, Policy.STRICT, ("Pod/a/one",)),
            DemandGroup(
                1, Requirement(cuda=parse_cuda("12.8"), source="x"), Policy.STRICT, ("Pod/a/two",)
            ),
            DemandGroup(2, req, Policy.MINOR_COMPAT, ("Pod/a/three",)),
        )
    )
    plan = classes_for_demand(demand, kb)
    assert [(c.draft.name, c.workloads) for c in plan.classes] == [
        ("gpu-cuda-12-8.cudasched.io", ("Pod/a/one", "Pod/a/two")),
        ("gpu-cuda-12-8-minor-compat.cudasched.io", ("Pod/a/three",)),
    ]


def test_a_requirement_no_gpu_meets_gets_no_class_and_a_reason(kb: KnowledgeBase) -> None:
    impossible = Requirement(cuda=parse_cuda("11.0"), min_compute=parse_compute_capability("12.0"))
    plan = classes_for_demand(
        Demand((DemandGroup(0, impossible, Policy.STRICT, ("Pod/a/old",)),)), kb
    )
    assert plan.classes == ()
    [(workloads, why)] = plan.unservable
    assert workloads == ("Pod/a/old",) and why


def test_one_name_for_two_sets_of_devices_is_not_merged(kb: KnowledgeBase) -> None:
    """A framework build read with two architecture lists names one class but selects other
    devices: the second group gets no class and is told to name its own."""
    torch = kb.framework("torch 2.5.1+cu124")
    assert torch is not None
    narrow = replace(torch, arch_list=(parse_compute_capability("9.0"),), source="image")
    demand = Demand(
        (
            DemandGroup(0, Requirement(framework=torch), Policy.STRICT, ("Pod/a/wide",)),
            DemandGroup(1, Requirement(framework=narrow), Policy.STRICT, ("Pod/a/narrow",)),
        )
    )
    plan = classes_for_demand(demand, kb)
    assert [(c.draft.name, c.workloads) for c in plan.classes] == [
        ("gpu-cuda-12-4-torch-2-5-1-cu124.cudasched.io", ("Pod/a/wide",))
    ]
    [(workloads, why)] = plan.unservable
    assert workloads == ("Pod/a/narrow",) and "--name NAME" in why
