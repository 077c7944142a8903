"""The GPU Operator objects a driver plan is applied with: one ``NVIDIADriver`` per pool that
changes, the node label that makes each select its pool, and the ``kubectl label`` commands.

Facts (reference/nvidia-labels.md §3, ops-facts.md §4; the CRD is NVIDIA/gpu-operator
``deployments/gpu-operator/crds/nvidia.com_nvidiadrivers.yaml``): ``NVIDIADriver`` is
``nvidia.com/v1alpha1``, cluster-scoped; ``spec.default``, ``spec.driverType`` and
``spec.image`` are required; ``driverType`` is ``gpu`` | ``vgpu`` | ``vgpu-host-manager``,
``kernelModuleType`` ``auto`` | ``open`` | ``proprietary``; a default object may not have a
``nodeSelector``; two objects that select one node both go ``notReady``
(``ConflictingNodeSelector``). The driver image is ``<repository>/<image>:<version>-<os-tag>``,
or ``<version>-<kernel>-<os-tag>`` for precompiled drivers, whose ``version`` is the branch.
The operator reconciles these objects only when ClusterPolicy delegates to them
(``spec.driver.useNvidiaDriverCRD``, Helm ``driver.nvidiaDriverCRD.enabled=true``).

Each object here selects ``cudasched.io/driver-pool=<pool>``, a label only the plan writes and
each node carries once, so no two of them select one node; objects already in the cluster whose
selector would also match a relabelled node are reported (:func:`selector_conflicts`).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cudasched.vocab import labels as L
from cudasched.vocab.objects import labels_of, name_of

__all__ = [
    "API_VERSION",
    "CLUSTER_POLICY_NOTE",
    "DRIVER_IMAGE",
    "DRIVER_REPOSITORY",
    "KIND",
    "label_commands",
    "nvidia_driver",
    "selector_conflicts",
]

API_VERSION = "nvidia.com/v1alpha1"
KIND = "NVIDIADriver"
#: The GPU Operator's own NVIDIADriver sample (manifests/input/nvd-demo-gold.yaml).
DRIVER_REPOSITORY = "nvcr.io/nvidia"
DRIVER_IMAGE = "driver"
#: The GPU Operator's node label for nodes with an NVIDIA PCI device (its selectors add it).
GPU_PRESENT = "nvidia.com/gpu.present"

CLUSTER_POLICY_NOTE = (
    "the GPU Operator reconciles NVIDIADriver objects only with ClusterPolicy "
    "spec.driver.useNvidiaDriverCRD=true (Helm: --set driver.nvidiaDriverCRD.enabled=true); with "
    "the chart's deployDefaultCR=true a default NVIDIADriver keeps driving every GPU node that "
    "no other NVIDIADriver selects"
)


def nvidia_driver(
    pool: str,
    *,
    version: str,
    module: str,
    precompiled: bool,
    max_unavailable: int | str,
    description: str,
) -> dict[str, Any]:
    """The ``NVIDIADriver`` for one pool: named after it, selecting its nodes by the pool
    label, with the kernel-module flavour set explicitly and the upgrade policy's
    ``maxUnavailable`` set to the plan's."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": pool,
            "labels": {"app.kubernetes.io/managed-by": "cudasched"},
            "annotations": {L.PREFIX + "plan": description},
        },
        "spec": {
            "default": False,
            "driverType": "gpu",
            "repository": DRIVER_REPOSITORY,
            "image": DRIVER_IMAGE,
            "version": version,
            "kernelModuleType": module,
            "usePrecompiled": precompiled,
            "nodeSelector": {L.DRIVER_POOL: pool},
            "upgradePolicy": {"autoUpgrade": True, "maxUnavailable": max_unavailable},
        },
    }


def label_commands(
    waves: Sequence[Sequence[str]], pool_of: Mapping[str, str]
) -> list[tuple[int, str]]:
    """``(wave number, kubectl label command)``: each wave's nodes, one command per pool."""
    out: list[tuple[int, str]] = []
    for number, wave in enumerate(waves, start=1):
        by_pool: dict[str, list[str]] = {}
        for node in wave:
            by_pool.setdefault(pool_of[node], []).append(node)
        for pool, nodes in by_pool.items():
            names = " ".join(shlex.quote(n) for n in nodes)
            out.append((number, f"kubectl label node {names} {L.DRIVER_POOL}={pool} --overwrite"))
    return out


def _selects(driver: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether an existing NVIDIADriver's ``nodeSelector`` (and the operator's own
    ``gpu.present``) matches a node's labels; a default object selects no node of its own."""
    spec = driver.get("spec")
    if not isinstance(spec, Mapping) or spec.get("default") is True:
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
) -> list[str]:
    """Existing ``NVIDIADriver`` objects (other than the plan's own names) that would select a
    node the plan relabels: the operator would mark both objects ``notReady``."""
    ours = set(planned)
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
            spec = driver.get("spec")
            selector = spec.get("nodeSelector") if isinstance(spec, Mapping) else None
            found.append(
                f"NVIDIADriver/{name} (nodeSelector {dict(selector or {})}) would also select "
                f"{shown}: the GPU Operator marks both objects notReady (ConflictingNodeSelector); "
                "narrow its nodeSelector so it no longer matches them, or delete it"
            )
    return found
