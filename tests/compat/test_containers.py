"""``cudasched.compat.containers`` and ``gpu-operator.yaml``: which driver containers NVIDIA
publishes per OS, architecture, branch and date, the precompiled matrix, GPU Operator releases
and the boards they support."""

from __future__ import annotations

import copy
from datetime import date
from typing import Any

import pytest

from cudasched.compat.branches import gpu_target, parse_os_tag
from cudasched.compat.containers import (
    Install,
    board_minimum,
    container_oses,
    container_release,
    image_os_tag,
    install_option,
    known_os,
    operator_version,
    precompiled_problem,
    scope_problem,
)
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.drivers import parse_kernel
from cudasched.nodes.facts import facts_from_parts
from cudasched.vocab.errors import InputError, KnowledgeError

TODAY = date(2026, 12, 1)


# --------------------------------------------------------------------------- containers


@pytest.mark.parametrize(
    ("branch", "os", "when", "answer"),
    [
        (580, "ubuntu22.04", TODAY, "580.178.04"),
        (595, "ubuntu24.04", TODAY, "595.91.07"),
        (595, "ubuntu26.04", TODAY, "595.91.07"),
        (580, "rhel9", TODAY, "580.178.04"),
        (535, "ubuntu22.04", TODAY, "535.309.01"),  # the branch's last container
        (535, "ubuntu20.04", TODAY, "535.274.02"),  # the OS's last container of the branch
        (570, "ubuntu20.04", TODAY, "570.195.03"),
        (580, "ubuntu22.04", date(2026, 3, 1), "580.126.20"),
        (580, "ubuntu20.04", TODAY, "NVIDIA stopped building ubuntu20.04 driver containers on"),
        (595, "amzn2023", TODAY, "NVIDIA has never published driver containers for amzn2023"),
        (580, "ubuntu26.04", TODAY, "no R580 driver container for ubuntu26.04"),
        (535, "ubuntu24.04", TODAY, "no R535 driver container for ubuntu24.04"),
        (595, "debian12", TODAY, "no driver containers for debian12"),
        (580, "ubuntu22.04", date(2025, 6, 1), "published yet on 2025-06-01"),
        (620, "ubuntu24.04", TODAY, "no R620 driver container"),
        (580, None, TODAY, "the OS is not known"),
    ],
)
def test_which_driver_containers_nvidia_publishes(
    kb: KnowledgeBase, branch: int, os: str | None, when: date, answer: str
) -> None:
    found = container_release(kb, branch, os, when)
    if "." in answer and " " not in answer:
        assert str(found) == answer
    else:
        assert isinstance(found, str) and answer in found, found


@pytest.mark.parametrize(
    ("operator", "os", "tag"),
    [
        # NVIDIA/gpu-operator internal/state/nodepool.go getOSTag at v26.7.0: ol, rocky, rhel
        # use the major version; at v26.3.3 rocky, and rhel from 10; before: ID + VERSION_ID.
        ("26.7", "rhel9.4", "rhel9"),
        ("26.7", "rhel8.10", "rhel8"),
        ("26.7", "rocky9.7", "rocky9"),
        ("26.3", "rhel9.4", "rhel9.4"),
        ("26.3", "rhel10.1", "rhel10"),
        ("26.3", "rocky9.7", "rocky9"),
        ("25.10", "rhel9.4", "rhel9.4"),
        ("25.10", "rhel10.1", "rhel10.1"),
        ("24.9", "rhel8.10", "rhel8.10"),
        ("24.9", "ubuntu22.04", "ubuntu22.04"),
    ],
)
def test_the_image_os_tag_each_operator_release_forms(
    kb: KnowledgeBase, operator: str, os: str, tag: str
) -> None:
    assert image_os_tag(parse_os_tag(os), operator_version(kb, operator)) == tag


