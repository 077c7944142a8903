"""``cudasched.compat.operatorrelease``: the GPU Operator release a cluster runs, from its
ClusterPolicy's Helm labels, its NVIDIADriver CRD's schema and its stored NVIDIADriver objects,
in that order; objects shaped as NVIDIA's releases install them (``tests/support/gpu_operator``)."""

from __future__ import annotations

from typing import Any

import pytest

from cudasched.compat.drivermanager import policy_driver
from cudasched.compat.operatorrelease import crd_release, operator_of_cluster, reduced
from cudasched.knowledge import KnowledgeBase
from tests.support.gpu_operator import CRD_SPEC_PROPERTIES, cluster_policy, nvidiadriver_crd


@pytest.mark.parametrize(
    ("release", "line"),
    [
        ("v24.9.2", "24.9"),
        ("v25.3.4", "25.3"),
        ("v25.10.1", "25.10"),
        ("v26.3.0", "26.3"),
        ("v26.3.3", "26.3"),
        ("v26.7.0", "26.7"),
    ],
)
def test_each_releases_crd_tells_its_release_line(
    kb: KnowledgeBase, release: str, line: str
) -> None:
    found = crd_release(kb, [nvidiadriver_crd(release)])
    assert found is not None and found[0].version == line
    read = operator_of_cluster(kb, [nvidiadriver_crd(release)])
    assert read is not None and read.version.version == line
    assert read.source.startswith("read from the nvidiadrivers.nvidia.com CRD's schema")
    assert read.notes == ()


def test_the_crd_marks_are_the_fields_each_release_adds(kb: KnowledgeBase) -> None:
    """Every line's marks are in its own CRD and in no older line's: the read cannot mistake
    one line for another."""
    lines = {v.version: v for v in kb.operator.versions}
    first = {"24.9": "v24.9.2", "25.3": "v25.3.4", "25.10": "v25.10.1", "26.3": "v26.3.0",
             "26.7": "v26.7.0"}  # fmt: skip
    wrong = [
        (line, other)
        for line, version in lines.items()
        for other, tag in first.items()
        if (version.crd_marks <= set(CRD_SPEC_PROPERTIES[tag])) != (lines[other].key >= version.key)
    ]
    assert wrong == []


@pytest.mark.parametrize(
    ("policy", "line", "where"),
    [
        (cluster_policy("v26.7.0"), "26.7", "label app.kubernetes.io/version=v26.7.0"),
        (cluster_policy("v25.10.1"), "25.10", "label app.kubernetes.io/version=v25.10.1"),
        (cluster_policy("v26.3.3"), "26.3", "label app.kubernetes.io/version=v26.3.3"),
        (cluster_policy("v26.7.0-rc.2"), "26.7", "label app.kubernetes.io/version=v26.7.0-rc.2"),
    ],
)
def test_the_cluster_policys_helm_labels_give_the_exact_release(
    kb: KnowledgeBase, policy: dict[str, Any], line: str, where: str
) -> None:
    # The CRD of the same release agrees: no note.
    release = policy["metadata"]["labels"]["app.kubernetes.io/version"].removesuffix("-rc.2")
    read = operator_of_cluster(kb, [policy, nvidiadriver_crd(release)])
    assert read is not None
    assert (read.version.version, read.notes) == (line, ())
    assert read.source == f"read from the cluster's ClusterPolicy cluster-policy {where}"


def test_the_chart_label_is_read_when_the_version_label_names_no_release(
    kb: KnowledgeBase,
) -> None:
    policy = cluster_policy("v25.10.1")
    policy["metadata"]["labels"]["app.kubernetes.io/version"] = "main-latest"
    read = operator_of_cluster(kb, [policy])
    assert read is not None and read.version.version == "25.10"
    assert read.source.endswith("label helm.sh/chart=gpu-operator-v25.10.1")


