"""``operations.nodelabels``: GPU nodes, OS, upgrade state and label-source comparison."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.knowledge import KnowledgeBase
from cudasched.nodes.facts import facts_from_labels
from cudasched.operations.nodelabels import (
    conflicts,
    deprecated_only,
    gpu_capacity,
    is_gpu_node,
    os_of,
    upgrade_state,
)


def node(labels: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n", "labels": labels or {}},
        "status": status,
    }


@pytest.mark.parametrize(
    ("obj", "gpus", "gpu_node"),
    [
        (node(capacity={"nvidia.com/gpu": "8"}), 8, True),
        (node(allocatable={"nvidia.com/gpu": "4"}), 4, True),
        (node(capacity={"nvidia.com/mig-1g.10gb": "7"}), 7, True),
        (node(capacity={"nvidia.com/gpu": "0", "cpu": "4"}), 0, False),
        (node(capacity={"nvidia.com/gpu": "lots"}), 0, False),
        (node({"nvidia.com/gpu.present": "true"}), 0, True),
        (node({"nvidia.com/gpu.present": "false"}), 0, False),
        (node({"nvidia.com/gpu.product": "Tesla-T4"}), 0, False),  # a label alone is no GPU
        ({"metadata": {"name": "n"}}, 0, False),
    ],
)
def test_gpu_nodes(obj: dict[str, Any], gpus: int, gpu_node: bool) -> None:
    assert gpu_capacity(obj) == gpus
    assert is_gpu_node(obj) is gpu_node


def test_os_prefers_node_info_then_nfd() -> None:
    nfd = {
        "feature.node.kubernetes.io/system-os_release.ID": "rhel",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "9.4",
    }
    assert os_of(node(nfd, nodeInfo={"osImage": "Ubuntu 22.04.5 LTS"})) == "Ubuntu 22.04.5 LTS"
    assert os_of(node(nfd)) == "rhel 9.4"
    assert os_of(node({"feature.node.kubernetes.io/system-os_release.ID": "ubuntu"})) == "ubuntu"
    assert os_of(node()) is None


def test_upgrade_state() -> None:
    assert upgrade_state({"nvidia.com/gpu-driver-upgrade-state": "drain-required"}) == (
        "drain-required"
    )
    assert upgrade_state({"nvidia.com/gpu-driver-upgrade-state": ""}) is None
    assert upgrade_state({}) is None


def test_deprecated_only() -> None:
    old = {"nvidia.com/cuda.driver.major": "470", "nvidia.com/cuda.runtime.major": "11"}
    assert deprecated_only(old)
    assert not deprecated_only({**old, "nvidia.com/cuda.driver-version.major": "470"})
    assert not deprecated_only({"nvidia.com/cuda.driver-version.full": "550.90.07"})
    assert not deprecated_only({"cudasched.io/cuda.code": "12040"})


GFD_NEW = {
    "nvidia.com/cuda.driver-version.full": "550.90.07",
    "nvidia.com/cuda.driver-version.major": "550",
    "nvidia.com/cuda.driver-version.minor": "90",
    "nvidia.com/cuda.driver-version.revision": "07",
    "nvidia.com/cuda.runtime-version.full": "12.4",
    "nvidia.com/cuda.runtime-version.major": "12",
    "nvidia.com/cuda.runtime-version.minor": "4",
    "nvidia.com/gpu.compute.major": "7",
    "nvidia.com/gpu.compute.minor": "5",
}
GFD_OLD = {
    "nvidia.com/cuda.driver.major": "550",
    "nvidia.com/cuda.driver.minor": "90",
    "nvidia.com/cuda.driver.rev": "07",
    "nvidia.com/cuda.runtime.major": "12",
    "nvidia.com/cuda.runtime.minor": "4",
}
OURS = {
    "cudasched.io/driver.code": "550090007",
    "cudasched.io/cuda.code": "12040",
    "cudasched.io/gpu.compute.code": "75",
}


def found(labels: dict[str, str], kb: KnowledgeBase) -> list[str]:
    return [c.describe() for c in conflicts(labels, facts_from_labels("n", labels, kb))]


def test_agreeing_sources_do_not_conflict(kb: KnowledgeBase) -> None:
    assert found({**OURS, **GFD_NEW, **GFD_OLD}, kb) == []
    # Leading zeros and a two-part driver are spellings, not different versions.
    two_part = {
        "cudasched.io/driver.version": "550.120",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "120",
        "nvidia.com/cuda.driver.rev": "",
    }
    assert found(two_part, kb) == []


def test_conflicts_name_both_values_and_the_one_used(kb: KnowledgeBase) -> None:
    stale_old = {**GFD_NEW, **GFD_OLD, "nvidia.com/cuda.driver.major": "535"}
    stale_old["nvidia.com/cuda.driver.minor"] = "216"
    stale_old["nvidia.com/cuda.driver.rev"] = "01"
    assert found(stale_old, kb) == [
        "driver: nvidia.com/cuda.driver-version.* says 550.90.07, nvidia.com/cuda.driver.* says "
        "535.216.01; decisions use 550.90.07 (nvidia.com/cuda.driver-version.*)"
    ]
    ours_newer = {**GFD_NEW, **OURS, "cudasched.io/cuda.code": "12080"}
    ours_newer["cudasched.io/driver.code"] = "570124006"
    ours_newer["cudasched.io/gpu.compute.code"] = "80"
    assert found(ours_newer, kb) == [
        "driver: cudasched.io/driver.* says 570.124.06, nvidia.com/cuda.driver-version.* says "
        "550.90.07; decisions use 570.124.06 (cudasched.io/driver.*)",
        "CUDA: cudasched.io/cuda.* says 12.8, nvidia.com/cuda.runtime-version.* says 12.4; "
        "decisions use 12.8 (cudasched.io/cuda.*)",
        "compute capability: cudasched.io/gpu.compute.code says 8.0, nvidia.com/gpu.compute.* "
        "says 7.5; decisions use 8.0 (cudasched.io/gpu.compute.code)",
    ]


def test_a_derived_cuda_is_not_a_source(kb: KnowledgeBase) -> None:
    # GFD's deprecated keys give only the driver here: no CUDA label of theirs to compare, and
    # the CUDA decisions derive from the driver agrees with every label that states one.
    labels = {**OURS, **GFD_OLD}
    del labels["nvidia.com/cuda.runtime.major"], labels["nvidia.com/cuda.runtime.minor"]
    del labels["cudasched.io/cuda.code"]
    assert found(labels, kb) == []
    assert found({**labels, **GFD_NEW}, kb) == []


def test_a_cuda_label_is_compared_as_written(kb: KnowledgeBase) -> None:
    # A node's CUDA is its driver's (NVIDIA Table 3), so reading each source through
    # facts_from_labels would replace GFD's stale 12.2 by 12.4 and hide the disagreement.
    stale = {**OURS, **GFD_NEW, "nvidia.com/cuda.runtime-version.full": "12.2"}
    stale["nvidia.com/cuda.runtime-version.minor"] = "2"
    assert found(stale, kb) == [
        "CUDA: cudasched.io/cuda.* says 12.4, nvidia.com/cuda.runtime-version.* says 12.2; "
        "decisions use 12.4 (cudasched.io/cuda.*)"
    ]
    # One source whose CUDA label contradicts its own driver: the driver is the other side.
    alone = {k: v for k, v in stale.items() if k.startswith("nvidia.com/")}
    assert found(alone, kb) == [
        "CUDA: nvidia.com/cuda.runtime-version.* says 12.2, driver 550.90.07 (NVIDIA Table 3) "
        "says 12.4; decisions use 12.4 (the driver's)"
    ]
    # Our label claiming more than the driver supports (issue 12: 495.46 labelled 11.6).
    claims = {"cudasched.io/driver.version": "495.46", "cudasched.io/cuda.version": "11.6"}
    assert found(claims, kb) == [
        "CUDA: cudasched.io/cuda.* says 11.6, driver 495.46 (NVIDIA Table 3) says 11.5; "
        "decisions use 11.5 (the driver's)"
    ]


@settings(max_examples=50)
@given(
    major=st.sampled_from([470, 535, 550, 570, 580]),
    minor=st.integers(0, 250),
    rev=st.integers(0, 99),
    new_delta=st.integers(0, 2),
)
def test_conflict_exactly_when_generations_differ(
    kb: KnowledgeBase, major: int, minor: int, rev: int, new_delta: int
) -> None:
    labels = {
        "nvidia.com/cuda.driver-version.major": str(major),
        "nvidia.com/cuda.driver-version.minor": str(minor + new_delta),
        "nvidia.com/cuda.driver-version.revision": f"{rev:02d}",
        "nvidia.com/cuda.driver.major": str(major),
        "nvidia.com/cuda.driver.minor": f"{minor:02d}",  # GFD keeps leading zeros
        "nvidia.com/cuda.driver.rev": f"{rev:02d}",
    }
    assert bool(found(labels, kb)) == (new_delta != 0)
