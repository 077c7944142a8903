"""The GPU Operator objects a driver plan is applied with: one ``NVIDIADriver`` per driver the
operator-managed pools run after the plan (a pool that keeps its driver is pinned too), the node
label that makes each select its nodes, and what replaces or removes existing objects.

Facts (``data/gpu-operator.yaml``; NVIDIA/gpu-operator ``api/nvidia/v1alpha1/nvidiadriver_types.go``
and ``deployments/gpu-operator/crds/nvidia.com_nvidiadrivers.yaml`` at each release):
``NVIDIADriver`` is ``nvidia.com/v1alpha1``, cluster-scoped; ``driverType`` is ``gpu`` | ``vgpu``
| ``vgpu-host-manager``; ``spec.default`` and ``spec.upgradePolicy`` exist from v26.7,
``kernelModuleType`` from v25.3 (v24.9 has ``useOpenKernelModules``): kubectl validates fields
strictly, so an object carries only what the target version defines. ``usePrecompiled`` and
``driverType`` are immutable (``self == oldSelf``): a change needs a new object. The driver image
is ``<repository>/<image>:<version>-<os-tag>``, or ``<branch>-<kernel>-<os-tag>`` for precompiled
drivers, whose ``version`` is the branch. Two objects that select one node both go ``notReady``
(``ConflictingNodeSelector``); a default object (v26.7: ``spec.default: true``, rendered by Helm
from the ``driver`` values) drives every GPU node no other object selects.

Each object here selects ``cudasched.io/driver-pool=<object name>`` (a label only the plan
writes), gives its driver pods the same label (so a runbook can wait for them) and is named
``<gpu>-<os tag>-r<branch>`` (``-precompiled`` for precompiled drivers), so the name says what it
installs; pools with the same GPU, OS and driver share one object.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cudasched.operations.pools import slug
from cudasched.vocab import labels as L
from cudasched.vocab.objects import labels_of, name_of

if TYPE_CHECKING:
    from cudasched.knowledge.operator import OperatorVersion

__all__ = [
    "API_VERSION",
    "DRIVER_IMAGE",
    "DRIVER_REPOSITORY",
    "KIND",
    "MANAGED_BY",
    "OWNER_LABEL",
    "DriverObject",
    "Replacement",
    "immutable_renames",
    "nvidia_driver",
    "object_name",
    "selector_conflicts",
    "stale_objects",
]

API_VERSION = "nvidia.com/v1alpha1"
KIND = "NVIDIADriver"
#: The GPU Operator's own NVIDIADriver sample (manifests/input/nvd-demo-gold.yaml).
DRIVER_REPOSITORY = "nvcr.io/nvidia"
DRIVER_IMAGE = "driver"
#: The GPU Operator's node label for nodes with an NVIDIA PCI device (its selectors add it).
GPU_PRESENT = "nvidia.com/gpu.present"
#: The node label through which GPU Operator v26.7 assigns each GPU node to one NVIDIADriver
#: (internal/nvidiadriver/nvidiadriver.go ``AssignOwners``).
OWNER_LABEL = "nvidia.com/gpu-operator.driver.owner"
MANAGED_BY = {"app.kubernetes.io/managed-by": "cudasched"}
_IMMUTABLE = ("usePrecompiled", "driverType")
_NAME_LIMIT = 63


@dataclass(frozen=True, slots=True)
class DriverObject:
    """One NVIDIADriver of a plan: the pools and nodes it selects, what it installs and whether
    it only pins the driver its nodes run now."""

    name: str
    pools: tuple[str, ...]
    nodes: tuple[str, ...]
    branch: int
    version: str
    module: str | None
    precompiled: bool
    pin: bool
    manifest: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.manifest)


@dataclass(frozen=True, slots=True)
class Replacement:
    """An existing NVIDIADriver the plan replaces or leaves without nodes, to delete after the
    rollout (``by``: the plan's object that takes its nodes, if any)."""

    name: str
    by: str | None
    why: str


def object_name(
    gpu: str | None, os: str, branch: int, version: str, precompiled: bool, taken: set[str]
) -> str:
    """``<gpu>-<os tag>-r<branch>`` (``-precompiled``); the full version instead of the branch
    when that name is taken by another driver of the branch, then ``-2``, ``-3``."""
    tail = re.sub(r"[^a-z0-9.-]+", "-", os.lower()).strip("-.") or "os-unknown"
    suffix = "-precompiled" if precompiled else ""
    for driver in (f"r{branch}", version):
        rest = f"-{tail}-{driver}{suffix}"
        head = slug(gpu, max(4, _NAME_LIMIT - len(rest))) if gpu else "unknown-gpu"
        name = f"{head}{rest}"[:_NAME_LIMIT].strip("-.")
        if name not in taken:
            return name
    n = 2
    while f"{name[: _NAME_LIMIT - 3]}-{n}" in taken:
        n += 1
    return f"{name[: _NAME_LIMIT - 3]}-{n}"


def nvidia_driver(
    name: str,
    *,
    version: str,
    module: str | None,
    precompiled: bool,
    operator: OperatorVersion,
    max_unavailable: int | str,
    max_parallel: int,
    description: str,
) -> dict[str, Any]:
    """The ``NVIDIADriver`` for one driver, with only the fields GPU Operator ``operator``
    defines: selecting (and labelling its driver pods with) ``cudasched.io/driver-pool=<name>``,
    the kernel-module flavour explicit, and from v26.7 ``default: false`` and an upgrade policy
    with ``maxParallelUpgrades`` and ``maxUnavailable`` written out."""
    spec: dict[str, Any] = {}
    if operator.accepts("default"):
        spec["default"] = False
    spec.update(
        {
            "driverType": "gpu",
            "repository": DRIVER_REPOSITORY,
            "image": DRIVER_IMAGE,
            "version": version,
        }
    )
    if module is not None:
        if operator.accepts("kernelModuleType"):
            spec["kernelModuleType"] = module
        elif operator.accepts("useOpenKernelModules"):
            spec["useOpenKernelModules"] = module == "open"
    spec["usePrecompiled"] = precompiled
    spec["nodeSelector"] = {L.DRIVER_POOL: name}
    spec["labels"] = {L.DRIVER_POOL: name}
    if operator.accepts("upgradePolicy"):
        spec["upgradePolicy"] = {
            "autoUpgrade": True,
            "maxParallelUpgrades": max(1, max_parallel),
            "maxUnavailable": max_unavailable,
        }
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "labels": dict(MANAGED_BY),
            "annotations": {L.PREFIX + "plan": description},
        },
        "spec": spec,
    }


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _immutable(obj: Mapping[str, Any]) -> tuple[Any, ...]:
    spec = _spec(obj)
    return (bool(spec.get("usePrecompiled", False)), spec.get("driverType", "gpu"))