@pytest.mark.parametrize(
    ("branch", "os", "operator", "when", "answer"),
    [
        # v26.7 pulls -rhel9 whatever the minor version.
        (580, "rhel9.2", "26.7", TODAY, "580.178.04"),
        # v26.3 pulls -rhel9.4: NVIDIA pushes the rhel9 image again under it (since 2025-04-18).
        (580, "rhel9.4", "26.3", TODAY, "580.178.04"),
        (595, "rhel9.6", "25.10", TODAY, "595.91.07"),
        (580, "rhel8.10", "25.10", TODAY, "580.178.04"),
        # rhel9.5 was pushed until 2025-10-15: the newest R580 out by then.
        (580, "rhel9.5", "26.3", TODAY, "580.95.05"),
        # rhel9.2 tags stopped on 2024-10-23 and never held R580; R535 up to what was out then.
        (580, "rhel9.2", "26.3", TODAY, "stopped pushing rhel9.2 driver containers on 2024-10-23"),
        (535, "rhel9.2", "25.10", TODAY, "535.216.01"),
        # A minor version NVIDIA never tagged.
        (
            580,
            "rhel9.9",
            "26.3",
            TODAY,
            "no rhel9.9 driver containers: move the nodes to rhel9.4 or",
        ),
        # rhel9.7 started on 2025-12-02, after NVIDIA stopped building R550.
        (550, "rhel9.7", "26.3", TODAY, "no R550 driver container tagged rhel9.7"),
        (580, "rhel9.7", "26.3", date(2025, 11, 1), "no rhel9.7 driver containers before"),
        # v26.3 tags RHEL 10 with the major version only.
        (580, "rhel10.1", "26.3", TODAY, "580.178.04"),
    ],
)
def test_rhel_containers_under_the_tag_the_operator_pulls(
    kb: KnowledgeBase, branch: int, os: str, operator: str, when: date, answer: str
) -> None:
    found = container_release(kb, branch, parse_os_tag(os), when, operator_version(kb, operator))
    if "." in answer and " " not in answer:
        assert str(found) == answer
    else:
        assert isinstance(found, str) and answer in found, found


def test_oses_a_branch_is_still_built_for(kb: KnowledgeBase) -> None:
    assert "ubuntu20.04" not in container_oses(kb, 580)
    assert "ubuntu26.04" not in container_oses(kb, 580)
    assert {"ubuntu22.04", "ubuntu24.04", "ubuntu26.04", "rhel10"} <= set(container_oses(kb, 595))
    assert container_oses(kb, 535) == ()  # the branch ended in NVIDIA's CI


@pytest.mark.parametrize(
    ("os", "kernel", "branch", "problem"),
    [
        ("ubuntu22.04", "5.15.0-113-generic", 580, None),
        ("ubuntu22.04", "6.8.0-48-nvidia", 595, None),
        ("ubuntu24.04", "6.8.0-1021-aws", 580, None),
        ("ubuntu24.04", "6.8.0-1017-azure-fde", 595, None),
        ("ubuntu26.04", "7.0.0-12-generic", 595, None),
        ("ubuntu26.04", "7.0.0-12-generic", 580, "no R580 precompiled driver container"),
        ("ubuntu22.04", "5.15.0-1075-azure-fde", 580, "azure-fde kernels on ubuntu22.04"),
        ("ubuntu22.04", "6.5.0-45-generic", 580, "not of an LTS kernel series"),
        ("ubuntu24.04", "5.15.0-113-generic", 580, "not of an LTS kernel series"),
        ("ubuntu22.04", "5.15.0-113-lowlatency", 580, "built for the aws"),
        ("ubuntu22.04", "5.15.0-113-generic", 620, "R580, R595 only, not R620"),
        ("ubuntu22.04", "5.15.0-113-generic", 570, "R580, R595 only, not R570"),
        ("ubuntu20.04", "5.4.0-200-generic", 580, "not ubuntu20.04"),
        ("rhel9", "5.14.0-427.el9.x86_64", 580, "not rhel9"),
        ("amzn2023", "6.1.115-126.197.amzn2023.x86_64", 595, "not amzn2023"),
        (None, "5.15.0-113-generic", 580, "OS is not known"),
        ("ubuntu22.04", None, 580, "kernel is not known"),
    ],
)
def test_precompiled_only_inside_nvidias_matrix(
    kb: KnowledgeBase, os: str | None, kernel: str | None, branch: int, problem: str | None
) -> None:
    found = precompiled_problem(
        kb,
        parse_os_tag(os) if os else None,
        parse_kernel(kernel) if kernel else None,
        branch,
    )
    assert (found is None) == (problem is None), found
    if problem is not None:
        assert problem in (found or "")


# --------------------------------------------------------------------------- one branch


def _target(kb: KnowledgeBase, gpu: str) -> Any:
    target = gpu_target(kb, facts_from_parts("x", gpu=gpu, driver=None, kb=kb))
    assert target is not None
    return target


