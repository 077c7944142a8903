"""Test helper: clusters of every shape people run GPUs in, with the label sets their nodes
really carry, written to ``examples/clusters/<shape>.yaml`` for the docs' sessions and the tests.

Each node carries what GPU Feature Discovery, Node Feature Discovery and the GPU Operator write
(:mod:`tests.support.builders`), plus its platform's own labels, as the sources in
``gpu-operator.yaml`` name them:

* **GKE** (``gke``): ``cloud.google.com/gke-nodepool``, ``gke-os-distribution`` (``cos``,
  ``ubuntu``), ``gke-accelerator`` and, where Google installs the driver,
  ``gke-gpu-driver-version``; Container-Optimized OS reports NFD ``ID=cos``. The GPU Operator runs
  in NVIDIADriver mode with one object for the Ubuntu pool, as NVIDIA documents for GKE's
  "NVIDIA Driver Manager" pools, and still labels the COS nodes ``gpu.deploy.driver=true``.
* **AKS** (``aks``): ``kubernetes.azure.com/agentpool``, ``node-image-version``,
  ``accelerator``, ``os-sku``; a pool on AKS's own driver (k8s-driver-manager found it:
  ``pre-installed``) and one created with ``--gpu-driver none`` whose driver pods the operator runs.
* **EKS** (``eks``): managed node groups on Amazon Linux 2, AL2023 and Bottlerocket NVIDIA AMIs
  (``eks.amazonaws.com/nodegroup``), and self-managed Ubuntu nodes the operator drives.
* **OpenShift** (``openshift-4.18``, ``openshift-4.20``): ``node.openshift.io/os_id``, NFD's
  ``OSTREE_VERSION`` on RHCOS (4.18 reports ``ID=rhcos``; 4.19 and later ``ID=rhel``, per
  NVIDIA's tag guidance), a RHEL compute node without it, and an OLM install (no Helm labels).
* **Grace/arm64** (``grace``): GH200 and GB200 on arm64 Ubuntu beside an x86 H100.
* **on-premises** (``onprem``): workstation boards (RTX A6000, Quadro RTX 8000), a GeForce
  board, Volta, RHEL 9, in NVIDIADriver mode with the v26.7 default object; workloads with their
  own node selection and GPU counts.

The values that are platform examples rather than facts (pool names, AMI ids, node-image
versions, OSTREE versions) are illustrative; every label *key* and the meaning of each value is
in ``gpu-operator.yaml``'s sources. Run ``python -m tests.support.cluster_shapes`` to write the
files.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cudasched.cluster.snapshot import to_yaml
from tests.support import builders
from tests.support.gpu_operator import cluster_policy, nvidiadriver_crd
from tests.support.planning_cluster import gpu_node, isvc, runtime

__all__ = ["SHAPES", "shape", "write"]

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "examples" / "clusters"
TRUE = {"nvidia.com/gpu.deploy.driver": "true"}
PRE = {"nvidia.com/gpu.deploy.driver": "pre-installed"}
OPERATOR_NS = "gpu-operator"


def _node(
    name: str,
    product: str,
    driver: str,
    os: tuple[str, str],
    kernel: str,
    labels: dict[str, str],
    *,
    arch: str = "amd64",
    gpus: int = 8,
    os_image: str | None = None,
    taints: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    node = gpu_node(name, product, driver, os=os, kernel=kernel, gpus=gpus, extra=labels)
    node["metadata"]["labels"]["kubernetes.io/arch"] = arch
    node["status"]["nodeInfo"]["architecture"] = arch
    if os_image is not None:
        node["status"]["nodeInfo"]["osImage"] = os_image
    if taints:
        node["spec"] = {"taints": taints}
    return node


def _driver_pod(node: str) -> dict[str, Any]:
    """A GPU Operator driver pod on ``node`` (its DaemonSet's pod labels)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"nvidia-driver-daemonset-{node}",
            "namespace": OPERATOR_NS,
            "labels": {
                "app": "nvidia-driver-daemonset",
                "app.kubernetes.io/component": "nvidia-driver",
            },
        },
        "spec": {"nodeName": node, "containers": [{"name": "nvidia-driver-ctr", "image": "x"}]},
        "status": {"phase": "Running"},
    }