def test_a_chart_built_from_the_repository_names_no_release(kb: KnowledgeBase) -> None:
    """``main-latest`` / ``v1.0.0-devel`` (deployments/gpu-operator/Chart.yaml) and an OLM
    install's ClusterPolicy (no Helm labels) fall through to the CRD."""
    devel = cluster_policy(None, chart="v1.0.0-devel")
    assert operator_of_cluster(kb, [cluster_policy(None)]) is None
    read = operator_of_cluster(kb, [devel, nvidiadriver_crd("v26.3.3")])
    # v1.0.0-devel is a version, but of the chart, not of the operator: the CRD decides.
    assert read is not None and read.version.version == "26.3", read


def test_a_crd_older_than_the_operator_is_said(kb: KnowledgeBase) -> None:
    """Helm does not upgrade CRDs: a v26.7 operator over v26.3's CRD refuses spec.default and
    spec.upgradePolicy. The operator's release is planned for, and the note says what to do."""
    read = operator_of_cluster(kb, [cluster_policy("v26.7.0"), nvidiadriver_crd("v26.3.3")])
    assert read is not None and read.version.version == "26.7"
    [note] = read.notes
    assert note.startswith(
        "the cluster's NVIDIADriver CRD is GPU Operator 26.3's (it has no spec.default, "
        "spec.upgradePolicy) while the operator is v26.7.0: Helm does not upgrade CRDs"
    )


def test_releases_cudasched_does_not_know(kb: KnowledgeBase) -> None:
    newer = operator_of_cluster(kb, [cluster_policy("v27.1.0")])
    assert newer is not None and newer.version.version == "26.7"
    assert "newer than the releases cudasched knows" in newer.notes[0]
    older = operator_of_cluster(kb, [cluster_policy("v23.9.2")])
    assert older is not None and older.version.version == "24.9"
    between = operator_of_cluster(kb, [cluster_policy("v25.5.0")])
    assert between is not None and between.version.version == "25.3"


def test_stored_objects_are_the_last_read(kb: KnowledgeBase) -> None:
    stored = [{"metadata": {"name": "x"}, "spec": {"kernelModuleType": "auto"}}]
    read = operator_of_cluster(kb, [], stored)
    assert read is not None and read.version.version == "26.3"
    assert read.source == "read from the cluster's NVIDIADriver objects (spec.kernelModuleType)"
    # The CRD comes first.
    assert operator_of_cluster(kb, [nvidiadriver_crd("v25.10.1")], stored).version.version == (  # type: ignore[union-attr]
        "25.10"
    )
    assert operator_of_cluster(kb, [], []) is None


def test_other_crds_and_unserved_versions_are_ignored(kb: KnowledgeBase) -> None:
    other = nvidiadriver_crd("v26.7.0")
    other["metadata"]["name"] = "clusterpolicies.nvidia.com"
    assert operator_of_cluster(kb, [other]) is None
    unserved = nvidiadriver_crd("v26.7.0")
    unserved["spec"]["versions"][0]["served"] = False
    assert operator_of_cluster(kb, [unserved]) is None


@pytest.mark.parametrize("release", sorted(CRD_SPEC_PROPERTIES))
def test_reduced_objects_read_the_same(kb: KnowledgeBase, release: str) -> None:
    """What a live read keeps and a snapshot writes (reduced) answers as the full objects do."""
    full = [cluster_policy(release), nvidiadriver_crd(release)]
    small = [reduced(o) for o in full]
    assert operator_of_cluster(kb, small) == operator_of_cluster(kb, full)
    assert crd_release(kb, small[1:]) == crd_release(kb, full[1:])
    # The driver settings stay: who installs a node's driver is read from them.
    assert small[0]["spec"] == {"driver": {"enabled": True, "useNvidiaDriverCRD": True}}
    assert small[0]["status"] == {"state": "ready"}
    assert policy_driver(small[0]) == policy_driver(full[0])
    assert reduced(small[1]) == small[1]  # reducing twice changes nothing