@pytest.mark.parametrize(
    ("gpu", "branch", "operator", "os", "answer"),
    [
        ("V100", 580, True, "ubuntu22.04", "580.178.04"),
        ("V100", 595, True, "ubuntu22.04", "Volta GPUs end at R580"),
        ("K80", 580, False, None, "Kepler GPUs end at R470"),
        ("B200", 535, False, None, "R535 predates Blackwell"),
        ("A100", 620, False, None, "no R620 release is known"),
        ("A100", 620, True, "ubuntu24.04", "no R620 driver container"),
        ("A100", 595, True, "ubuntu20.04", "stopped building ubuntu20.04"),
        ("A100", 595, True, "amzn2023", "never published"),
        ("A100", 595, False, "amzn2023", "595.91.07"),  # the host's or node image's driver
    ],
)
def test_install_option_of_one_branch(
    kb: KnowledgeBase, gpu: str, branch: int, operator: bool, os: str | None, answer: str
) -> None:
    found = install_option(
        kb,
        _target(kb, gpu),
        branch,
        today=TODAY,
        os=parse_os_tag(os) if os else None,
        operator=kb.operator.newest if operator else None,
    )
    if isinstance(found, Install):
        assert str(found.release) == answer
    else:
        assert answer in found, found


def test_an_os_an_operator_release_does_not_support_is_refused(kb: KnowledgeBase) -> None:
    """Ubuntu 26.04 has R595 containers, but GPU Operator 26.3 does not support it."""
    old = kb.operator.version("26.3")
    assert old is not None
    found = install_option(
        kb, _target(kb, "H100"), 595, today=TODAY, os=parse_os_tag("ubuntu26.04"), operator=old
    )
    assert isinstance(found, str) and "GPU Operator 26.3 does not support ubuntu26.04" in found


def test_boards_with_a_lowest_driver_container(kb: KnowledgeBase) -> None:
    assert str(board_minimum(kb, ["NVIDIA-B200"])) == "570.133.20"
    assert str(board_minimum(kb, ["NVIDIA RTX PRO 6000 Blackwell Server Edition"])) == "575.57.08"
    assert board_minimum(kb, ["NVIDIA-H100-80GB-HBM3"]) is None
    # On 2025-04-01 the newest R570 container was older than the operator's floor for B200.
    found = install_option(
        kb,
        _target(kb, "B200"),
        570,
        today=date(2025, 4, 1),
        os=parse_os_tag("ubuntu22.04"),
        operator=kb.operator.newest,
        products=("NVIDIA-B200",),
    )
    assert isinstance(found, str) and "needs a driver container >= 570.133.20" in found


def test_support_scope(kb: KnowledgeBase) -> None:
    assert scope_problem(kb, ["NVIDIA-H100-80GB-HBM3"], True) is None
    said = scope_problem(kb, ["NVIDIA-GeForce-RTX-4090"], False) or ""
    assert "not a GPU the GPU Operator supports" in said
    # Listed by the operator although an RTX board.
    assert scope_problem(kb, ["NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"], False) is None
    # The workstation boards of the platform page, by GFD's name or the product's.
    for board in ("NVIDIA-RTX-A6000", "RTX A6000", "Quadro RTX 8000", "NVIDIA-T1000"):
        assert scope_problem(kb, [board], False) is None, board
    # The Workstation Edition of the RTX PRO 6000 is not the listed Server Edition.
    workstation = "NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition"
    assert scope_problem(kb, [workstation], False) is not None


# --------------------------------------------------------------------------- operator releases


def test_operator_releases(kb: KnowledgeBase) -> None:
    assert [v.version for v in kb.operator.versions] == ["26.7", "26.3", "25.10", "25.3", "24.9"]
    assert operator_version(kb, None).version == "26.7"
    assert operator_version(kb, "v25.10.1").version == "25.10"
    assert str(operator_version(kb, "26.7").default_driver) == "595.91.07"
    with pytest.raises(InputError, match=r"invalid --gpu-operator-version '23.9'.*26.7, 26.3"):
        operator_version(kb, "23.9")
    for version in kb.operator.versions:
        assert version.source and version.os_source and version.values_source


def test_known_oses(kb: KnowledgeBase) -> None:
    assert str(known_os(kb, parse_os_tag("ubuntu20.04"))) == "ubuntu20.04"
    assert str(known_os(kb, parse_os_tag("amzn2023"))) == "amzn2023"
    with pytest.raises(InputError, match=r"unknown OS 'windows11'.*ubuntu22.04"):
        known_os(kb, parse_os_tag("windows11"))


