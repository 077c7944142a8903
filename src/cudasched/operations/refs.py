"""How audit findings name objects, and the few fields of a pod they read (its node, whether it
has finished, its controller and the workload that owns it). Lenient readers: a finding must
never fail on an odd object."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cudasched.vocab.objects import labels_of, metadata_of, name_of, namespace_of

__all__ = [
    "Owner",
    "Owners",
    "controller_kind",
    "finished",
    "names",
    "node_name",
    "object_ref",
]

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
        "MutatingWebhookConfiguration",
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


#: The label the Deployment controller puts on a ReplicaSet's pods: the hash its name ends in.
POD_TEMPLATE_HASH = "pod-template-hash"

#: ``kubectl rollout restart`` works on these: new pods, admitted (and placed) again.
_RESTARTABLE = {"Deployment": "deployment", "StatefulSet": "statefulset", "DaemonSet": "daemonset"}


@dataclass(frozen=True, slots=True)
class Owner:
    """The workload a pod belongs to, as a person manages it: its Deployment rather than the
    ReplicaSet in between."""

    kind: str
    namespace: str
    name: str

    @property
    def ref(self) -> str:
        """``Kind/namespace/name``, as findings name objects."""
        return f"{self.kind}/{self.namespace}/{self.name}"

    @property
    def id(self) -> str:
        """``namespace/Kind/name``, as ``explain`` names workloads (and takes them back)."""
        return f"{self.namespace}/{self.kind}/{self.name}"

    def restart(self) -> str | None:
        """The command that replaces all its pods (so the webhook admits and places each
        again), or ``None`` when its pods are replaced only one by one (a ReplicaSet, a Job)."""
        resource = _RESTARTABLE.get(self.kind)
        if resource is None:
            return None
        return f"kubectl rollout restart {resource}/{self.name} -n {self.namespace}"


class Owners:
    """Who owns each pod, read from the pods' ``ownerReferences`` and, where the cluster read
    holds them, the controllers' own (a dump may hold ReplicaSets and Jobs): a ReplicaSet made
    by a Deployment stands for that Deployment. Without the ReplicaSet, a pod whose
    ``pod-template-hash`` label ends its ReplicaSet's name is a Deployment's, as the Deployment
    controller names them (``NAME-HASH``)."""

    def __init__(self, controllers: Iterable[Mapping[str, Any]] = ()) -> None:
        self._up: dict[tuple[str, str, str], Owner] = {}
        self._read: set[tuple[str, str, str]] = set()  # controllers the cluster read holds
        for obj in controllers:
            self._read.add((str(obj.get("kind")), namespace_of(obj), name_of(obj)))
            ref = _controller_ref(obj)
            if ref is not None:
                self._up[(str(obj.get("kind")), namespace_of(obj), name_of(obj))] = Owner(
                    ref[0], namespace_of(obj), ref[1]
                )

    def of(self, pod: Mapping[str, Any]) -> Owner | None:
        """The workload that owns ``pod``, or ``None`` for a pod no controller owns."""
        ref = _controller_ref(pod)
        if ref is None:
            return None
        kind, name = ref
        namespace = namespace_of(pod)
        above = self._up.get((kind, namespace, name))
        if above is not None:
            return above
        template = labels_of(pod).get(POD_TEMPLATE_HASH)
        read = (kind, namespace, name) in self._read  # then its owner, or none, is known
        if kind == "ReplicaSet" and not read and template and name.endswith(f"-{template}"):
            return Owner("Deployment", namespace, name.removesuffix(f"-{template}"))
        return Owner(kind, namespace, name)


def _controller_ref(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    for ref in metadata_of(obj).get("ownerReferences") or ():
        if (
            isinstance(ref, Mapping)
            and ref.get("controller")
            and ref.get("kind")
            and ref.get("name")
        ):
            return str(ref["kind"]), str(ref["name"])
    return None