def _workloads(namespace: str, *cudas: str) -> list[dict[str, Any]]:
    """A serving runtime per CUDA version and one InferenceService on each."""
    out: list[dict[str, Any]] = []
    for cuda in cudas:
        name = f"vllm-cuda{cuda.replace('.', '')}"
        out += [runtime(name, cuda), isvc(f"chat-{cuda.replace('.', '')}", namespace, name)]
    return out


def _nvidiadriver(name: str, version: str, selector: dict[str, str] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driverType": "gpu",
        "repository": "nvcr.io/nvidia",
        "image": "driver",
        "version": version,
        "kernelModuleType": "auto",
        "usePrecompiled": False,
        "default": selector is None,
    }
    if selector is not None:
        spec["nodeSelector"] = selector
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": name},
        "spec": spec,
    }


# ---------------------------------------------------------------------------------------- GKE


def gke() -> list[dict[str, Any]]:
    cos = {
        **TRUE,
        "cloud.google.com/gke-nodepool": "l4-cos",
        "cloud.google.com/gke-os-distribution": "cos",
        "cloud.google.com/gke-accelerator": "nvidia-l4",
        "cloud.google.com/gke-gpu-driver-version": "default",
        "node.kubernetes.io/instance-type": "g2-standard-48",
    }
    ubuntu = {
        **TRUE,
        "cloud.google.com/gke-nodepool": "l4-ubuntu",
        "cloud.google.com/gke-os-distribution": "ubuntu",
        "cloud.google.com/gke-accelerator": "nvidia-l4",
        "gke-no-default-nvidia-gpu-device-plugin": "true",
        "node.kubernetes.io/instance-type": "g2-standard-48",
        "nvidia.com/gpu-operator.driver.owner": "l4-ubuntu",
    }
    nodes = [
        _node(f"gke-cos-{i}", "NVIDIA-L4", "570.172.08", ("cos", "121"), "6.6.72+", cos, gpus=4,
              os_image="Container-Optimized OS from Google")
        for i in (1, 2)
    ] + [
        _node(f"gke-ubuntu-{i}", "NVIDIA-L4", "570.195.03", ("ubuntu", "22.04"),
              "5.15.0-1075-gke", ubuntu, gpus=4)
        for i in (1, 2)
    ]  # fmt: skip
    return [
        *nodes,
        cluster_policy("v26.7.0", driver={"enabled": True, "useNvidiaDriverCRD": True}),
        _nvidiadriver("l4-ubuntu", "570.195.03", {"cloud.google.com/gke-nodepool": "l4-ubuntu"}),
        *(_driver_pod(n["metadata"]["name"]) for n in nodes[2:]),
        *_workloads("ml", "12.8", "13.0"),
    ]


# ---------------------------------------------------------------------------------------- AKS


def aks() -> list[dict[str, Any]]:
    def pool(name: str, deploy: dict[str, str]) -> dict[str, str]:
        return {
            **deploy,
            "kubernetes.azure.com/agentpool": name,
            "kubernetes.azure.com/mode": "user",
            "kubernetes.azure.com/node-image-version": "AKSUbuntu-2204gen2containerd-202507.21.0",
            "kubernetes.azure.com/accelerator": "nvidia",
            "kubernetes.azure.com/os-sku": "Ubuntu",
            "node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4",
        }

    managed = [
        _node(f"aks-gpumanaged-{i}", "NVIDIA-A100-80GB-PCIe", "550.144.03", ("ubuntu", "22.04"),
              "5.15.0-1089-azure", pool("gpumanaged", PRE), gpus=1)
        for i in (1, 2)
    ]  # fmt: skip
    operated = [
        _node(f"aks-gpuop-{i}", "NVIDIA-A100-80GB-PCIe", "570.195.03", ("ubuntu", "22.04"),
              "5.15.0-1089-azure", pool("gpuop", TRUE), gpus=1)
        for i in (1, 2)
    ]  # fmt: skip
    return [
        *managed,
        *operated,
        cluster_policy("v26.7.0", driver={"enabled": True}),
        *(_driver_pod(n["metadata"]["name"]) for n in operated),
        *_workloads("ml", "12.4", "13.0"),
    ]


# ---------------------------------------------------------------------------------------- EKS


