"""The audit's rules about pods, said once per workload: the pods of one controller are judged
one by one (each may sit on a different node), then told together about the workload a person
manages (its Deployment, not the ReplicaSet in between: :class:`~cudasched.operations.refs.Owners`)
with the fix at that level (``kubectl rollout restart deployment/x``), so twelve replicas on the
wrong nodes are one finding, not twelve. A pod no controller owns is its own workload and is
told as before.

Pods of an InferenceService or LLMInferenceService the snapshot lists are judged here only for
the node they run on; "no node can run it" and "requirement unknown" are said of the service
(:func:`~cudasched.operations.audit.workloadrules.service_findings`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched.operations.audit.context import AuditContext, wants
from cudasched.operations.audit.findings import POD_ON_INCOMPATIBLE_NODE, STALE_REQUIREMENT, Finding
from cudasched.operations.audit.unplaceable import driver_step
from cudasched.operations.audit.workloadrules import (
    invalid_finding,
    placeable_findings,
    stale_findings,
    unknown_findings,
)
from cudasched.operations.fit import usable
from cudasched.operations.reach import blocking, driver_fix
from cudasched.operations.refs import Owner, Owners, finished, names, node_name, object_ref
from cudasched.vocab.objects import name_of, namespace_of

if TYPE_CHECKING:
    from cudasched.compat.verdict import Reason
    from cudasched.nodes.facts import NodeFacts
    from cudasched.vocab.requirements import Requirement

__all__ = ["pod_findings", "recreate"]


@dataclass(frozen=True, slots=True)
class _Misplaced:
    """A pod bound to a node that cannot run it, and why."""

    pod: str
    node: str
    req: Requirement
    facts: NodeFacts
    reasons: tuple[Reason, ...]


def pod_findings(ctx: AuditContext) -> Iterator[Finding]:
    """Every workload's pods, judged and told per workload (module docstring)."""
    owners = Owners(ctx.snapshot.workloads)
    workloads: dict[Owner | int, list[Mapping[str, Any]]] = {}
    for index, pod in enumerate(ctx.snapshot.pods):
        if finished(pod):
            continue
        owner = owners.of(pod)
        workloads.setdefault(owner if owner is not None else index, []).append(pod)
    for key, pods in workloads.items():
        yield from _workload(ctx, key if isinstance(key, Owner) else None, pods)


def recreate(owner: Owner | None, pods: Sequence[Mapping[str, Any]]) -> str:
    """How the pods get admitted (and placed) again: restart the workload, or delete the pods
    for their controller to make new ones, or, for a pod no controller owns, create it again."""
    namespace = namespace_of(pods[0])
    if owner is None:
        return (
            f"recreate the pod (kubectl delete pod -n {namespace} {name_of(pods[0])}; then "
            "create it again)"
        )
    restart = owner.restart()
    if restart is not None:
        return f"restart {owner.kind} {owner.name} ({restart})"
    listed = " ".join(name_of(p) for p in pods)
    what = "pod" if len(pods) == 1 else "pods"
    return (
        f"recreate the {what} (kubectl delete pod -n {namespace} {listed}; its {owner.kind} "
        "makes new ones)"
    )


def _workload(
    ctx: AuditContext, owner: Owner | None, pods: list[Mapping[str, Any]]
) -> Iterator[Finding]:
    """One workload's findings: each pod's, then, for a controller's pods, told together."""
    misplaced: list[tuple[Mapping[str, Any], _Misplaced]] = []
    found: list[tuple[Mapping[str, Any], Finding]] = []
    for pod in pods:
        resolved = ctx.resolve_pod(pod)
        ref = object_ref(pod)
        if resolved.skipped:  # left out, as at admission: never read further, so never invalid
            continue
        if resolved.error is not None:
            found.append((pod, invalid_finding(ref, resolved.error)))
            continue
        node = node_name(pod)
        case = _misplaced(ctx, pod, node, resolved.req) if node is not None else None
        if case is not None:
            misplaced.append((pod, case))
        if not ctx.covered(pod):
            found += [
                (pod, f) for f in placeable_findings(ctx, ref, resolved, pending=node is None)
            ]
            found += [(pod, f) for f in unknown_findings(ctx, ref, resolved, "pod")]
        again = recreate(owner, [pod]) if owner is None else ""
        found += [(pod, f) for f in stale_findings(ctx, pod, ref, resolved, "pod", again)]
    if misplaced:
        yield _misplaced_finding(ctx, owner, pods, misplaced)
    if owner is None:
        yield from (f for _, f in found)
        return
    yield from _together(owner, pods, found)


