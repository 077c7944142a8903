"""Which nodes a workload's own scheduling constraints let it use: its ``nodeSelector`` and
required node affinity, its tolerations of a node's ``NoSchedule``/``NoExecute`` taints, and the
NVIDIA GPUs it asks for against what the node has allocatable. A fix that names nodes ("recreate
the pod so it lands on A, B", "upgrade the driver of the nodes like C") names only nodes these
let the workload use: a driver change cannot lift them (the scheduler's filters, as
kube-scheduler's NodeAffinity, TaintToleration and NodeResourcesFit plugins apply them; a
toleration matches a taint as ``v1.Toleration.ToleratesTaint`` does).

Pure: a pod spec and Node objects in, reasons out. Free GPUs are not judged (pods come and go);
the count is against the node's allocatable total, so a node that could never hold the workload
is never named.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cudasched.vocab.errors import InputError
from cudasched.vocab.nodeaffinity import Node, RequiredNodeAffinity
from cudasched.vocab.objects import name_of

__all__ = ["GPU_RESOURCE", "allocatable_gpus", "gpu_count", "tolerates", "usable", "why_not"]

GPU_RESOURCE = "nvidia.com/gpu"
_BLOCKING = ("NoSchedule", "NoExecute")


def _count(value: object) -> int | None:
    """An integer quantity (``"8"``, ``8``); ``None`` for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _containers(spec: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    found = spec.get(key)
    return [c for c in found if isinstance(c, Mapping)] if isinstance(found, list) else []


def _asked(container: Mapping[str, Any]) -> int:
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return 0
    for part in ("limits", "requests"):
        amounts = resources.get(part)
        if isinstance(amounts, Mapping) and GPU_RESOURCE in amounts:
            return _count(amounts[GPU_RESOURCE]) or 0
    return 0


def gpu_count(spec: Mapping[str, Any]) -> int:
    """The ``nvidia.com/gpu`` a pod needs on one node: the sum over its containers, or its
    largest init container if that is more (the scheduler's effective request)."""
    running = sum(_asked(c) for c in _containers(spec, "containers"))
    init = max((_asked(c) for c in _containers(spec, "initContainers")), default=0)
    return max(running, init)


def allocatable_gpus(node: Mapping[str, Any]) -> int | None:
    """The node's allocatable ``nvidia.com/gpu`` (else its capacity); ``None``: not reported."""
    status = node.get("status")
    if not isinstance(status, Mapping):
        return None
    for part in ("allocatable", "capacity"):
        amounts = status.get(part)
        if isinstance(amounts, Mapping) and GPU_RESOURCE in amounts:
            return _count(amounts[GPU_RESOURCE])
    return None


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Whether any toleration matches ``taint`` (``v1.Toleration.ToleratesTaint``: the effect,
    when the toleration names one; the key, unless an empty key with ``Exists``; the value for
    ``Equal``)."""
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = t.get("key") or ""
        operator = t.get("operator") or "Equal"
        if key and key != taint.get("key"):
            continue
        if operator == "Exists" or (key and (t.get("value") or "") == (taint.get("value") or "")):
            return True
    return False


def _taint_problem(spec: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    node_spec = node.get("spec")
    taints = node_spec.get("taints") if isinstance(node_spec, Mapping) else None
    tolerations = [t for t in spec.get("tolerations") or () if isinstance(t, Mapping)]
    for taint in taints if isinstance(taints, list) else ():
        if not isinstance(taint, Mapping) or taint.get("effect") not in _BLOCKING:
            continue
        if not tolerates(tolerations, taint):
            value = f"={taint['value']}" if taint.get("value") else ""
            return f"taint {taint.get('key')}{value}:{taint.get('effect')} not tolerated"
    return None


def why_not(
    spec: Mapping[str, Any],
    node: Mapping[str, Any],
    affinity: RequiredNodeAffinity | None = None,
) -> str | None:
    """Why the workload (pod ``spec``) cannot use ``node`` whatever its driver: ``None`` when
    it can. ``affinity``: the spec's compiled required affinity, when the caller has it."""
    try:
        required = affinity or RequiredNodeAffinity.from_pod_spec(spec)
        matched = required.match(Node.from_k8s(node))
    except InputError:
        matched = True  # an unreadable selector is reported elsewhere; not held against nodes
    if not matched:
        return "its nodeSelector or required node affinity excludes the node"
    taint = _taint_problem(spec, node)
    if taint is not None:
        return taint
    wanted, has = gpu_count(spec), allocatable_gpus(node)
    if wanted and has is not None and wanted > has:
        return f"it asks for {wanted} GPUs and the node has {has} allocatable"
    return None


def usable(spec: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]]) -> dict[str, str | None]:
    """Each node's name and why the workload cannot use it (``None``: it can)."""
    try:
        affinity: RequiredNodeAffinity | None = RequiredNodeAffinity.from_pod_spec(spec)
    except InputError:
        affinity = None
    return {name_of(n): why_not(spec, n, affinity) for n in nodes}
