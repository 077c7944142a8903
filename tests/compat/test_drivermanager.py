"""``cudasched.compat.drivermanager``: who installs a node's driver, from real label sets and
what the cluster shows of the GPU Operator's driver DaemonSets (its ClusterPolicy, NVIDIADriver
objects, driver pods, OpenShift), and how each kind of node moves to another branch."""

from __future__ import annotations

from typing import Any

import pytest

from cudasched.compat.drivermanager import (
    DriverCluster,
    DriverManager,
    driver_change,
    driver_cluster,
    driver_manager,
    policy_driver,
)
from cudasched.knowledge import KnowledgeBase
from cudasched.vocab.versions import parse_driver
from tests.support.gpu_operator import cluster_policy
from tests.support.planning_cluster import eks_node, gpu_node

TRUE = {"nvidia.com/gpu.deploy.driver": "true"}


def _labels(node: dict[str, Any]) -> dict[str, str]:
    return dict(node["metadata"]["labels"])


@pytest.mark.parametrize(
    ("node", "kind", "group", "assumed"),
    [
        (gpu_node("a", "Tesla-T4", "550.90.07", extra=TRUE), DriverManager.OPERATOR, None, False),
        (gpu_node("b", "Tesla-T4", "550.90.07"), DriverManager.OPERATOR, None, True),
        (gpu_node("c", "Tesla-T4", "550.90.07",
                  extra={"nvidia.com/gpu.deploy.driver": "pre-installed"}),
         DriverManager.HOST, None, False),
        (gpu_node("d", "Tesla-T4", "550.90.07", extra={"nvidia.com/gpu.deploy.driver": "false"}),
         DriverManager.HOST, None, False),
        (eks_node("e", "NVIDIA-L4", "550.127.05", "g6-l4"), DriverManager.NODE_IMAGE, "g6-l4",
         False),
        # No deploy label, but an Amazon Linux AMI: EKS's driver, known, not assumed.
        (eks_node("f", "NVIDIA-L4", "550.127.05", "g6-l4", deploy=None),
         DriverManager.NODE_IMAGE, "g6-l4", False),
        # An EKS node group on Ubuntu whose driver the operator installs: the operator's.
        (eks_node("g", "NVIDIA-L4", "550.127.05", "g6-ubuntu", deploy="true",
                  os=("ubuntu", "22.04")),
         DriverManager.OPERATOR, None, False),
        # The operator writes `true` on an Amazon Linux node too: its AMI brings the driver.
        (eks_node("g2", "NVIDIA-L4", "550.127.05", "g6-l4", deploy="true"),
         DriverManager.NODE_IMAGE, "g6-l4", False),
        (gpu_node("h", "NVIDIA-L4", "550.127.05",
                  extra={"cloud.google.com/gke-nodepool": "l4-pool"}),
         DriverManager.NODE_IMAGE, "l4-pool", True),
        (gpu_node("i", "NVIDIA-A100-SXM4-80GB", "550.127.05",
                  extra={"kubernetes.azure.com/agentpool": "gpunp",
                         "nvidia.com/gpu.deploy.driver": "pre-installed"}),
         DriverManager.NODE_IMAGE, "gpunp", False),
    ],
)  # fmt: skip
def test_who_installs_a_nodes_driver_from_its_labels(
    kb: KnowledgeBase,
    node: dict[str, Any],
    kind: DriverManager,
    group: str | None,
    assumed: bool,
) -> None:
    found = driver_manager(kb, _labels(node))
    assert (found.kind, found.group, found.assumed) == (kind, group, assumed)
    assert found.describe()


def test_the_sample_cluster_drivers_are_mostly_the_hosts(kb: KnowledgeBase) -> None:
    from cudasched.cluster.snapshot import bundled_snapshot

    kinds = [
        driver_manager(kb, n["metadata"].get("labels", {})).kind
        for n in bundled_snapshot().nodes
        if n["metadata"].get("labels", {}).get("nvidia.com/gpu.present") == "true"
    ]
    assert len(kinds) == 20
    # 16 nodes carry pre-installed (10 of them in EKS node groups); 4 carry no label.
    assert kinds.count(DriverManager.NODE_IMAGE) == 10
    assert kinds.count(DriverManager.HOST) == 6
    assert kinds.count(DriverManager.OPERATOR) == 4


