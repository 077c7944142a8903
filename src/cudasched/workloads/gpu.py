"""Whether a pod asks for an NVIDIA GPU, and which of its containers runs the CUDA code.

A pod uses a GPU when any container or init container requests an ``nvidia.com/gpu*`` or
``nvidia.com/mig-*`` resource above zero, or when it has a dynamic resource claim. Only such
pods (or pods that declare a requirement) are ever constrained.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import orjson

from cudasched.vocab.errors import InputError
from cudasched.vocab.kserve import PREDICTOR_CONTAINER, WORKER_CONTAINER
from cudasched.vocab.objects import as_mapping

__all__ = [
    "GPU_RESOURCE_PREFIXES",
    "GpuMemo",
    "GpuUse",
    "node_gpu_resources",
    "read_gpu_use",
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


def _gpu_names(container: Mapping[str, Any]) -> set[str] | None:
    """The NVIDIA GPU resources one container asks for above zero (``None`` for none), every
    limit and request read, so a malformed quantity anywhere is an :class:`InputError`."""
    resources = as_mapping(container.get("resources"), "container resources")
    names: set[str] | None = None
    for part in _PARTS:
        amounts = resources.get(part)
        if amounts is None or (type(amounts) is dict and not amounts):
            continue  # absent or empty: nothing asked for
        for key, value in as_mapping(amounts, _PART_NAMES[part]).items():
            name = key if type(key) is str else str(key)
            if name.startswith(GPU_RESOURCE_PREFIXES) and _quantity_positive(value, name):
                names = names or set()
                names.add(name)
    return names


def requested_gpu_resources(pod_spec: Mapping[str, Any]) -> frozenset[str]:
    """The NVIDIA GPU resources (``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb`` ...) the pod's
    containers ask for: what a node must offer for the scheduler to place it. Resource claims
    are not included (their device class decides, not a node resource)."""
    return read_gpu_use(pod_spec).resources


class GpuUse(NamedTuple):
    """What a pod spec asks of NVIDIA GPUs, read in one pass over its containers (the pod
    view's reading; see :func:`read_gpu_use`). A named tuple: one is built per pod."""

    #: The GPU resources its containers and init containers ask for above zero.
    resources: frozenset[str]
    #: It lists dynamic resource claims (their device class is not visible here).
    claims: bool
    #: The container whose CUDA matters: the first with a GPU, else KServe's predictor or
    #: multi-node worker container (by name), else (a pod with resource claims) the first
    #: that consumes a claim.
    container: Mapping[str, Any] | None

    @property
    def requested(self) -> bool:
        """The pod asks for a GPU (:func:`uses_gpu`'s question)."""
        return self.claims or bool(self.resources)


#: Answers of :func:`read_gpu_use` kept by a caller that reads many alike pods (the pods of one
#: ``explain`` call: replicas of a few templates): the GPU resources and the position of the
#: first GPU container, by the JSON of the containers' ``resources``. Never module state.
GpuMemo = dict[bytes, tuple[frozenset[str], int | None]]


def read_gpu_use(pod_spec: Mapping[str, Any], memo: GpuMemo | None = None) -> GpuUse:
    """:class:`GpuUse` of a pod spec: whether it asks for a GPU, which GPU resources and which
    container runs the CUDA code, answered together, reading every container once and every
    quantity (a malformed one anywhere is an :class:`InputError`). With ``memo``, containers
    whose ``resources`` (as JSON, types included) were read before are not read again: the
    answer depends on nothing else, and only answers are kept, so a malformed quantity
    raises every time."""
    spec = pod_spec if type(pod_spec) is dict else as_mapping(pod_spec, "pod spec")
    key = _memo_key(spec) if memo is not None else None
    found = memo.get(key) if memo is not None and key is not None else None
    if found is None:
        containers = _containers(spec, "containers")
        found = _read_gpu_names(containers, _containers(spec, "initContainers"))
        if memo is not None and key is not None:
            memo[key] = found
    else:  # remembered: the key was made, so every container is a mapping
        containers = spec["containers"]
    names, first = found
    claims = bool(spec.get("resourceClaims"))
    container = containers[first] if first is not None else _by_name(containers)
    if container is None and claims:
        container = _claim_consumer(containers)
    return GpuUse(names, claims, container)


def _read_gpu_names(
    containers: list[Mapping[str, Any]], inits: list[Mapping[str, Any]]
) -> tuple[frozenset[str], int | None]:
    """The GPU resources all containers ask for, and the position of the first container
    (not init container) that asks for one."""
    names: set[str] = set()
    first: int | None = None
    for index, container in enumerate(containers):
        found = _gpu_names(container)
        if found:
            names |= found
            first = index if first is None else first
    for container in inits:
        found = _gpu_names(container)
        if found:
            names |= found
    return (frozenset(names) if names else _NONE), first


def _memo_key(spec: Mapping[str, Any]) -> bytes | None:
    """The JSON of the containers' and init containers' ``resources``, or ``None`` when they
    are not lists of mappings of plain JSON (then nothing is remembered, and the reader says
    what is wrong)."""
    containers, inits = spec.get("containers"), spec.get("initContainers")
    if type(containers) is not list or not (inits is None or type(inits) is list):
        return None
    try:
        own = [c.get("resources") for c in containers]
        if not inits:  # (most pods: no second list to build)
            return orjson.dumps(own)
        # Marked: no JSON starts with "+", so this cannot equal a key without init containers.
        return b"+" + orjson.dumps([own, [c.get("resources") for c in inits]])
    except (AttributeError, TypeError):  # a container that is not a mapping, or not JSON
        return None


def _claim_consumer(containers: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The first container that consumes one of the pod's resource claims
    (``resources.claims``): a pod asking its GPUs through DRA alone names no GPU resource."""
    for c in containers:
        resources = c.get("resources")
        if isinstance(resources, Mapping) and resources.get("claims"):
            return c
    return None


def _by_name(containers: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """KServe's ``kserve-container``, else its multi-node ``worker-container``."""
    for name in (PREDICTOR_CONTAINER, WORKER_CONTAINER):
        for c in containers:
            if c.get("name") == name:
                return c
    return None


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
