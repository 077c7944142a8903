"""Rules about Dynamic Resource Allocation objects, pure over what the cluster holds:

* ``dra-extended-resource-shared``: two DeviceClasses claim one ``extendedResourceName``. Only
  one class serves a name, the one created last (KEP-5004), so the other's pods silently get
  the newest class's devices; a Helm re-install of NVIDIA's chart, which sets
  ``nvidia.com/gpu`` on ``gpu.nvidia.com``, flips it back;
* ``dra-device-without-cuda-attributes``: a full GPU or MIG device of NVIDIA's DRA driver
  without ``driverVersion``, ``cudaDriverVersion`` or ``cudaComputeCapability``: no CUDA-aware
  class or claim will ever select it. Passthrough (``vfio``) devices publish none by design
  and are not reported;
* ``dra-extended-resource-both-sources``: a node offers an extended resource name from a device
  plugin (``status.allocatable``) while a DeviceClass that claims the same name may select
  devices of that node's ResourceSlices. KEP-5004 allows one source per node ("One node in a
  cluster cannot have both extended resource backed by DRA, and same named extended resource
  backed by device plugin at the same time"), and its scheduler filter tries DRA only where
  "the node does *not* have device plugin to provide the capacity": the node's DRA devices
  never serve that name, and the two drivers offer the same GPUs twice.

Which devices a class may select is read from its selectors without a CEL evaluator (the core
has none): a selector that is a plain ``&&`` chain contributes its ``device.driver == "..."``
and ``device.attributes["..."].type == "..."`` comparisons, every other selector is taken to
admit anything. The reading can only widen a class, never narrow it, so a node is never spared
a finding it deserves; NVIDIA's classes and cudasched's all begin with such a chain.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched.operations.audit.findings import (
    DRA_DEVICE_WITHOUT_CUDA,
    DRA_EXTENDED_RESOURCE_BOTH_SOURCES,
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
    classes = _of_kind(snapshot, "DeviceClass")
    slices = _of_kind(snapshot, "ResourceSlice")
    yield from _shared_names(classes)
    for obj in slices:
        yield from _slice(obj)
    yield from _both_sources(snapshot.nodes, classes, slices)


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


_DRIVER_IS = re.compile(r"""device\.driver\s*==\s*["']([^"']+)["']""")
_TYPE_IS = re.compile(
    r"""device\.attributes\[\s*["']([^"']+)["']\s*\]\.type\s*==\s*["']([^"']+)["']"""
)
_NOT_A_CHAIN = re.compile(r"\|\||!(?!=)|\?")


@dataclass(frozen=True, slots=True)
class _Reach:
    """What a class's selectors surely require of a device: one of ``drivers`` (empty: any)
    and, per attribute domain, one ``type`` string."""

    drivers: frozenset[str]
    types: tuple[tuple[str, str], ...]

    def may_select(self, driver: str, device: Mapping[str, Any]) -> bool:
        if self.drivers and driver not in self.drivers:
            return False
        attributes = device.get("attributes") or {}
        for domain, wanted in self.types:
            value = attributes.get("type" if domain == driver else f"{domain}/type") or {}
            if not isinstance(value, Mapping) or value.get("string") != wanted:
                return False
        return True


def _reach(obj: Mapping[str, Any]) -> _Reach:
    drivers: set[str] | None = None
    types: list[tuple[str, str]] = []
    for selector in (obj.get("spec") or {}).get("selectors") or []:
        expression = str(((selector or {}).get("cel") or {}).get("expression") or "")
        if _NOT_A_CHAIN.search(expression):
            continue  # not a plain conjunction: read as admitting anything
        named = set(_DRIVER_IS.findall(expression))
        if named:
            drivers = named if drivers is None else drivers & named
        types.extend(_TYPE_IS.findall(expression))
    return _Reach(frozenset(drivers or ()), tuple(types))


def _plugin_count(node: Mapping[str, Any], resource: str) -> int:
    """How many of ``resource`` the node's device plugin offers: its allocatable (the
    capacity only where a status has no allocatable at all)."""
    status = node.get("status") or {}
    amounts = status.get("allocatable")
    if not isinstance(amounts, Mapping):
        amounts = status.get("capacity")
    text = str(amounts.get(resource, "0") if isinstance(amounts, Mapping) else "0").strip()
    return int(text) if text.isdigit() else 0


def _both_sources(
    nodes: tuple[Mapping[str, Any], ...],
    classes: list[Mapping[str, Any]],
    slices: list[Mapping[str, Any]],
) -> Iterator[Finding]:
    by_resource: dict[str, list[tuple[str, _Reach]]] = {}
    for obj in classes:
        resource = (obj.get("spec") or {}).get("extendedResourceName")
        if isinstance(resource, str) and resource:
            by_resource.setdefault(resource, []).append((name_of(obj), _reach(obj)))
    if not by_resource:
        return
    on_node: dict[str, list[Mapping[str, Any]]] = {}
    for obj in slices:
        node = (obj.get("spec") or {}).get("nodeName")
        if isinstance(node, str) and node:
            on_node.setdefault(node, []).append(obj)
    for node in nodes:
        name = name_of(node)
        for resource, owners in sorted(by_resource.items()):
            count = _plugin_count(node, resource)
            if count <= 0 or name not in on_node:
                continue
            yield from _both_on_node(node, count, resource, owners, on_node[name])


def _classes(names: set[str]) -> str:
    listed = ", ".join(sorted(names))
    return f"DeviceClass {listed} claims" if len(names) == 1 else f"DeviceClasses {listed} claim"


def _both_on_node(
    node: Mapping[str, Any],
    count: int,
    resource: str,
    owners: list[tuple[str, _Reach]],
    slices: list[Mapping[str, Any]],
) -> Iterator[Finding]:
    devices: set[str] = set()
    serving: set[str] = set()
    for obj in slices:
        spec = obj.get("spec") or {}
        driver = str(spec.get("driver") or "")
        for device in spec.get("devices") or []:
            chosen = [c for c, reach in owners if reach.may_select(driver, device)]
            if chosen:
                devices.add(f"{driver}/{device.get('name', '?')}")
                serving.update(chosen)
    if not devices:
        return
    name = name_of(node)
    yield Finding(
        DRA_EXTENDED_RESOURCE_BOTH_SOURCES,
        object_ref(node),
        f"the node offers {resource} from a device plugin ({count} allocatable) and through "
        f"DRA ({_classes(serving)} it and may select "
        f"{len(devices)} device(s) of its ResourceSlices: {', '.join(sorted(devices))}): "
        "Kubernetes allows one source of a name per node (KEP-5004), its scheduler counts the "
        f"device plugin's here and never allocates these devices to {resource} requests, and "
        "the same GPUs are offered twice, to pods by the plugin and to claims by DRA",
        node=name,
        fix=f"serve {resource} on {name} from one side: stop the device plugin there (label the "
        "node so its DaemonSet skips it) and keep the DRA driver, or stop the DRA driver there",
    )