def _misplaced(
    ctx: AuditContext, pod: Mapping[str, Any], node: str, req: Requirement
) -> _Misplaced | None:
    if req.is_empty:
        return None
    verdict = ctx.verdicts.on_node(node, req, ctx.policy)
    facts = ctx.verdicts.facts_of(node)
    if verdict is None or facts is None or verdict.compatible:
        return None
    return _Misplaced(name_of(pod), node, req, facts, tuple(blocking(verdict)))


def _misplaced_finding(
    ctx: AuditContext,
    owner: Owner | None,
    pods: Sequence[Mapping[str, Any]],
    misplaced: Sequence[tuple[Mapping[str, Any], _Misplaced]],
) -> Finding:
    """Pods on nodes that cannot run them: the first one's node and reasons in full, the
    other nodes named, and one fix for the workload."""
    first = misplaced[0][1]
    req, pol = first.req, ctx.policy_for(first.req)
    nodes = list(dict.fromkeys(case.node for _, case in misplaced))
    codes = ", ".join(dict.fromkeys(r.code for r in first.reasons))
    why = f"{first.facts.describe()} ({codes}): " + "; ".join(
        dict.fromkeys(r.message for r in first.reasons)
    )
    if owner is None:
        ref = object_ref(misplaced[0][0])
        message = f"needs {wants(req, pol)} but runs on {first.node}: {why}"
    else:
        ref = owner.ref
        moved = [case.pod for _, case in misplaced]
        message = (
            f"{len(moved)} of {len(pods)} pods on nodes that cannot run them ({names(moved)}): "
            f"needs {wants(req, pol)}; {first.pod} runs on {first.node}: {why}"
        )
        if len(nodes) > 1:
            message += f"; the others on {names(nodes[1:])}"
    return Finding(
        POD_ON_INCOMPATIBLE_NODE,
        ref,
        message,
        node=first.node,
        fix=_misplaced_fix(ctx, owner, [p for p, _ in misplaced], first, nodes),
        nodes=tuple(nodes) if owner is not None else (),
    )


def _misplaced_fix(
    ctx: AuditContext,
    owner: Owner | None,
    pods: Sequence[Mapping[str, Any]],
    first: _Misplaced,
    nodes: Sequence[str],
) -> str:
    """One fix for a workload's misplaced pods: recreate them where they can run (only nodes
    the pods' own node selection, tolerations and GPU count let them use are named), or the
    driver change their nodes need, said the way the driver is installed."""
    need = driver_fix(first.facts, first.reasons, first.req, ctx.kb)
    restore = driver_step(ctx, first.node, len(nodes) - 1, need) if need is not None else None
    if owner is not None and owner.kind == "DaemonSet":  # its pods stay on their nodes
        keep = "keep it off these nodes (its nodeSelector or affinity)"
        return f"a DaemonSet runs a pod on each node it selects: {restore or keep}" + (
            f", or {keep}" if restore else ""
        )
    found_spec = pods[0].get("spec")
    spec: Mapping[str, Any] = found_spec if isinstance(found_spec, Mapping) else {}
    barred = {n for n, why in usable(spec, ctx.snapshot.nodes).items() if why is not None}
    others = ctx.verdicts.reach(first.req, ctx.policy, exclude=ctx.upgrading | set(nodes) | barred)
    if not others.anywhere:
        return (
            "no other node it may use (its own node selection, tolerations and GPU count) can "
            "run it" + (f": {restore}" if restore else "")
        )
    whom = "it" if owner is None else "them"
    return (
        f"{recreate(owner, pods)} so the webhook places {whom} on one of the "
        f"{len(others.compatible)} node(s) that can run it and that its own node selection, "
        f"tolerations and GPU count allow ({names(others.compatible)})"
        + (f"; or {restore}" if restore else "")
    )


def _together(
    owner: Owner,
    pods: Sequence[Mapping[str, Any]],
    found: Sequence[tuple[Mapping[str, Any], Finding]],
) -> Iterator[Finding]:
    """A controller's pods' findings, one per code and message, about the controller: the
    pods are counted and named, and a stale requirement is fixed for all of them at once."""
    said: dict[tuple[str, str], list[tuple[Mapping[str, Any], Finding]]] = {}
    for pod, finding in found:
        said.setdefault((finding.code, finding.message), []).append((pod, finding))
    for members in said.values():
        first = members[0][1]
        which = [name_of(p) for p, _ in members]
        fix = first.fix
        if first.code == STALE_REQUIREMENT:
            fix = (
                f"{recreate(owner, [p for p, _ in members])} so admission records and "
                "enforces the current one"
            )
        nodes = tuple(dict.fromkeys(f.node for _, f in members if f.node))
        yield Finding(
            first.code,
            owner.ref,
            f"{len(members)} of {len(pods)} pods ({names(which)}): {first.message}",
            node=first.node,
            fix=fix,
            nodes=nodes,
        )
