"""What an operator wants to know about a node beyond its GPU facts: is it a GPU node at all,
which OS it runs, which driver-upgrade state the GPU Operator gave it, and whether its label
sources (cudasched.io/, GFD's new keys, GFD's deprecated keys) agree with each other.

Facts are always read by :func:`cudasched.nodes.facts.facts_from_labels`. To compare sources this
module reads each source's labels on their own with :func:`cudasched.nodes.facts.stated_versions`,
the same readers taken as written, so "what a source says" and "what decisions use" are never parsed
two different ways, and a CUDA label is compared as it stands: decisions take a node's CUDA from
its driver (NVIDIA Table 3), so a label that disagrees is named next to the driver's value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cudasched.nodes.facts import (
    DERIVED_CUDA,
    SOURCE_CUDASCHED,
    SOURCE_GFD,
    SOURCE_GFD_DEPRECATED,
    NodeFacts,
    stated_versions,
)
from cudasched.vocab import labels as L
from cudasched.vocab.objects import as_mapping, labels_of
from cudasched.workloads.gpu import GPU_RESOURCE_PREFIXES

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
_GFD_NEW = L.GFD_VERSION_KEYS
_GFD_OLD = L.GFD_OLD_VERSION_KEYS
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


def _stated(labels: Mapping[str, str]) -> dict[str, dict[str, object]]:
    """What each source's labels state on their own, per fact (absent facts left out)."""
    subsets = {
        SOURCE_CUDASCHED: {k: v for k, v in labels.items() if k.startswith(L.PREFIX)},
        SOURCE_GFD: {k: labels[k] for k in (*_GFD_NEW, *_GFD_COMPUTE) if k in labels},
        SOURCE_GFD_DEPRECATED: {k: labels[k] for k in _GFD_OLD if k in labels},
    }
    out: dict[str, dict[str, object]] = {}
    for src, keys in subsets.items():
        if not keys:
            continue
        driver, cuda, compute = stated_versions(keys)
        said = {"driver": driver, "CUDA": cuda, "compute capability": compute}
        out[src] = {fact: value for fact, value in said.items() if value is not None}
    return out


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


def _decided(facts: NodeFacts, fact: str) -> object | None:
    if fact == "driver":
        return facts.driver
    if fact == "CUDA":
        return facts.cuda
    return facts.compute


def conflicts(labels: Mapping[str, str], decided: NodeFacts) -> list[Conflict]:
    """The facts on which a node's label sources disagree. ``decided`` is the node's facts as
    every decision reads them (:func:`~cudasched.nodes.facts.facts_from_labels` over all of
    ``labels``). A node's CUDA is its driver's (NVIDIA Table 3): when decisions took it from
    the driver rather than from a CUDA label, the driver is one of the values compared, so a
    CUDA label that contradicts its driver is reported even when no other source states one."""
    by_source = _stated(labels)
    found: list[Conflict] = []
    for fact, where in _WHERE.items():
        stated: list[tuple[str, object]] = [
            (where[src], by_source[src][fact]) for src in where if fact in by_source.get(src, {})
        ]
        if not stated:
            continue
        used = _decided(decided, fact)
        driver = decided.driver if fact == "CUDA" and DERIVED_CUDA in decided.derived else None
        if driver is not None:
            # None: the driver is older than every toolkit NVIDIA's tables list.
            stated.append((f"driver {driver} (NVIDIA Table 3)", used or "no known CUDA version"))
        distinct: list[object] = []
        for _, value in stated:
            if value not in distinct:  # version equality, not spelling (550.120 == 550.120.0)
                distinct.append(value)
        if len(distinct) < 2:
            continue
        if driver is not None:
            used_from = "the driver's"
        else:
            used_from = next((w for w, v in stated if v == used), stated[0][0])
        found.append(
            Conflict(
                fact=fact,
                values=tuple((w, str(v)) for w, v in stated),
                used=str(used) if used is not None else "no CUDA version",
                used_from=used_from,
            )
        )
    return found
