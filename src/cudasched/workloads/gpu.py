"""Whether a pod asks for an NVIDIA GPU, and which of its containers runs the CUDA code.

A pod uses a GPU when any container or init container requests an ``nvidia.com/gpu*`` or
``nvidia.com/mig-*`` resource above zero, or when it has a dynamic resource claim. Only such
pods (or pods that declare a requirement) are ever constrained.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cudasched.vocab.errors import InputError
from cudasched.vocab.kserve import PREDICTOR_CONTAINER, WORKER_CONTAINER
from cudasched.vocab.objects import as_mapping

__all__ = [
    "GPU_RESOURCE_PREFIXES",
    "gpu_container",
    "gpu_requests",
    "node_gpu_resources",
    "requested_gpu_resources",
    "uses_gpu",
]

#: Extended resources that are NVIDIA GPUs (whole GPUs, renamed shared GPUs, MIG slices).
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")


_PARTS = ("limits", "requests")
_PART_NAMES = {part: f"resources.{part}" for part in _PARTS}
_NONE: frozenset[str] = frozenset()


def _quantity_positive(value: object, key: str) -> bool:
    """Extended resources are whole numbers; ``"0"`` does not request a GPU."""
    if isinstance(value, bool):
        raise InputError(f"invalid resource quantity {value!r} for {key}: expected a number")
    text = str(value).strip()
    try:
        return float(text) > 0
    except ValueError:
        raise InputError(
            f"invalid resource quantity {value!r} for {key}: expected a whole number such as 1"
        ) from None


def _container_gpus(container: Mapping[str, Any]) -> bool:
    resources = as_mapping(container.get("resources"), "container resources")
    for part in ("limits", "requests"):
        for key, value in as_mapping(resources.get(part), f"resources.{part}").items():
            if str(key).startswith(GPU_RESOURCE_PREFIXES) and _quantity_positive(value, str(key)):
                return True
    return False


def _containers(pod_spec: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = pod_spec.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(f"invalid pod spec.{key}: expected a list")
    return [as_mapping(c, f"pod spec.{key}[]") for c in value]


def uses_gpu(pod_spec: Mapping[str, Any]) -> bool:
    """Does the pod ask for an NVIDIA GPU?

    Any container or init container with an ``nvidia.com/gpu*`` (including renamed shared
    resources such as ``nvidia.com/gpu.shared``) or ``nvidia.com/mig-*`` limit or request
    above zero, or any ``spec.resourceClaims`` entry (dynamic resource allocation: the claim's
    device class is not visible here, so a claim counts as a GPU).
    """
    spec = as_mapping(pod_spec, "pod spec")
    if spec.get("resourceClaims"):
        return True
    containers = _containers(spec, "containers") + _containers(spec, "initContainers")
    return any(_container_gpus(c) for c in containers)


def gpu_container(pod_spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The container whose CUDA matters: the first with a GPU limit, else KServe's
    ``kserve-container``, else a multi-node ``worker-container``."""
    containers = _containers(as_mapping(pod_spec, "pod spec"), "containers")
    for c in containers:
        if _container_gpus(c):
            return c
    for name in (PREDICTOR_CONTAINER, WORKER_CONTAINER):
        for c in containers:
            if c.get("name") == name:
                return c
    return None


def requested_gpu_resources(pod_spec: Mapping[str, Any]) -> frozenset[str]:
    """The NVIDIA GPU resources (``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb`` ...) the pod's
    containers ask for: what a node must offer for the scheduler to place it. Resource claims
    are not included (their device class decides, not a node resource)."""
    return gpu_requests(pod_spec)[0]


def gpu_requests(
    pod_spec: Mapping[str, Any],
) -> tuple[frozenset[str], Mapping[str, Any] | None]:
    """:func:`requested_gpu_resources` and the first container (not init container) that asks
    for a GPU, read in one pass: every pod admission reads both (the pod's view). Well-formed
    specs (plain dicts and lists, as decoded from JSON) skip the strict readers' calls;
    anything else is read by them, with their errors, in the same order."""
    spec = pod_spec if type(pod_spec) is dict else as_mapping(pod_spec, "pod spec")
    lists = []
    for key in ("containers", "initContainers"):
        value = spec.get(key)
        if value is None:
            continue
        if type(value) is not list:
            value = _containers(spec, key)  # raises as it always did
        lists.append((key, value))
    names: set[str] = set()
    first: Mapping[str, Any] | None = None
    for key, containers in lists:
        for container in containers:
            if type(container) is not dict:
                container = as_mapping(container, f"pod spec.{key}[]")
            if _asked(container, names) and first is None and key == "containers":
                first = container
    return (frozenset(names) if names else _NONE), first


def _asked(container: Mapping[str, Any], names: set[str]) -> bool:
    """Add the GPU resources ``container`` asks for to ``names``; whether it asks for any."""
    resources = container.get("resources")
    if resources is None:
        return False
    if type(resources) is not dict:
        resources = as_mapping(resources, "container resources")
    asked = False
    for part in _PARTS:
        amounts = resources.get(part)
        if amounts is None or (type(amounts) is dict and not amounts):
            continue  # absent or empty: nothing asked for
        if type(amounts) is not dict:
            amounts = as_mapping(amounts, _PART_NAMES[part])
        for raw, value in amounts.items():
            name = raw if type(raw) is str else str(raw)
            if name.startswith(GPU_RESOURCE_PREFIXES) and _quantity_positive(value, name):
                names.add(name)
                asked = True
    return asked


def node_gpu_resources(node: Mapping[str, Any]) -> frozenset[str] | None:
    """The NVIDIA GPU resources a Node offers (``status.allocatable``, else ``capacity``, above
    zero), or ``None`` when the object carries no status at all (nothing is known)."""
    status = node.get("status")
    if not isinstance(status, Mapping):
        return None
    offered = status.get("allocatable")
    if not isinstance(offered, Mapping):
        offered = status.get("capacity")
    if not isinstance(offered, Mapping):
        return None
    names: set[str] = set()
    for key, value in offered.items():
        if not str(key).startswith(GPU_RESOURCE_PREFIXES):
            continue
        try:
            if _quantity_positive(value, str(key)):
                names.add(str(key))
        except InputError:
            continue  # a quantity we cannot read offers nothing we could count on
    return frozenset(names)