# ---- GKE: the operator writes `true` where Google installs the driver (defect: pinned) -----

GKE_COS = {
    **TRUE,
    "cloud.google.com/gke-nodepool": "l4-cos",
    "cloud.google.com/gke-os-distribution": "cos",
    "cloud.google.com/gke-accelerator": "nvidia-l4",
    "cloud.google.com/gke-gpu-driver-version": "default",
}


def test_a_gke_cos_node_is_googles_though_the_operator_labels_it_true(kb: KnowledgeBase) -> None:
    node = gpu_node("gke-cos", "NVIDIA-L4", "570.172.08", os=("cos", "121"), extra=GKE_COS)
    found = driver_manager(kb, _labels(node))
    assert (found.kind, found.provider, found.group) == (DriverManager.NODE_IMAGE, "GKE", "l4-cos")
    assert "cloud.google.com/gke-gpu-driver-version=default" in found.evidence


def test_a_gke_ubuntu_pool_without_googles_driver_is_the_operators(kb: KnowledgeBase) -> None:
    labels = {
        **TRUE,
        "cloud.google.com/gke-nodepool": "l4-ubuntu",
        "cloud.google.com/gke-os-distribution": "ubuntu",
        "cloud.google.com/gke-gpu-driver-version": "autoinstall-disabled",
    }
    node = gpu_node("gke-ubuntu", "NVIDIA-L4", "580.105.08", extra=labels)
    policy = driver_cluster(kb, [cluster_policy("v26.7.0", driver={"enabled": True})])
    assert driver_manager(kb, _labels(node), policy).kind is DriverManager.OPERATOR


# ---- the ClusterPolicy: spec.driver.enabled=false means no driver DaemonSet anywhere --------


def test_driver_enabled_false_makes_every_node_the_hosts_or_its_images(kb: KnowledgeBase) -> None:
    """NVIDIA's AKS and EKS guides install the operator with driver.enabled=false where the image
    brings the driver; the operator still writes `true` on every GPU node."""
    evidence = driver_cluster(kb, [cluster_policy("v26.7.0", driver={"enabled": False})])
    aks = gpu_node(
        "aks-1",
        "NVIDIA-A100-80GB-PCIe",
        "550.144.03",
        extra={
            **TRUE,
            "kubernetes.azure.com/agentpool": "gpu",
            "kubernetes.azure.com/accelerator": "nvidia",
        },
    )
    onprem = gpu_node("rack-1", "NVIDIA-L40S", "570.172.08", extra=TRUE)
    a, b = driver_manager(kb, _labels(aks), evidence), driver_manager(kb, _labels(onprem), evidence)
    assert (a.kind, a.provider, a.group) == (DriverManager.NODE_IMAGE, "AKS", "gpu")
    assert b.kind is DriverManager.HOST
    assert "spec.driver.enabled=false" in a.evidence and not a.assumed


def test_nvidiadriver_mode_needs_an_object_that_reaches_the_node(kb: KnowledgeBase) -> None:
    crd_mode = cluster_policy("v26.7.0", driver={"enabled": True, "useNvidiaDriverCRD": True})
    pool = {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver",
            "metadata": {"name": "l40s"}, "spec": {"nodeSelector": {"pool": "l40s"}}}  # fmt: skip
    evidence = driver_cluster(kb, [crd_mode], drivers=[pool])
    selected = gpu_node("n1", "NVIDIA-L40S", "580.105.08", extra={**TRUE, "pool": "l40s"})
    other = gpu_node("n2", "NVIDIA-L40S", "580.105.08", extra=TRUE)
    assert driver_manager(kb, _labels(selected), evidence).kind is DriverManager.OPERATOR
    assert driver_manager(kb, _labels(other), evidence).kind is DriverManager.HOST
    default = {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver",
               "metadata": {"name": "default"}, "spec": {"default": True}}  # fmt: skip
    with_default = driver_cluster(kb, [crd_mode], drivers=[pool, default])
    assert driver_manager(kb, _labels(other), with_default).kind is DriverManager.OPERATOR


