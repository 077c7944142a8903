"""How audit findings name objects, and the few fields of a pod they read (its node, whether it
has finished, its controller). Lenient readers: a finding must never fail on an odd object."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cudasched.vocab.objects import metadata_of, name_of, namespace_of

__all__ = ["controller_kind", "finished", "names", "node_name", "object_ref"]

_FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
_CLUSTER_SCOPED = frozenset(
    {
        "Node",
        "ClusterServingRuntime",
        "NVIDIADriver",
        "Namespace",
        "DeviceClass",
        "ResourceSlice",
        "ResourceFlavor",
    }
)
_EXAMPLES = 3  # node or pod names quoted in one message


def object_ref(obj: Mapping[str, Any]) -> str:
    """``Kind/namespace/name``, or ``Kind/name`` for a cluster-scoped object."""
    meta = metadata_of(obj)
    name = name_of(obj) or str(meta.get("generateName") or "<unnamed>")
    kind = str(obj.get("kind") or "?")
    if kind in _CLUSTER_SCOPED:
        return f"{kind}/{name}"
    return f"{kind}/{namespace_of(obj)}/{name}"


def names(found: Sequence[str]) -> str:
    """The first few of ``found``, then how many more."""
    shown = ", ".join(found[:_EXAMPLES])
    more = len(found) - _EXAMPLES
    return shown + (f" and {more} more" if more > 0 else "")


def finished(pod: Mapping[str, Any]) -> bool:
    """A pod that ran to completion or failed: it holds no node any more."""
    status = pod.get("status")
    return isinstance(status, Mapping) and status.get("phase") in _FINISHED_PHASES


def controller_kind(obj: Mapping[str, Any]) -> str | None:
    """The kind of the object's controller (``ownerReferences`` entry with controller: true)."""
    for ref in metadata_of(obj).get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller") and ref.get("kind"):
            return str(ref["kind"])
    return None


def node_name(pod: Mapping[str, Any]) -> str | None:
    """The node a pod is bound to (``spec.nodeName``), ``None`` while it is pending."""
    spec = pod.get("spec")
    name = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return name if isinstance(name, str) and name else None
