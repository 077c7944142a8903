"""``operations.drivers.nvidiadriver``: the NVIDIADriver objects of a plan, as each GPU Operator
release accepts them (validated against cudasched's schema of each release's CRD), precompiled
objects only inside NVIDIA's matrix, immutable fields, replaced objects and the default object."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot
from cudasched.compat.operatorrelease import operator_from_objects
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.vocab import labels as L
from tests.support.nvidiadriver_schema import RELEASES, cel, validation_errors
from tests.support.planning_cluster import (
    OPERATOR_DRIVER,
    cluster,
    gpu_node,
    plan_of,
    runtime,
)


def operator_cluster(*extra: dict[str, Any]) -> ClusterSnapshot:
    """Ubuntu 22.04 GPU nodes the operator drives: a V100 (proprietary modules), a Turing T4
    and a Blackwell B200 (open modules only), each needing an upgrade for CUDA 13.0."""
    return cluster(
        gpu_node("v100", "Tesla-V100-SXM2-16GB", "535.216.01", extra=OPERATOR_DRIVER),
        gpu_node("t4", "Tesla-T4", "550.90.07", extra=OPERATOR_DRIVER),
        gpu_node("b200", "NVIDIA-B200", "570.133.20", extra=OPERATOR_DRIVER),
        runtime("triton-12-4", "12.4"),
        runtime("vllm-13", "13.0"),
        *extra,
    )


# --------------------------------------------------------------------------- operator releases


@pytest.mark.parametrize("release", RELEASES)
def test_objects_validate_against_their_operator_release(
    kb: KnowledgeBase, images: ImageTable, release: str
) -> None:
    plan = plan_of(operator_cluster(), kb, images, operator=release)
    assert len(plan.drivers) == 3
    for driver in plan.drivers:
        assert validation_errors(release, driver) == []
    assert plan.to_dict()["gpuOperatorVersion"] == release


def test_each_release_gets_only_the_fields_it_defines(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    specs = {
        release: {
            d["metadata"]["name"]: d["spec"]
            for d in plan_of(operator_cluster(), kb, images, operator=release).drivers
        }
        for release in RELEASES
    }
    volta = "v100-sxm2-16gb-ubuntu22.04-r580"
    blackwell = "b200-ubuntu22.04-r580"
    assert specs["26.7"][volta]["default"] is False
    assert specs["26.7"][volta]["upgradePolicy"] == {
        "autoUpgrade": True,
        "maxParallelUpgrades": 1,
        "maxUnavailable": "25%",
    }
    for release in ("24.9", "25.3", "25.10", "26.3"):
        assert "default" not in specs[release][volta]
        assert "upgradePolicy" not in specs[release][volta]
    assert specs["25.3"][blackwell]["kernelModuleType"] == "open"
    # v24.9 has no kernelModuleType: the open flavour is useOpenKernelModules.
    assert "kernelModuleType" not in specs["24.9"][blackwell]
    assert specs["24.9"][blackwell]["useOpenKernelModules"] is True
    assert specs["24.9"][volta]["useOpenKernelModules"] is False


@pytest.mark.parametrize(
    ("release", "field"),
    [("26.3", "default"), ("25.10", "upgradePolicy"), ("24.9", "kernelModuleType")],
)
def test_a_field_a_release_does_not_define_is_refused(
    kb: KnowledgeBase, images: ImageTable, release: str, field: str
) -> None:
    """The reason --gpu-operator-version exists: the newest release's objects fail on older
    operators under kubectl's strict field validation."""
    [driver] = [
        d
        for d in plan_of(operator_cluster(), kb, images).drivers
        if d["metadata"]["name"].startswith("b200")
    ]
    assert field in driver["spec"]
    errors = validation_errors(release, driver)
    assert any("Additional properties" in e and field in e for e in errors), errors


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda s: s.pop("image"), "'image' is a required property"),
        (lambda s: s.pop("driverType"), "'driverType' is a required property"),
        (lambda s: s.pop("default"), "'default' is a required property"),
        (lambda s: s.update(driverType="cuda"), "is not one of"),
        (lambda s: s.update(kernelModuleType="closed"), "is not one of"),
        (lambda s: s.update(useOpenModules=True), "Additional properties"),
        (lambda s: s.update(nodeSelector={"a": 1}), "is not of type 'string'"),
        (lambda s: s["upgradePolicy"].update(maxParallelUpgrades=-1), "less than the minimum"),
        (lambda s: s.update(default=True), "CEL"),
    ],
)
def test_the_schema_check_can_fail(
    kb: KnowledgeBase, images: ImageTable, change: Any, reason: str
) -> None:
    driver = copy.deepcopy(plan_of(operator_cluster(), kb, images).drivers[0])
    change(driver["spec"])
    errors = validation_errors("26.7", driver)
    assert any(reason in e for e in errors), errors