# --------------------------------------------------------------------------- the data file


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("driver_containers", 1, "branches", 535), "570.1.1", "is not a release of R535"),
        (("driver_containers", 1, "os"), "Ubuntu 22", "is not an OS tag"),
        (("driver_containers", 0, "source"), "nowhere", "neither a URL nor a key"),
        (("precompiled", "branches"), ["580", 595], r"branches \(integers\)"),
        (("operator_versions", 0, "version"), "26", "version is MAJOR.MINOR"),
        (("operator_versions", 0, "default_driver"), "latest", "operator_versions"),
        (("driver_containers", 1, "arches"), ["x86_64"], "arches lists amd64, arm64"),
        (("driver_containers", 5, "minor_tags", 13, "os_id"), None, "is not of rhel9"),
        (("precompiled", "exclude", 0), {"kernel": "5.15"}, "arch} rules"),
        (("driver_manager", "managed_drivers", 0, "os_ids"), ["amzn"], "a label or os_ids"),
        (("driver_manager", "driver_pod_label"), {}, "driver_pod_label is one key"),
    ],
)
def test_malformed_operator_facts_are_knowledge_errors(
    raw_documents: dict[str, Any], path: tuple[Any, ...], value: Any, message: str
) -> None:
    docs = copy.deepcopy(raw_documents)
    node = docs["gpu-operator.yaml"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(KnowledgeError, match=message):
        KnowledgeBase.from_documents(docs)


def test_every_operator_fact_has_a_source(kb: KnowledgeBase) -> None:
    facts = kb.operator
    rows = [*facts.containers.values(), *facts.boards]
    assert len(rows) == 26
    assert all(r.source.strip() for r in rows)
    minors = [m for r in facts.containers.values() for m in r.minor_tags]
    assert all(m.source for m in minors) and all(m.arch_source for m in minors if m.arches)
    assert all(r.arch_source for r in facts.containers.values() if r.arches)
    assert facts.precompiled.source and facts.precompiled.naming_source
    assert facts.precompiled.arch_source
    manager = facts.driver_manager
    assert manager.source and all(g.source for g in manager.node_groups)
    assert manager.owner_source and manager.driver_pod_source and manager.enabled_source
    assert all(m.source for m in manager.managed) and len(manager.managed) == 3
    assert facts.openshift is not None and facts.openshift.ostree_source
    assert all(i.source for i in facts.node_images) and len(facts.node_images) == 2


# --------------------------------------------------------------------------- architectures


def test_rhel_minor_tags_are_x86_only_and_major_tags_multi_arch(kb: KnowledgeBase) -> None:
    rhel94 = parse_os_tag("rhel9.4")
    v25_10 = kb.operator.version("25.10")
    arm = container_release(kb, 580, rhel94, TODAY, v25_10, "arm64")
    assert isinstance(arm, str) and "rhel9.4 driver containers for amd64 only" in arm
    assert not isinstance(container_release(kb, 580, rhel94, TODAY, v25_10, "amd64"), str)
    newest = kb.operator.newest  # v26.7 pulls rhel9, built for both
    assert not isinstance(container_release(kb, 580, rhel94, TODAY, newest, "arm64"), str)


def test_precompiled_arm64_only_on_ubuntu_24_04(kb: KnowledgeBase) -> None:
    kernel = parse_kernel("6.8.0-48-generic")
    jammy, noble = parse_os_tag("ubuntu22.04"), parse_os_tag("ubuntu24.04")
    assert "amd64 only" in (precompiled_problem(kb, jammy, kernel, 580, "arm64") or "")
    assert precompiled_problem(kb, noble, kernel, 580, "arm64") is None
    fde = parse_kernel("6.8.0-1020-azure-fde")
    assert "arm64 precompiled" in (precompiled_problem(kb, noble, fde, 580, "arm64") or "")
    assert precompiled_problem(kb, noble, fde, 580, "amd64") is None


def test_an_os_without_containers_points_to_those_nvidia_builds(kb: KnowledgeBase) -> None:
    """Not to Amazon Linux 2023 (never built) or Ubuntu 20.04 (ended)."""
    found = container_release(kb, 580, "cos121", TODAY)
    assert isinstance(found, str) and "no driver containers for cos121" in found
    assert "amzn2023" not in found and "ubuntu20.04" not in found and "ubuntu24.04" in found
    assert "amzn2023" not in container_oses(kb, 580) and "ubuntu20.04" not in container_oses(
        kb, 580
    )
