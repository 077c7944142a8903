"""What an operator wants to know about a node beyond its GPU facts: is it a GPU node at all,
which OS it runs, which driver-upgrade state the GPU Operator gave it, and whether its label
sources (cudasched.io/, GFD's new keys, GFD's deprecated keys) agree with each other.

Facts are always read by :func:`cudasched.nodes.facts_from_labels`; to compare sources this
module reads each source's labels on their own with that same function, so "what a source says"
and "what decisions use" can never be parsed two different ways.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched import labels as L
from cudasched.nodes import (
    DERIVED_COMPUTE,
    DERIVED_CUDA,
    SOURCE_CUDASCHED,
    SOURCE_GFD,
    SOURCE_GFD_DEPRECATED,
    NodeFacts,
    facts_from_labels,
)
from cudasched.objects import as_mapping, labels_of
from cudasched.resources import GPU_RESOURCE_PREFIXES

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase

__all__ = [
    "GFD_NEW_KEYS_RELEASE",
    "NFD_OS_ID",
    "NFD_OS_VERSION",
    "UPGRADE_DONE",
    "UPGRADE_FAILED",
    "UPGRADE_STATE_KEY",
    "Conflict",
    "conflicts",
    "deprecated_only",
    "gpu_capacity",
    "is_gpu_node",
    "os_of",
    "upgrade_state",
]

#: The GPU Operator's driver-upgrade state label (k8s-operator-libs ``UpgradeStateLabelKeyFmt``
#: with driver name ``gpu``; reference/ops-facts.md §4) and the two states that end an upgrade.
UPGRADE_STATE_KEY = "nvidia.com/gpu-driver-upgrade-state"
UPGRADE_DONE = "upgrade-done"
UPGRADE_FAILED = "upgrade-failed"

#: The GFD release that added ``nvidia.com/cuda.driver-version.*`` and
#: ``nvidia.com/cuda.runtime-version.*`` (PR NVIDIA/k8s-device-plugin#620; reference
#: nvidia-labels.md §1.2, "Label-key history").
GFD_NEW_KEYS_RELEASE = "v0.15.0"

# Node Feature Discovery's OS labels (reference/nvidia-labels.md §2.2).
NFD_OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
NFD_OS_VERSION = "feature.node.kubernetes.io/system-os_release.VERSION_ID"

# The label keys of each source, as facts_from_labels reads them. GFD's compute-capability
# keys have one generation only; they go with GFD's new keys.
_GFD_NEW = (
    L.GFD_DRIVER_FULL,
    L.GFD_DRIVER_MAJOR,
    L.GFD_DRIVER_MINOR,
    L.GFD_DRIVER_REVISION,
    L.GFD_CUDA_FULL,
    L.GFD_CUDA_MAJOR,
    L.GFD_CUDA_MINOR,
)
_GFD_OLD = (
    L.GFD_OLD_DRIVER_MAJOR,
    L.GFD_OLD_DRIVER_MINOR,
    L.GFD_OLD_DRIVER_REV,
    L.GFD_OLD_CUDA_MAJOR,
    L.GFD_OLD_CUDA_MINOR,
)
_GFD_COMPUTE = (L.GFD_COMPUTE_MAJOR, L.GFD_COMPUTE_MINOR)

# How each source is named in messages, per fact, in the order facts_from_labels prefers them.
_WHERE = {
    "driver": {
        SOURCE_CUDASCHED: "cudasched.io/driver.*",
        SOURCE_GFD: "nvidia.com/cuda.driver-version.*",
        SOURCE_GFD_DEPRECATED: "nvidia.com/cuda.driver.*",
    },
    "CUDA": {
        SOURCE_CUDASCHED: "cudasched.io/cuda.*",
        SOURCE_GFD: "nvidia.com/cuda.runtime-version.*",
        SOURCE_GFD_DEPRECATED: "nvidia.com/cuda.runtime.*",
    },
    "compute capability": {
        SOURCE_CUDASCHED: "cudasched.io/gpu.compute.code",
        SOURCE_GFD: "nvidia.com/gpu.compute.*",
    },
}


# --------------------------------------------------------------------------- node status


def gpu_capacity(node: Mapping[str, Any]) -> int:
    """The NVIDIA GPUs a node's status reports (``nvidia.com/gpu*`` and ``nvidia.com/mig-*``
    capacity, else allocatable; 0 when absent or unreadable)."""
    status = node.get("status")
    if not isinstance(status, Mapping):
        return 0
    best = 0
    for part in ("capacity", "allocatable"):
        values = status.get(part)
        if not isinstance(values, Mapping):
            continue
        total = 0
        for key, value in values.items():
            if str(key).startswith(GPU_RESOURCE_PREFIXES):
                try:
                    total += max(int(float(str(value).strip())), 0)
                except ValueError:
                    continue
        best = max(best, total)
    return best


def is_gpu_node(node: Mapping[str, Any]) -> bool:
    """A node with NVIDIA GPUs: GPU capacity in its status (the device plugin registered them)
    or the GPU Operator's ``nvidia.com/gpu.present=true`` (set from NFD's PCI scan)."""
    if gpu_capacity(node) > 0:
        return True
    return str(labels_of(node).get(L.GFD_PRESENT, "")).strip().lower() == "true"


def os_of(node: Mapping[str, Any]) -> str | None:
    """The node's OS: ``status.nodeInfo.osImage`` (what ``kubectl get nodes -o wide`` prints),
    else NFD's ``system-os_release`` labels (``ubuntu 22.04``); ``None`` when neither says."""
    status = node.get("status")
    info = as_mapping(status.get("nodeInfo"), "nodeInfo") if isinstance(status, Mapping) else {}
    image = info.get("osImage") if isinstance(info, Mapping) else None
    if isinstance(image, str) and image.strip():
        return image.strip()
    labels = labels_of(node)
    os_id = labels.get(NFD_OS_ID, "").strip()
    if os_id:
        version = labels.get(NFD_OS_VERSION, "").strip()
        return f"{os_id} {version}".strip()
    return None


