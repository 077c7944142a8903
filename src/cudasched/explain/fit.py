"""Which nodes can run a workload as cudasched admits it: the one answer the webhook's "no node
can run it" warning, ``explain`` and the audit's ``no-compatible-node`` give.

A node can run a pod when the scheduler may place it there: the pod's required node affinity,
*as cudasched admits it* (its own ``nodeSelector`` and required terms, ANDed with the terms its
CUDA requirement compiles to, the way :func:`cudasched.placement.merge.merge_required` writes
them), matches the node, and the node offers every NVIDIA GPU resource the pod asks for. That is
:class:`Selection` and its :meth:`~Selection.admits`; :func:`selection_of` builds one from a pod
spec and the compiled terms, and :func:`runs_anywhere` asks it of a whole fleet.

Before this one answer, the webhook asked only whether any node matched the requirement's terms,
the audit only whether any node's GPU facts passed the engine, and ``explain`` the whole of it: a
pod whose own nodeSelector excluded every node that could run it was admitted without a word and
missed by the audit while ``explain`` said 0/60 (issue 27).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched.compat.engine import resolve_policy
from cudasched.explain.selectors import selector_identity
from cudasched.explain.shared import (
    Shared,
    checked_once,
    requirement_terms_once,
)
from cudasched.nodes.scheme import GfdKeys
from cudasched.placement.merge import merge_required
from cudasched.vocab import labels as L
from cudasched.vocab.nodeaffinity import Node, RequiredNodeAffinity
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.workloads.gpu import read_gpu_use

if TYPE_CHECKING:
    from cudasched.cluster.fleet import Fleet
    from cudasched.vocab.nodeterms import CompileCache

__all__ = [
    "SELECTOR_FIELDS",
    "Selection",
    "admitted_selection",
    "has_own_selection",
    "requirement_runs_anywhere",
    "runs_anywhere",
    "selection_of",
]

#: The only parts of a pod spec that node affinity reads.
SELECTOR_FIELDS = ("nodeSelector", "affinity")


@dataclass(frozen=True, slots=True)
class Selection:
    """What the scheduler asks of a node before it places the pod: the required node affinity
    as admitted (``nodeSelector`` AND required terms) and the GPU resources requested."""

    required: RequiredNodeAffinity
    gpu_requests: frozenset[str]

    def offers(self, offered: frozenset[str] | None) -> bool:
        """Whether a node offering ``offered`` GPU resources has every one the pod asks for
        (``None``: the node's resources are not known, so they are not held against it)."""
        return offered is None or self.gpu_requests <= offered

    def admits(
        self, node: Node, offered: frozenset[str] | None, matched: bool | None = None
    ) -> bool:
        """Whether the pod may land on ``node`` (which offers ``offered``): the one rule.
        ``matched`` is the required affinity's answer for the node when the caller has it
        already (``explain`` keeps it per node position)."""
        if not self.offers(offered):
            return False
        return self.required.match(node) if matched is None else matched


def has_own_selection(spec: Mapping[str, Any]) -> bool:
    """Whether the pod spec selects nodes itself (a ``nodeSelector`` or an ``affinity``): only
    then can its own selection exclude the nodes its requirement allows."""
    return bool(spec.get("nodeSelector")) or bool(spec.get("affinity"))


def admitted_selection(
    spec: Mapping[str, Any], terms: Sequence[Mapping[str, Any]] | None
) -> dict[str, Any]:
    """The spec's ``nodeSelector`` and ``affinity`` as cudasched admits them: with ``terms``
    ANDed into the required node affinity (replacing cudasched's own earlier terms), or as given
    when there is no requirement (``None``). Raises
    :class:`~cudasched.vocab.errors.InputError` when the spec's affinity cannot be merged."""
    only = {k: spec[k] for k in SELECTOR_FIELDS if k in spec}
    return merge_required(only, terms) if terms is not None else only


def selection_of(
    spec: Mapping[str, Any],
    terms: Sequence[Mapping[str, Any]] | None,
    gpu_requests: frozenset[str],
    *,
    cache: CompileCache | None = None,
) -> Selection:
    """The :class:`Selection` of a pod ``spec`` whose requirement compiled to ``terms``
    (``None``: no requirement) and which asks for ``gpu_requests``."""
    merged = admitted_selection(spec, terms)
    return Selection(RequiredNodeAffinity.from_pod_spec(merged, cache=cache), gpu_requests)


def runs_anywhere(fleet: Fleet, selection: Selection) -> bool:
    """Whether any node of ``fleet`` admits the pod (:meth:`Selection.admits`)."""
    at = fleet.gpu_resources_at
    return any(selection.admits(node, at(i)) for i, node in enumerate(fleet.nodes))


def requirement_runs_anywhere(
    spec: Mapping[str, Any],
    requirement: Requirement,
    policy: Policy,
    fleet: Fleet,
    shared: Shared,
    scheme: L.LabelScheme = L.LabelScheme.AUTO,
) -> bool:
    """Whether any node of ``fleet`` can run a pod of ``spec`` that needs ``requirement``
    (``policy`` the default its own overrides), its terms compiled for the fleet's label
    scheme exactly as ``explain`` compiles them: what the audit asks of a pending workload.
    A requirement no selector can express runs nowhere; a spec whose affinity cannot be merged
    raises :class:`~cudasched.vocab.errors.InputError` (the webhook admits it unconstrained)."""
    effective = resolve_policy(requirement, policy)
    chosen = fleet.resolve_scheme(scheme)
    gfd_keys = fleet.gfd_keys if chosen is L.LabelScheme.GFD else GfdKeys.NEW
    kb = fleet.kb
    terms, error = requirement_terms_once(requirement, effective, chosen, gfd_keys, kb, shared)
    if error is not None:
        return False
    gpu_requests = read_gpu_use(spec, shared.gpu).resources
    identity = selector_identity(spec)
    key = None if identity is None else (identity, id(terms), gpu_requests)
    found = shared.fits.get(key) if key is not None else None
    if found is None:
        checked = checked_once(terms, shared)
        selection = selection_of(spec, checked, gpu_requests, cache=shared.compiled)
        found = runs_anywhere(fleet, selection)
        if key is not None:
            shared.fits[key] = found
    return found