def test_the_owner_label_and_a_driver_pod_are_evidence(kb: KnowledgeBase) -> None:
    off = driver_cluster(
        kb,
        [cluster_policy("v26.7.0", driver={"enabled": False})],
        pods=[{"metadata": {"labels": {"app.kubernetes.io/component": "nvidia-driver"}},
               "spec": {"nodeName": "with-pod"}}],
    )  # fmt: skip
    owned = gpu_node("owned", "NVIDIA-L4", "580.105.08",
                     extra={**TRUE, "nvidia.com/gpu-operator.driver.owner": "l4"})  # fmt: skip
    with_pod = gpu_node("with-pod", "NVIDIA-L4", "580.105.08", extra=TRUE)
    assert driver_manager(kb, _labels(owned), off).kind is DriverManager.OPERATOR
    assert driver_manager(kb, _labels(with_pod), off, "with-pod").kind is DriverManager.OPERATOR
    assert driver_manager(kb, _labels(with_pod), off, "elsewhere").kind is DriverManager.HOST


# ---- OpenShift: nodes without RHCOS's OSTREE_VERSION are skipped ------------------------------


def test_openshift_rhel_workers_are_skipped_by_the_operator(kb: KnowledgeBase) -> None:
    rhcos = gpu_node("rhcos", "NVIDIA-L40S", "580.105.08", os=("rhcos", "4.18"), extra={
        **TRUE,
        "node.openshift.io/os_id": "rhcos",
        "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION": "418.94.202507091512-0",
    })  # fmt: skip
    rhel = gpu_node("rhel", "NVIDIA-L40S", "580.105.08", os=("rhel", "9.4"),
                    extra={**TRUE, "node.openshift.io/os_id": "rhel"})  # fmt: skip
    evidence = driver_cluster(
        kb, [cluster_policy(None, name="gpu-cluster-policy", driver={"enabled": True})],
        nodes=[rhcos, rhel],
    )  # fmt: skip
    assert evidence.openshift and evidence.olm
    assert driver_manager(kb, _labels(rhcos), evidence).kind is DriverManager.OPERATOR
    skipped = driver_manager(kb, _labels(rhel), evidence)
    assert skipped.kind is DriverManager.HOST and "driver pools skip" in skipped.evidence


def test_policy_driver_reads_only_clusterpolicies() -> None:
    assert policy_driver({"kind": "ConfigMap"}) is None
    read = policy_driver(cluster_policy("v26.7.0", driver={}))
    assert read is not None and (read.enabled, read.use_crd, read.helm) == (True, False, True)
    bare = cluster_policy("v26.7.0")
    del bare["spec"]
    unread = policy_driver(bare)
    assert unread is not None and unread.enabled is None


# ---- how a driver moves ----------------------------------------------------------------------


def test_an_al2_node_group_is_told_to_leave_amazon_linux_2(kb: KnowledgeBase) -> None:
    """EKS stopped publishing AL2 AMIs on 2025-11-26; the last GPU AMI carries 570.172.08."""
    node = eks_node("al2", "NVIDIA-A10G", "570.172.08", "g5-al2", os=("amzn", "2"))
    manager = driver_manager(kb, _labels(node))
    text = driver_change(
        kb, manager, 580, parse_driver("580.65.06"), parse_driver("580.178.04"), "x", "amzn2"
    )
    assert "g5-al2" in text and "2025-11-26" in text and "570.172.08" in text
    assert "AL2023 NVIDIA AMI or Bottlerocket NVIDIA AMI" in text


@pytest.mark.parametrize(
    ("provider", "os", "says"),
    [
        ("GKE", "cos121", "gpu-driver-version"),
        ("AKS", "ubuntu22.04", "--node-image-only"),
        ("EKS", "amzn2023", "AL2023 NVIDIA AMI v20260714 carries 580.159.03"),
    ],
)
def test_each_cloud_is_told_its_own_knob(
    kb: KnowledgeBase, provider: str, os: str, says: str
) -> None:
    from cudasched.compat.drivermanager import Manager

    manager = Manager(DriverManager.NODE_IMAGE, "test", provider, "pool-a")
    text = driver_change(kb, manager, 580, parse_driver("580.65.06"), None, "x", os)
    assert says in text and "pool-a" in text


def test_no_cluster_evidence_reads_as_the_labels_alone(kb: KnowledgeBase) -> None:
    node = gpu_node("a", "Tesla-T4", "550.90.07", extra=TRUE)
    assert driver_manager(kb, _labels(node)) == driver_manager(kb, _labels(node), DriverCluster())