def test_the_cel_rule_refuses_a_default_object_with_a_node_selector() -> None:
    assert cel("26.7", {"default": True, "driverType": "gpu", "image": "driver"})
    assert cel("26.7", {"default": True, "driverType": "gpu", "image": "d", "nodeSelector": {}})
    assert not cel(
        "26.7", {"default": True, "driverType": "gpu", "image": "d", "nodeSelector": {"a": "b"}}
    )
    assert cel(
        "26.7", {"default": False, "driverType": "gpu", "image": "d", "nodeSelector": {"a": "b"}}
    )


def test_the_operator_release_is_read_from_the_clusters_objects(kb: KnowledgeBase) -> None:
    """The API server writes CRD defaults into the objects it stores: spec.default from
    v26.7, spec.kernelModuleType from v25.3."""
    stored = {"driverType": "gpu", "image": "driver", "version": "580.126.20"}
    cases = [
        ({**stored, "default": False, "kernelModuleType": "auto"}, "26.7"),
        ({**stored, "kernelModuleType": "auto"}, "26.3"),
        (stored, "24.9"),
    ]
    for spec, release in cases:
        found = operator_from_objects(kb, [{"metadata": {"name": "x"}, "spec": spec}])
        assert found is not None and found[0].version == release, (spec, found)
    assert operator_from_objects(kb, []) is None


def test_notes_state_the_release_and_its_minimums(kb: KnowledgeBase, images: ImageTable) -> None:
    new = plan_of(operator_cluster(), kb, images)
    assert any(
        "written for GPU Operator 26.7" in n and "v26.7 or newer" in n and "v25.3" in n
        for n in new.notes
    )
    old = plan_of(operator_cluster(), kb, images, operator="25.10")
    assert any("no per-object upgradePolicy" in n for n in old.notes)
    assert any("deployDefaultCR=false" in n for n in old.notes)


# --------------------------------------------------------------------------- precompiled


@pytest.mark.parametrize(
    ("os", "kernel", "precompiled", "why"),
    [
        (("ubuntu", "22.04"), "5.15.0-124-generic", True, None),
        (("ubuntu", "22.04"), "6.8.0-48-generic", True, None),
        (("ubuntu", "24.04"), "6.8.0-48-aws", True, None),
        (("ubuntu", "24.04"), "6.8.0-1017-azure-fde", True, None),
        (("ubuntu", "22.04"), "5.15.0-1074-azure-fde", False, "azure-fde kernels on ubuntu22.04"),
        (("ubuntu", "22.04"), "6.5.0-45-generic", False, "not of an LTS kernel series"),
        (("ubuntu", "20.04"), "5.4.0-200-generic", False, "built for ubuntu22.04"),
        (("rhel", "9.4"), "5.14.0-427.13.1.el9_4.x86_64", False, "not rhel9"),
    ],
)
def test_precompiled_objects_stay_inside_nvidias_matrix(
    kb: KnowledgeBase,
    images: ImageTable,
    os: tuple[str, str],
    kernel: str,
    precompiled: bool,
    why: str | None,
) -> None:
    snapshot = cluster(
        gpu_node("h100", "NVIDIA-H100-80GB-HBM3", "550.127.05", os=os, kernel=kernel,
                 extra=OPERATOR_DRIVER),
        runtime("vllm-13", "13.0"),
    )  # fmt: skip
    plan = plan_of(snapshot, kb, images, precompiled=True)
    [pool] = plan.to_dict()["pools"]
    assert pool["usePrecompiled"] is precompiled
    if precompiled:
        # R580 serves it and is long-term; the version of a precompiled object is the branch.
        assert (pool["targetBranch"], pool["targetVersion"]) == ("580", "580")
        [driver] = plan.drivers
        assert driver["spec"]["usePrecompiled"] is True and driver["spec"]["version"] == "580"
        assert driver["metadata"]["name"].endswith("-r580-precompiled")
    else:
        assert pool["targetVersion"] != pool["targetBranch"]
        if pool["change"] != "keep":
            assert any(why in w for w in pool["why"] if w.startswith("usePrecompiled: false"))
    # Never a branch outside the matrix, never a version like '620'.
    assert all(d["spec"]["version"] in ("580", "595") or "." in d["spec"]["version"]
               for d in plan.drivers)  # fmt: skip


