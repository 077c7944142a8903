"""Rules about Dynamic Resource Allocation objects, pure over what the cluster holds:

* ``dra-extended-resource-shared``: two DeviceClasses claim one ``extendedResourceName``. Only
  one class serves a name, the one created last (KEP-5004), so the other's pods silently get
  the newest class's devices; a Helm re-install of NVIDIA's chart, which sets
  ``nvidia.com/gpu`` on ``gpu.nvidia.com``, flips it back;
* ``dra-device-without-cuda-attributes``: a full GPU or MIG device of NVIDIA's DRA driver
  without ``driverVersion``, ``cudaDriverVersion`` or ``cudaComputeCapability``: no CUDA-aware
  class or claim will ever select it. Passthrough (``vfio``) devices publish none by design
  and are not reported.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from cudasched.operations.audit.findings import (
    DRA_DEVICE_WITHOUT_CUDA,
    DRA_EXTENDED_RESOURCE_SHARED,
    Finding,
)
from cudasched.operations.refs import object_ref
from cudasched.placement.dra import (
    COMPUTE_CAPABILITY,
    CUDA_DRIVER_VERSION,
    DRIVER_DOMAIN,
    DRIVER_VERSION,
)
from cudasched.vocab.objects import name_of

if TYPE_CHECKING:
    from cudasched.cluster.snapshot import ClusterSnapshot

__all__ = ["dra_findings"]

_GROUP = "resource.k8s.io/"
_CUDA_ATTRIBUTES = (DRIVER_VERSION, CUDA_DRIVER_VERSION, COMPUTE_CAPABILITY)
_CUDA_TYPES = ("gpu", "mig")


def _of_kind(snapshot: ClusterSnapshot, kind: str) -> list[Mapping[str, Any]]:
    return [
        o
        for o in snapshot.other
        if str(o.get("apiVersion", "")).startswith(_GROUP) and o.get("kind") == kind
    ]


def dra_findings(snapshot: ClusterSnapshot) -> Iterator[Finding]:
    yield from _shared_names(_of_kind(snapshot, "DeviceClass"))
    for obj in _of_kind(snapshot, "ResourceSlice"):
        yield from _slice(obj)


def _created(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("creationTimestamp") or "")


def _shared_names(classes: list[Mapping[str, Any]]) -> Iterator[Finding]:
    by_name: dict[str, list[Mapping[str, Any]]] = {}
    for obj in classes:
        name = (obj.get("spec") or {}).get("extendedResourceName")
        if isinstance(name, str) and name:
            by_name.setdefault(name, []).append(obj)
    for resource, owners in by_name.items():
        if len(owners) < 2:
            continue
        dated = all(_created(o) for o in owners)
        newest = max(owners, key=_created) if dated else None
        listed = ", ".join(sorted(name_of(o) for o in owners))
        serving = (
            f"DeviceClass {name_of(newest)} (created last) serves it"
            if newest is not None
            else "the one created last serves it"
        )
        for obj in owners:
            if obj is newest:
                continue
            yield Finding(
                DRA_EXTENDED_RESOURCE_SHARED,
                object_ref(obj),
                f"DeviceClasses {listed} all claim the extended resource {resource}: only one "
                f"class serves a name, and {serving}, so pods asking {resource} do not get "
                "this class's devices; reinstalling a chart that sets it moves it again",
                fix=f"keep {resource} on one class and remove spec.extendedResourceName from the "
                "others (every class is also requestable as "
                "deviceclass.resource.kubernetes.io/<class>)",
            )


def _slice(obj: Mapping[str, Any]) -> Iterator[Finding]:
    spec = obj.get("spec") or {}
    if spec.get("driver") != DRIVER_DOMAIN:
        return
    missing: list[str] = []
    for device in spec.get("devices") or []:
        attributes = device.get("attributes") or {}
        kind = (attributes.get("type") or {}).get("string")
        if kind not in _CUDA_TYPES:
            continue
        lacks = [a for a in _CUDA_ATTRIBUTES if a not in attributes]
        if lacks:
            missing.append(f"{device.get('name', '?')} ({kind}: no {', '.join(lacks)})")
    if missing:
        yield Finding(
            DRA_DEVICE_WITHOUT_CUDA,
            object_ref(obj),
            f"devices of {DRIVER_DOMAIN} without CUDA attributes: {'; '.join(missing)}; no "
            "CUDA-aware device class or claim selects them",
            node=spec.get("nodeName") or None,
            fix="upgrade NVIDIA's DRA driver on the node to a release that publishes "
            "driverVersion, cudaDriverVersion and cudaComputeCapability, and check that it "
            "can read the driver (NVML)",
        )