def eks() -> list[dict[str, Any]]:
    def group(name: str, instance: str) -> dict[str, str]:
        return {
            **PRE,
            "eks.amazonaws.com/nodegroup": name,
            "eks.amazonaws.com/nodegroup-image": "ami-0c4f1b5f6a2e8d7e1",
            "eks.amazonaws.com/capacityType": "ON_DEMAND",
            "node.kubernetes.io/instance-type": instance,
        }

    nodes = [
        _node("eks-al2-1", "NVIDIA-A10G", "570.172.08", ("amzn", "2"),
              "5.10.245-241.978.amzn2.x86_64", group("g5-al2", "g5.2xlarge"), gpus=1,
              os_image="Amazon Linux 2"),
        _node("eks-al2023-1", "NVIDIA-L4", "580.105.08", ("amzn", "2023"),
              "6.12.40-64.114.amzn2023.x86_64", group("g6-al2023", "g6.2xlarge"), gpus=1,
              os_image="Amazon Linux 2023.9.20251117"),
        _node("eks-bottlerocket-1", "NVIDIA-A100-SXM4-40GB", "570.172.08",
              ("bottlerocket", "1.49.0"), "6.1.152", group("p4d-bottlerocket", "p4d.24xlarge"),
              os_image="Bottlerocket OS 1.49.0 (aws-k8s-1.33-nvidia)"),
        _node("eks-ubuntu-1", "NVIDIA-H100-80GB-HBM3", "570.195.03", ("ubuntu", "22.04"),
              "6.8.0-1036-aws", {**TRUE, "node.kubernetes.io/instance-type": "p5.48xlarge"}),
    ]  # fmt: skip
    return [
        *nodes,
        cluster_policy("v26.7.0", driver={"enabled": True}),
        _driver_pod("eks-ubuntu-1"),
        *_workloads("ml", "12.8", "13.0"),
    ]


# ---------------------------------------------------------------------------------- OpenShift


def _openshift(release: str, rhcos: tuple[str, str], ostree: str, kernel: str) -> list[Any]:
    rhcos_labels = {
        **TRUE,
        "node.openshift.io/os_id": rhcos[0],
        "node-role.kubernetes.io/worker": "",
        "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION": ostree,
        "feature.node.kubernetes.io/system-os_release.OPENSHIFT_VERSION": release,
    }
    rhel_labels = {**TRUE, "node.openshift.io/os_id": "rhel", "node-role.kubernetes.io/worker": ""}
    nodes = [
        _node(f"ocp{release.replace('.', '')}-rhcos-{i}", "NVIDIA-L40S", "570.172.08", rhcos,
              kernel, rhcos_labels, gpus=4, os_image=f"Red Hat Enterprise Linux CoreOS {ostree}")
        for i in (1, 2)
    ]  # fmt: skip
    worker = _node(
        f"ocp{release.replace('.', '')}-rhel-1",
        "NVIDIA-L40S",
        "570.172.08",
        ("rhel", "9.4"),
        "5.14.0-427.81.1.el9_4.x86_64",
        rhel_labels,
        gpus=4,
        os_image="Red Hat Enterprise Linux 9.4 (Plow)",
    )
    return [
        *nodes,
        worker,
        cluster_policy(None, name="gpu-cluster-policy", driver={"enabled": True}),
        nvidiadriver_crd("v26.7.0"),
        *(_driver_pod(n["metadata"]["name"]) for n in nodes),
        *_workloads("ml", "12.8", "13.0"),
    ]


def openshift_418() -> list[dict[str, Any]]:
    return _openshift(
        "4.18", ("rhcos", "4.18"), "418.94.202507091512-0", "5.14.0-427.81.1.el9_4.x86_64"
    )


def openshift_420() -> list[dict[str, Any]]:
    return _openshift("4.20", ("rhel", "9.6"), "9.6.20251015-1", "5.14.0-570.49.1.el9_6.x86_64")


# -------------------------------------------------------------------------------- Grace/arm64


def grace() -> list[dict[str, Any]]:
    nodes = [
        _node("gh200-1", "NVIDIA-GH200-480GB", "570.172.08", ("ubuntu", "22.04"),
              "6.8.0-1031-nvidia-64k", TRUE, arch="arm64", gpus=1),
        _node("gb200-1", "NVIDIA-GB200", "570.172.08", ("ubuntu", "24.04"), "6.8.0-1028-nvidia",
              TRUE, arch="arm64", gpus=4),
        _node("h100-1", "NVIDIA-H100-80GB-HBM3", "570.172.08", ("ubuntu", "22.04"),
              "5.15.0-124-generic", TRUE),
    ]  # fmt: skip
    return [
        *nodes,
        cluster_policy("v26.7.0", driver={"enabled": True}),
        *(_driver_pod(n["metadata"]["name"]) for n in nodes),
        *_workloads("ml", "12.8", "13.0"),
    ]