def immutable_renames(
    existing: Iterable[Mapping[str, Any]], planned: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, str], list[Replacement]]:
    """(planned name -> the name to use, existing objects it replaces).

    A planned object whose name an existing object has with other immutable fields
    (``usePrecompiled``, ``driverType``) gets a new name (``-2`` ...): the API server refuses
    the change (``self == oldSelf``), so a new object takes the nodes and the old one is deleted
    once they moved."""
    by_name = {name_of(o): o for o in existing if name_of(o)}
    renamed: dict[str, str] = {}
    out: list[Replacement] = []
    taken = set(by_name) | {str(p["metadata"]["name"]) for p in planned}
    for obj in planned:
        name = str(obj["metadata"]["name"])
        old = by_name.get(name)
        if old is None or _immutable(old) == _immutable(obj):
            renamed[name] = name
            continue
        n = 2
        while f"{name[: _NAME_LIMIT - 3]}-{n}" in taken:
            n += 1
        new = f"{name[: _NAME_LIMIT - 3]}-{n}"
        taken.add(new)
        renamed[name] = new
        changed = [
            k
            for k, a, b in zip(_IMMUTABLE, _immutable(old), _immutable(obj), strict=True)
            if a != b
        ]
        out.append(
            Replacement(
                name,
                new,
                f"{' and '.join(changed)} cannot change on an existing NVIDIADriver "
                "(self == oldSelf): a new object takes its nodes, then the old one is deleted",
            )
        )
    return renamed, out


def stale_objects(
    existing: Iterable[Mapping[str, Any]], in_use: Iterable[str]
) -> list[Replacement]:
    """Objects an earlier plan wrote (``app.kubernetes.io/managed-by: cudasched``, selecting a
    pool label) that no node selects after this plan: to delete after the rollout."""
    used = set(in_use)
    out = []
    for obj in existing:
        name = name_of(obj)
        if not name or name in used:
            continue
        selector = _spec(obj).get("nodeSelector")
        ours = labels_of(obj).get("app.kubernetes.io/managed-by") == "cudasched"
        if ours and isinstance(selector, Mapping) and L.DRIVER_POOL in selector:
            out.append(
                Replacement(name, None, "written by an earlier plan; no node selects it any more")
            )
    return out


def _selects(driver: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether an existing NVIDIADriver's ``nodeSelector`` (and the operator's own
    ``gpu.present``) matches a node's labels; a default object selects no node of its own."""
    spec = _spec(driver)
    if spec.get("default") is True:
        return False
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, Mapping):
        return False
    if labels.get(GPU_PRESENT, "true") != "true":
        return False
    return all(labels.get(str(k)) == str(v) for k, v in selector.items())


def selector_conflicts(
    existing: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    node_labels: Mapping[str, Mapping[str, str]],
    planned: Iterable[str],
    replaced: Iterable[str] = (),
) -> list[str]:
    """Existing ``NVIDIADriver`` objects (other than the plan's own names and those it
    replaces) that would select a node the plan relabels: the operator would mark both objects
    ``notReady`` and, from v26.7, stop assigning owners until the conflict is gone."""
    ours = set(planned) | set(replaced)
    changed = {name_of(n): n for n in nodes if name_of(n) in node_labels}
    found: list[str] = []
    for driver in existing:
        name = name_of(driver)
        if not name or name in ours:
            continue
        hits = [
            node
            for node, obj in changed.items()
            if _selects(driver, {**labels_of(obj), **node_labels[node]})
        ]
        if hits:
            shown = ", ".join(hits[:3]) + (f" and {len(hits) - 3} more" if len(hits) > 3 else "")
            selector = _spec(driver).get("nodeSelector")
            found.append(
                f"NVIDIADriver/{name} (nodeSelector {dict(selector or {})}) would also select "
                f"{shown}: the GPU Operator marks both objects notReady (ConflictingNodeSelector); "
                "narrow its nodeSelector so it no longer matches them, or delete it"
            )
    return found
