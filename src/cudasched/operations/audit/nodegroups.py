"""Declared node groups: autoscaler templates that can add a node the cluster does not have yet.

A pending GPU pod that no node can run may still get one: a node group scaled to zero whose
template declares labels that run it is scaled up by the autoscaler. The audit says so in the
fix of its ``no-compatible-node`` finding (:func:`scale_up_hint`). Groups come from:

* ``node-template`` documents (``cudasched node-template -o json|yaml``, one or a list), given
  to ``audit --node-templates FILE``: the only way to show the audit AWS Auto Scaling group or
  Azure VMSS tags, which live in the cloud, not in the cluster. Whether such a group has nodes
  is not known, so each is offered as one that may be empty;
* Karpenter ``NodePool`` objects in the snapshot (``spec.template.metadata.labels``); empty
  when no node carries ``karpenter.sh/nodepool=<name>``;
* Cluster API ``MachineDeployment`` / ``MachineSet`` / ``MachinePool`` objects in the snapshot
  with the ``capacity.cluster-autoscaler.kubernetes.io/labels`` annotation; empty when they
  have zero replicas.

A group is judged as a node would be: its labels read by
:func:`cudasched.nodes.facts.facts_from_labels`
and checked by :func:`cudasched.compat.engine.check`. A group known to have nodes is not offered:
its nodes were judged already.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched.compat.engine import check
from cudasched.nodes.autoscaling import (
    CAPI_LABELS_ANNOTATION,
    KARPENTER_NODEPOOL_LABEL,
    parse_label_list,
)
from cudasched.nodes.facts import facts_from_labels
from cudasched.vocab.errors import InputError
from cudasched.vocab.objects import annotations_of, labels_of, name_of, namespace_of

if TYPE_CHECKING:
    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.knowledge import KnowledgeBase
    from cudasched.vocab.requirements import Policy, Requirement

__all__ = [
    "NodeGroup",
    "groups_from_snapshot",
    "groups_from_templates",
    "scale_up_hint",
]

_KARPENTER_GROUP = "karpenter.sh"
_CAPI_GROUP = "cluster.x-k8s.io"
_CAPI_KINDS = frozenset({"MachineDeployment", "MachineSet", "MachinePool"})


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """A group an autoscaler can add nodes to, and the labels its new nodes start with.
    ``empty`` is ``None`` when the source does not say how many nodes the group has."""

    name: str
    labels: Mapping[str, str]
    empty: bool | None = None

    def describe(self, facts: str = "") -> str:
        """``Karpenter NodePool gpu (no node now; driver 570.124.06, CUDA 12.8, ...)``."""
        size = {True: "no node now", False: "has nodes", None: "size unknown"}[self.empty]
        return f"{self.name} ({size}; {facts})" if facts else f"{self.name} ({size})"


def _group(obj: Mapping[str, Any]) -> str:
    api_version = obj.get("apiVersion")
    return api_version.rpartition("/")[0] if isinstance(api_version, str) else ""


def _str_map(value: Any) -> dict[str, str] | None:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        return None
    return dict(value)


def _replicas(obj: Mapping[str, Any]) -> int | None:
    for part in ("spec", "status"):
        section = obj.get(part)
        if isinstance(section, Mapping):
            count = section.get("replicas")
            if isinstance(count, int) and not isinstance(count, bool):
                return count
    return None


def groups_from_snapshot(snapshot: ClusterSnapshot) -> list[NodeGroup]:
    """Karpenter NodePools and Cluster API machine groups that declare template labels."""
    pools_with_nodes = {labels_of(n).get(KARPENTER_NODEPOOL_LABEL) for n in snapshot.nodes}
    groups: list[NodeGroup] = []
    for obj in snapshot.other:
        kind, name = obj.get("kind"), name_of(obj)
        if _group(obj) == _KARPENTER_GROUP and kind == "NodePool":
            template = (obj.get("spec") or {}).get("template") or {}
            labels = _str_map((template.get("metadata") or {}).get("labels"))
            if labels:
                empty: bool | None = name not in pools_with_nodes
                groups.append(NodeGroup(f"Karpenter NodePool {name}", labels, empty))
        elif _group(obj) == _CAPI_GROUP and kind in _CAPI_KINDS:
            declared = annotations_of(obj).get(CAPI_LABELS_ANNOTATION)
            if not isinstance(declared, str):
                continue
            try:
                labels = parse_label_list(declared)
            except InputError:
                continue  # not ours to judge: the autoscaler reports its own annotations
            replicas = _replicas(obj)
            empty = None if replicas is None else replicas == 0
            ref = f"{kind} {namespace_of(obj)}/{name}"
            groups.append(NodeGroup(ref, labels, empty))
    return groups


def groups_from_templates(docs: Iterable[Any], source: str) -> list[NodeGroup]:
    """Groups from ``node-template`` documents (parsed JSON/YAML; a list counts as its items).
    A document may carry a ``name``; otherwise its Karpenter NodePool's name, else its place
    in ``source``. An :class:`InputError` names a document that is not a node template."""
    items: list[Any] = []
    for doc in docs:
        items.extend(doc if isinstance(doc, list) else [doc])
    groups: list[NodeGroup] = []
    for number, doc in enumerate(items, start=1):
        labels = _str_map(doc.get("labels")) if isinstance(doc, Mapping) else None
        if not labels:
            raise InputError(
                f"{source}: document {number} is not a node template: expected a map with "
                "'labels' (string keys and values), as `cudasched node-template -o json` prints"
            )
        name = doc.get("name")
        if not isinstance(name, str) or not name:
            pool = ((doc.get("declarations") or {}).get("karpenter") or {}).get("metadata")
            pool_name = pool.get("name") if isinstance(pool, Mapping) else None
            name = (
                f"node template {pool_name}"
                if isinstance(pool_name, str)
                else f"node template {number} of {source}"
            )
        groups.append(NodeGroup(name, labels))
    return groups


def scale_up_hint(
    groups: Sequence[NodeGroup], req: Requirement, policy: Policy, kb: KnowledgeBase
) -> str | None:
    """What to tell about a requirement no node can run when a declared group that may be
    empty would run it (``None`` when none would)."""
    fitting: list[str] = []
    for group in groups:
        if group.empty is False:
            continue
        facts = facts_from_labels(group.name, group.labels, kb)
        if check(facts, req, policy, kb).compatible:
            fitting.append(group.describe(facts.describe()))
    if not fitting:
        return None
    groups_word, them = ("group", "it") if len(fitting) == 1 else ("groups", "them")
    return (
        f"declared node {groups_word} {'; '.join(fitting)} can run it: the autoscaler can add a "
        f"node from {them}; if it stays Pending, read the autoscaler's events and the "
        "group's maximum size"
    )