def upgrade_state(labels: Mapping[str, str]) -> str | None:
    """The GPU Operator's driver-upgrade state; ``None`` when unset or empty (the upgrade
    controller is off or has not looked at the node yet)."""
    value = str(labels.get(UPGRADE_STATE_KEY, "")).strip()
    return value or None


# --------------------------------------------------------------------------- label sources


def deprecated_only(labels: Mapping[str, str]) -> bool:
    """GFD older than :data:`GFD_NEW_KEYS_RELEASE`: its deprecated driver/CUDA keys are on the
    node and none of the keys that replaced them."""
    return any(k in labels for k in _GFD_OLD) and not any(k in labels for k in _GFD_NEW)


def _source_facts(name: str, labels: Mapping[str, str], kb: KnowledgeBase) -> dict[str, NodeFacts]:
    """Each source's facts, read from that source's labels alone."""
    subsets = {
        SOURCE_CUDASCHED: {k: v for k, v in labels.items() if k.startswith(L.PREFIX)},
        SOURCE_GFD: {k: labels[k] for k in (*_GFD_NEW, *_GFD_COMPUTE) if k in labels},
        SOURCE_GFD_DEPRECATED: {k: labels[k] for k in _GFD_OLD if k in labels},
    }
    return {src: facts_from_labels(name, keys, kb) for src, keys in subsets.items() if keys}


@dataclass(frozen=True, slots=True)
class Conflict:
    """Two or more label sources of one node give one fact different values."""

    fact: str  # "driver", "CUDA" or "compute capability"
    values: tuple[tuple[str, str], ...]  # (where, value) per source that states the fact
    used: str  # the value decisions use
    used_from: str  # where that value comes from

    def describe(self) -> str:
        said = ", ".join(f"{where} says {value}" for where, value in self.values)
        return f"{self.fact}: {said}; decisions use {self.used} ({self.used_from})"


def _read(facts: NodeFacts, fact: str) -> object | None:
    """A fact as its own labels state it (``None`` when absent or only derived)."""
    if fact == "driver":
        return facts.driver
    if fact == "CUDA":
        return None if DERIVED_CUDA in facts.derived else facts.cuda
    return None if DERIVED_COMPUTE in facts.derived else facts.compute


def conflicts(
    name: str, labels: Mapping[str, str], decided: NodeFacts, kb: KnowledgeBase
) -> list[Conflict]:
    """The facts on which a node's label sources disagree. ``decided`` is the node's facts as
    every decision reads them (:func:`facts_from_labels` over all its labels)."""
    by_source = _source_facts(name, labels, kb)
    found: list[Conflict] = []
    for fact, where in _WHERE.items():
        stated = [
            (src, value)
            for src in where
            if src in by_source and (value := _read(by_source[src], fact)) is not None
        ]
        distinct: list[object] = []
        for _, value in stated:
            if value not in distinct:  # version equality, not spelling (550.120 == 550.120.0)
                distinct.append(value)
        if len(distinct) < 2:
            continue
        used = _read(decided, fact)
        used_from = next((src for src, v in stated if v == used), stated[0][0])
        found.append(
            Conflict(
                fact=fact,
                values=tuple((where[src], str(v)) for src, v in stated),
                used=str(used),
                used_from=where[used_from],
            )
        )
    return found
