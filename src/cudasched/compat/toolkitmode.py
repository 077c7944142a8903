"""Which mode NVIDIA's container toolkit runs in on a cluster's nodes, read from the GPU
Operator's ClusterPolicy (:class:`~cudasched.vocab.requirements.ToolkitMode` says what each
mode decides). Pure: objects in, a :class:`ToolkitRead` out; the ``kube/`` edge or a dump
supplies the ClusterPolicy.

The GPU Operator's facts (NVIDIA/gpu-operator, read at a22dbf6):

* **v25.10 and later.** ``spec.cdi.enabled`` defaults to true (commit 67d2e125, "Set
  cdi.enabled to true by default", first released in v25.10.0), and with it the operator sets
  the toolkit's ``NVIDIA_CONTAINER_RUNTIME_MODE=cdi`` and lets containerd or CRI-O inject the
  GPUs from the CDI spec (``controllers/object_controls.go`` ``transformToolkitCtrForCDI``).
  ``spec.cdi.default`` no longer does anything (commit e63a9903, "Make the cdi.default field a
  no-op").
* **Before v25.10.** ``spec.cdi.enabled`` defaults to false, and the toolkit's mode is set to
  ``cdi`` only when ``spec.cdi.default`` is true as well (v25.3.0
  ``controllers/object_controls.go``); otherwise the runtime runs in ``auto``, which the
  toolkit of those releases (v1.17) resolves to legacy for the device plugin's
  ``NVIDIA_VISIBLE_DEVICES``.

Read as legacy, with the reason said: a cluster without a ClusterPolicy (the toolkit installed
by hand, a managed node image), one whose release cannot be read, and ``cdi.enabled: false``
on v25.10 and later (the operator then leaves the runtime's mode to the toolkit, whose v1.18
resolves ``auto`` to ``jit-cdi`` on NVML platforms, which checks no gate either; legacy is the
reading that keeps the gate). ``--toolkit-mode`` (and ``toolkitMode`` in the settings) says it
outright.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched.compat.operatorrelease import CLUSTER_POLICY_KIND, operator_of_cluster
from cudasched.vocab.requirements import ToolkitMode

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase

__all__ = ["CDI_BY_DEFAULT", "ToolkitRead", "toolkit_mode_of"]

#: The first GPU Operator release line whose ClusterPolicy enables CDI by default.
CDI_BY_DEFAULT = (25, 10)


@dataclass(frozen=True, slots=True)
class ToolkitRead:
    """The toolkit mode and where it was read (``source``, in words)."""

    mode: ToolkitMode
    source: str


def _cdi(policy: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = policy.get("spec")
    cdi = spec.get("cdi") if isinstance(spec, Mapping) else None
    return cdi if isinstance(cdi, Mapping) else {}


def toolkit_mode_of(kb: KnowledgeBase, objects: Iterable[Mapping[str, Any]]) -> ToolkitRead:
    """The mode the ClusterPolicy among ``objects`` configures (see the module's docstring);
    legacy, with the reason, when none tells."""
    objects = list(objects)
    policies = [o for o in objects if o.get("kind") == CLUSTER_POLICY_KIND]
    if not policies:
        return ToolkitRead(ToolkitMode.LEGACY, "no GPU Operator ClusterPolicy: read as legacy")
    policy = policies[0]
    meta = policy.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    cdi = _cdi(policy)
    enabled, default = cdi.get("enabled"), cdi.get("default")
    release = operator_of_cluster(kb, objects)
    where = f"ClusterPolicy {name or '?'}"
    if release is None:
        if enabled is True and default is True:
            return ToolkitRead(ToolkitMode.CDI, f"{where}: spec.cdi.enabled and default")
        return ToolkitRead(
            ToolkitMode.LEGACY,
            f"{where}: GPU Operator release not read, so spec.cdi's defaults are not known: "
            "read as legacy",
        )
    version = release.version.version
    if release.version.key >= CDI_BY_DEFAULT:
        if enabled is False:
            return ToolkitRead(
                ToolkitMode.LEGACY, f"{where}: spec.cdi.enabled=false (GPU Operator {version})"
            )
        said = "spec.cdi.enabled" if enabled is True else "spec.cdi.enabled (default true)"
        return ToolkitRead(ToolkitMode.CDI, f"{where}: {said} (GPU Operator {version})")
    if enabled is True and default is True:
        return ToolkitRead(
            ToolkitMode.CDI,
            f"{where}: spec.cdi.enabled and spec.cdi.default (GPU Operator {version})",
        )
    return ToolkitRead(
        ToolkitMode.LEGACY,
        f"{where}: CDI is not the default (GPU Operator {version} needs spec.cdi.enabled and "
        "spec.cdi.default)",
    )