# -------------------------------------------------------------------------------- on-premises


def onprem() -> list[dict[str, Any]]:
    owner = "nvidia.com/gpu-operator.driver.owner"
    taint = [{"key": "dedicated", "value": "inference", "effect": "NoSchedule"}]
    nodes = [
        _node("ws-a6000-1", "NVIDIA-RTX-A6000", "570.172.08", ("ubuntu", "22.04"),
              "5.15.0-124-generic", {**TRUE, owner: "default", "rack": "ws"}, gpus=4),
        _node("ws-a6000-2", "NVIDIA-RTX-A6000", "570.172.08", ("ubuntu", "22.04"),
              "5.15.0-124-generic", {**TRUE, owner: "default", "rack": "ws"}, gpus=4),
        _node("ws-rtx8000-1", "Quadro-RTX-8000", "570.172.08", ("ubuntu", "22.04"),
              "5.15.0-124-generic", {**TRUE, owner: "default", "rack": "ws"}, gpus=2),
        _node("v100-1", "Tesla-V100-SXM2-32GB", "570.172.08", ("ubuntu", "22.04"),
              "5.15.0-124-generic", {**TRUE, owner: "default", "rack": "dgx1"}),
        _node("l40s-rhel-1", "NVIDIA-L40S", "570.172.08", ("rhel", "9.4"),
              "5.14.0-427.81.1.el9_4.x86_64", {**TRUE, owner: "default", "rack": "inference"},
              gpus=4, taints=taint),
        _node("l40s-rhel-2", "NVIDIA-L40S", "580.105.08", ("rhel", "9.4"),
              "5.14.0-427.81.1.el9_4.x86_64", {**TRUE, owner: "default", "rack": "inference"},
              gpus=4, taints=taint),
        _node("desk-4090-1", "NVIDIA-GeForce-RTX-4090", "570.172.08", ("ubuntu", "24.04"),
              "6.8.0-48-generic", {**TRUE, owner: "default", "rack": "desk"}, gpus=1),
    ]  # fmt: skip
    pinned = builders.pod(
        "train-8gpu",
        "research",
        image="nvcr.io/nvidia/pytorch:25.08-py3",
        gpus=8,
        node_selector={"rack": "ws"},
        phase="Pending",
    )
    tolerating = builders.pod(
        "embed-1",
        "ml",
        image="registry.example.com/embed:1.0",
        gpus=1,
        annotations={"cudasched.io/cuda-version": "13.0"},
        node_name="ws-a6000-1",
        phase="Running",
    )
    tolerating["spec"]["tolerations"] = [
        {"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoSchedule"}
    ]
    return [
        *nodes,
        cluster_policy("v26.7.0", driver={"enabled": True, "useNvidiaDriverCRD": True}),
        _nvidiadriver("default", "570.172.08", None),
        *(_driver_pod(n["metadata"]["name"]) for n in nodes),
        *_workloads("ml", "12.4", "12.8"),
        pinned,
        tolerating,
    ]


SHAPES: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "gke": gke,
    "aks": aks,
    "eks": eks,
    "openshift-4.18": openshift_418,
    "openshift-4.20": openshift_420,
    "grace": grace,
    "onprem": onprem,
}


def shape(name: str) -> str:
    """The shape's snapshot as the YAML ``examples/clusters/<name>.yaml`` holds."""
    head = (
        f"# {name}: a cluster shape cudasched's driver advice is judged on (written by\n"
        "# tests/support/cluster_shapes.py: python -m tests.support.cluster_shapes; the label\n"
        "# keys and what each value means are sourced in src/cudasched/data/gpu-operator.yaml).\n"
    )
    return head + to_yaml({"apiVersion": "v1", "kind": "List", "items": SHAPES[name]()})


def write() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in SHAPES:
        (OUT / f"{name}.yaml").write_text(shape(name), encoding="utf-8")


if __name__ == "__main__":
    write()
    sys.stdout.write(f"wrote {len(SHAPES)} shapes to {OUT.relative_to(ROOT)}\n")