# --------------------------------------------------------------------------- existing objects


def _existing(name: str, precompiled: bool, nodes_label: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "cudasched"}},
        "spec": {
            "default": False,
            "driverType": "gpu",
            "image": "driver",
            "repository": "nvcr.io/nvidia",
            "version": "580",
            "kernelModuleType": "open",
            "usePrecompiled": precompiled,
            "nodeSelector": {L.DRIVER_POOL: nodes_label or name},
        },
    }


def test_an_immutable_field_that_flips_makes_a_new_object(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """An existing object of the planned name with usePrecompiled the other way cannot be
    updated (self == oldSelf): the plan writes a new name and deletes the old after the
    rollout, and says why."""
    name = "b200-ubuntu22.04-r580"
    snapshot = operator_cluster(_existing(name, precompiled=True))
    plan = plan_of(snapshot, kb, images)
    names = {d["metadata"]["name"] for d in plan.drivers}
    assert name not in names and f"{name}-2" in names
    [replaced] = plan.replaced
    assert (replaced.name, replaced.by) == (name, f"{name}-2")
    assert "usePrecompiled" in replaced.why and "self == oldSelf" in replaced.why
    assert plan.node_labels["b200"] == {L.DRIVER_POOL: f"{name}-2"}
    assert any(f"delete NVIDIADriver/{name}" in n for n in plan.notes)
    # The same object with the same immutable fields is updated in place.
    same = plan_of(operator_cluster(_existing(name, precompiled=False)), kb, images)
    assert name in {d["metadata"]["name"] for d in same.drivers} and same.replaced == ()


def test_an_object_an_earlier_plan_wrote_that_selects_nothing_is_deleted(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    snapshot = operator_cluster(_existing("t4-ubuntu22.04-r550", precompiled=False))
    plan = plan_of(snapshot, kb, images)
    assert [r.name for r in plan.replaced] == ["t4-ubuntu22.04-r550"]
    assert plan.replaced[0].by is None


def test_nodes_already_on_their_object_do_not_move(kb: KnowledgeBase, images: ImageTable) -> None:
    """A re-plan that changes nothing leaves the nodes where they are: no wave."""
    first = plan_of(operator_cluster(), kb, images)
    objects = []
    for obj in operator_cluster().objects():
        if obj.get("kind") == "Node":
            obj = copy.deepcopy(obj)
            obj["metadata"]["labels"].update(first.node_labels[obj["metadata"]["name"]])
        objects.append(obj)
    again = ClusterSnapshot.from_objects([*objects, *first.drivers])
    second = plan_of(again, kb, images)
    assert {d["metadata"]["name"] for d in second.drivers} == {
        d["metadata"]["name"] for d in first.drivers
    }
    assert second.waves == () and second.replaced == ()


# --------------------------------------------------------------------------- default object


def test_the_default_object_gets_the_driver_most_operator_nodes_get(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    plan = plan_of(operator_cluster(), kb, images)
    assert plan.default_driver == "580.178.04"
    assert any("set driver.version=580.178.04" in n and "595.91.07" in n for n in plan.notes)
    sample = plan_of(bundled_snapshot(), kb, images)
    # Every operator-managed pool of the sample is pinned to an ended or legacy driver.
    assert sample.default_driver == "595.91.07"
    assert any("keep the chart's default" in n for n in sample.notes)
