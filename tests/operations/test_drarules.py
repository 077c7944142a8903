"""The audit's DRA rules, through ``audit``: two classes claiming one extended resource name
(the one created last wins), and NVIDIA DRA devices that publish no CUDA attributes (passthrough
devices publish none by design and are not reported)."""

from __future__ import annotations

from typing import Any

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.operations.audit import audit
from tests.support import builders


def _class(name: str, created: str, resource: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": "true"}}]}
    if resource is not None:
        spec["extendedResourceName"] = resource
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": spec,
    }


def _slice(node: str, devices: list[dict[str, Any]], driver: str = "gpu.nvidia.com") -> Any:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _device(name: str, kind: str, **versions: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {"type": {"string": kind}}
    attributes.update({k: {"version": v} for k, v in versions.items()})
    return {"name": name, "attributes": attributes}


def _findings(objects: list[dict[str, Any]], kb: KnowledgeBase, images: ImageTable) -> Any:
    snapshot = ClusterSnapshot.from_objects([builders.node("gpu-1"), *objects])
    return audit(snapshot, Fleet.from_snapshot(snapshot, kb), images).findings


def test_two_classes_claiming_one_name_report_the_one_that_lost(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    objects = [
        _class("gpu.nvidia.com", "2026-01-01T00:00:00Z", "nvidia.com/gpu"),
        _class("gpu-cuda-12-8.cudasched.io", "2026-03-01T00:00:00Z", "nvidia.com/gpu"),
        _class("mig.nvidia.com", "2026-01-01T00:00:00Z", None),
        _class("other", "2026-01-01T00:00:00Z", "example.com/other"),
    ]
    [finding] = [f for f in _findings(objects, kb, images) if f.code.startswith("dra-")]
    assert finding.code == "dra-extended-resource-shared"
    assert finding.object == "DeviceClass/gpu.nvidia.com"
    assert "DeviceClass gpu-cuda-12-8.cudasched.io (created last) serves it" in finding.message


def test_gpu_and_mig_devices_without_cuda_attributes_are_reported_vfio_is_not(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    full = {"driverVersion": "570.124.6", "cudaDriverVersion": "12.8.0"}
    objects = [
        _slice(
            "gpu-1",
            [
                _device("gpu-0", "gpu", **full, cudaComputeCapability="9.0.0"),
                _device("gpu-1", "gpu", **full),
                _device("mig-0", "mig"),
                _device("gpu-vfio-2", "vfio"),
            ],
        ),
        _slice("gpu-2", [_device("gpu-vfio-0", "vfio")]),
        _slice("gpu-3", [_device("x", "gpu")], driver="gpu.example.com"),
    ]
    [finding] = [f for f in _findings(objects, kb, images) if f.code.startswith("dra-")]
    assert finding.code == "dra-device-without-cuda-attributes"
    assert finding.object == "ResourceSlice/gpu-1-gpu" and finding.node == "gpu-1"
    assert "gpu-1 (gpu: no cudaComputeCapability)" in finding.message
    assert "mig-0 (mig: no driverVersion, cudaDriverVersion, cudaComputeCapability)" in (
        finding.message
    )
    assert "vfio" not in finding.message


def _gpu_class(name: str, *selectors: str, resource: str | None = "nvidia.com/gpu") -> Any:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in selectors]}
    if resource is not None:
        spec["extendedResourceName"] = resource
    meta = {"name": name}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": meta,
        "spec": spec,
    }


_NVIDIA_GPU = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
)


def _both(objects: list[dict[str, Any]], kb: KnowledgeBase, images: ImageTable) -> list[Any]:
    """The both-sources findings of a cluster of one device-plugin node (``gpu-1``, 8
    ``nvidia.com/gpu`` allocatable) and one DRA-only node (``gpu-2``, none allocatable)."""
    nodes = [builders.node("gpu-1"), builders.node("gpu-2", allocatable={"cpu": "63"})]
    snapshot = ClusterSnapshot.from_objects([*nodes, *objects])
    report = audit(snapshot, Fleet.from_snapshot(snapshot, kb), images)
    return [f for f in report.findings if f.code == "dra-extended-resource-both-sources"]


def test_a_node_serving_one_name_from_a_device_plugin_and_dra_is_reported(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    objects = [
        _gpu_class("gpu.nvidia.com", _NVIDIA_GPU),
        _slice("gpu-1", [_device("gpu-0", "gpu"), _device("gpu-vfio-1", "vfio")]),
        _slice("gpu-2", [_device("gpu-0", "gpu")]),
    ]
    [finding] = _both(objects, kb, images)
    assert finding.object == "Node/gpu-1" and finding.node == "gpu-1"
    assert "nvidia.com/gpu from a device plugin (8 allocatable)" in finding.message
    assert "DeviceClass gpu.nvidia.com claims it" in finding.message
    assert "1 device(s) of its ResourceSlices: gpu.nvidia.com/gpu-0)" in finding.message
    assert "KEP-5004" in finding.message and "stop the device plugin" in finding.fix


def test_no_both_sources_finding_where_the_class_cannot_reach_the_nodes_devices(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    objects = [
        # NVIDIA's class and a vfio class with the name: gpu-1 publishes only MIG slices.
        _gpu_class("gpu.nvidia.com", _NVIDIA_GPU),
        _gpu_class(
            "vfio.gpu.nvidia.com",
            "device.driver == 'gpu.nvidia.com'",
            "device.attributes['gpu.nvidia.com'].type == 'vfio'",
        ),
        # A class of another driver with the name, and a class of the driver without one.
        _gpu_class("gpu.example.com", "device.driver == 'gpu.example.com'"),
        _gpu_class("mig.nvidia.com", "device.driver == 'gpu.nvidia.com'", resource=None),
        _slice("gpu-1", [_device("mig-0", "mig")]),
    ]
    assert _both(objects, kb, images) == []


def test_a_selector_that_is_not_a_plain_chain_is_read_as_admitting_any_device(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    either = (
        "device.driver == 'gpu.example.com' || device.attributes['gpu.nvidia.com'].type == 'gpu'"
    )
    objects = [
        _gpu_class("either", either),
        _slice("gpu-1", [_device("gpu-0", "gpu")], driver="gpu.other.com"),
    ]
    [finding] = _both(objects, kb, images)
    assert "gpu.other.com/gpu-0" in finding.message
