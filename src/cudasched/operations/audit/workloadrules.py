"""The audit's rules about workloads: serving runtimes no node can run, pods on nodes that
cannot run them, workloads no node can run or whose requirement is unknown or stale."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from cudasched.operations.audit.context import AuditContext, Resolved, wants
from cudasched.operations.audit.findings import (
    NO_COMPATIBLE_NODE,
    POD_ON_INCOMPATIBLE_NODE,
    REQUIREMENT_INVALID,
    REQUIREMENT_UNKNOWN,
    RUNTIME_WITHOUT_NODE,
    STALE_REQUIREMENT,
    Finding,
)
from cudasched.operations.audit.nodegroups import scale_up_hint
from cudasched.operations.audit.unplaceable import (
    driver_step,
    unplaceable_fix,
    unplaceable_message,
)
from cudasched.operations.fit import usable
from cudasched.operations.reach import blocking, driver_fix
from cudasched.operations.refs import controller_kind, finished, names, node_name, object_ref
from cudasched.operations.runtimes import RuntimeRow, runtime_rows
from cudasched.vocab import labels as L
from cudasched.vocab.objects import annotations_of, name_of, namespace_of
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.workloads.kserve import (
    SERVING_RUNTIME,
)
from cudasched.workloads.resolution import UNKNOWN_RECORD
from cudasched.workloads.view import view_pod

if TYPE_CHECKING:
    pass


__all__ = ["pod_findings", "runtime_findings", "service_findings"]


def runtime_findings(ctx: AuditContext) -> Iterator[Finding]:
    users: dict[tuple[str, str], list[str]] = {}
    for ns, isvc in ctx.isvcs:
        choice = ctx.fleet.runtime_of(ns, isvc)
        if choice is not None:
            users.setdefault((choice.kind, choice.name), []).append(f"{ns}/{isvc}")
    for row in runtime_rows(ctx.fleet, ctx.images):
        yield from _runtime(ctx, row, users.get((row.kind, row.name), []))


def _runtime(ctx: AuditContext, row: RuntimeRow, users: list[str]) -> Iterator[Finding]:
    if row.error is not None:
        yield Finding(
            REQUIREMENT_INVALID,
            row.ref,
            row.error,
            fix="correct the value named in the message",
        )
        return
    req = row.requirement
    if row.disabled or req is None or req.is_empty:
        return
    reach = ctx.verdicts.reach(req, ctx.policy)
    if reach.anywhere:
        return
    used = f"; used by {names(users)}" if users else ""
    yield Finding(
        RUNTIME_WITHOUT_NODE,
        row.ref,
        unplaceable_message(ctx, req, reach, "the runtime's ") + used,
        node=reach.nearest.node if reach.nearest is not None else None,
        fix=unplaceable_fix(ctx, req, reach),
    )


def pod_findings(ctx: AuditContext) -> Iterator[Finding]:
    for pod in ctx.snapshot.pods:
        if finished(pod):
            continue
        found = ctx.resolve_pod(pod)
        ref = object_ref(pod)
        if found.skipped:  # left out, as at admission: never read further, so never invalid
            continue
        if found.error is not None:
            yield _invalid(ref, found.error)
            continue
        node = node_name(pod)
        if node is not None:
            yield from _bound(ctx, pod, ref, node, found.req)
        if not ctx.covered(pod):
            yield from _placeable(ctx, ref, found, pending=node is None)
            yield from _unknown(ctx, ref, found, "pod")
        yield from _stale(ctx, pod, ref, found, "pod")


def _bound(
    ctx: AuditContext, pod: Mapping[str, Any], ref: str, node: str, req: Requirement
) -> Iterator[Finding]:
    if req.is_empty:
        return
    verdict = ctx.verdicts.on_node(node, req, ctx.policy)
    facts = ctx.verdicts.facts_of(node)
    if verdict is None or facts is None or verdict.compatible:
        return
    pol = ctx.policy_for(req)
    reasons = blocking(verdict)
    codes = ", ".join(dict.fromkeys(r.code for r in reasons))
    # Only nodes the pod's own selection, tolerations and GPU count let it use may be named.
    found_spec = pod.get("spec")
    spec: Mapping[str, Any] = found_spec if isinstance(found_spec, Mapping) else {}
    barred = {n for n, why in usable(spec, ctx.snapshot.nodes).items() if why is not None}
    others = ctx.verdicts.reach(req, ctx.policy, exclude=ctx.upgrading | {node} | barred)
    need = driver_fix(facts, reasons, req, ctx.kb)
    restore = driver_step(ctx, node, 0, need) if need is not None else None
    if others.anywhere:
        owner = controller_kind(pod)
        again = f"its {owner} makes a new one" if owner else "then create it again"
        fix = (
            f"recreate the pod (kubectl delete pod -n {namespace_of(pod)} {name_of(pod)}; "
            f"{again}) so the webhook places it on one of the {len(others.compatible)} "
            f"node(s) that can run it and that its own node selection, tolerations and GPU "
            f"count allow ({names(others.compatible)})" + (f"; or {restore}" if restore else "")
        )
    else:
        fix = (
            "no other node it may use (its own node selection, tolerations and GPU count) can "
            "run it" + (f": {restore}" if restore else "")
        )
    yield Finding(
        POD_ON_INCOMPATIBLE_NODE,
        ref,
        f"needs {wants(req, pol)} but runs on {node}: {facts.describe()} ({codes}): "
        + "; ".join(dict.fromkeys(r.message for r in reasons)),
        node=node,
        fix=fix,
    )


def _placeable(
    ctx: AuditContext, ref: str, found: Resolved, *, pending: bool, pods: str = ""
) -> Iterator[Finding]:
    if not pending or found.req.is_empty:
        return
    reach = ctx.verdicts.reach(found.req, ctx.policy)
    if reach.anywhere:
        if ctx.runs_somewhere(found):
            return
        # Nodes can run what it needs, but none as it asks to be placed: the rule the webhook
        # warns by and explain counts by (explain/fit.py). (Where the label scheme cannot say
        # all the engine knows, the engine's "no node" below still reports it.)
        yield Finding(
            NO_COMPATIBLE_NODE,
            ref,
            f"needs {wants(found.req, ctx.policy_for(found.req))}: {len(reach.compatible)} "
            f"node(s) can run it ({names(reach.compatible)}), but none it may land on: its own "
            "nodeSelector or node affinity, or the GPU resource it asks for, excludes them" + pods,
            fix="widen its nodeSelector or node affinity to one of those nodes (cudasched "
            "explain shows what excludes each)",
        )
        return
    fix = unplaceable_fix(ctx, found.req, reach, found.pod)
    # A group scaled to zero may be the home it is waiting for (docs/operations.md).
    hint = scale_up_hint(ctx.node_groups, found.req, reach.policy, ctx.kb)
    if hint is not None:
        fix = f"{hint}; otherwise {fix}" if fix else hint
    yield Finding(
        NO_COMPATIBLE_NODE,
        ref,
        unplaceable_message(ctx, found.req, reach) + pods,
        node=reach.nearest.node if reach.nearest is not None else None,
        fix=fix,
    )


def _unknown(ctx: AuditContext, ref: str, found: Resolved, kind: str) -> Iterator[Finding]:
    unknown = found.unknown
    if unknown is None:
        return  # known, CPU-only, or decided: a runtime for another accelerator
    fix = unknown.fix
    if found.runtime is not None:
        runtime = found.runtime
        where = "" if runtime.kind != SERVING_RUNTIME else f" -n {namespace_of(runtime.obj)}"
        fix = (  # the same words as the webhook's warning, and the command that does it
            f"{unknown.fix}: kubectl label {runtime.kind.lower()}{where} {runtime.name} "
            f"{L.ANN_CUDA_VERSION}=<the CUDA version its image was built with>"
        )
    yield Finding(
        REQUIREMENT_UNKNOWN,
        ref,
        f"uses a GPU but its CUDA is unknown ({unknown.describe()}): the webhook cannot "
        "keep it off nodes whose driver is too old",
        fix=fix,
    )


def _stale(
    ctx: AuditContext, obj: Mapping[str, Any], ref: str, found: Resolved, kind: str
) -> Iterator[Finding]:
    recorded = annotations_of(obj).get(L.ANN_REQUIREMENT)
    if not isinstance(recorded, str) or not recorded.strip():
        return
    if found.unknown is not None and recorded.startswith(UNKNOWN_RECORD + " ("):
        return  # recorded unknown and still unknown (the reason may be worded otherwise)
    req = found.req
    now = None if req.is_empty else req.record(ctx.policy_for(req))
    if recorded == now:
        return
    # The audit cannot know the webhook's default policy: a record that differs only in it
    # is not reported (see docs/operations.md).
    if now is not None and req.policy is None and any(req.record(p) == recorded for p in Policy):
        return
    resolves = f"{now!r}" if now is not None else "no requirement"
    if kind == "pod":
        owner = controller_kind(obj)
        how = f"delete it; its {owner} makes a new one" if owner else "delete it, create it again"
        fix = f"recreate the pod ({how}) so admission records and enforces the current one"
    else:
        fix = (
            f"update the {kind} (any change re-runs admission), then restart its pods so "
            "they are placed by the current requirement"
        )
    yield Finding(
        STALE_REQUIREMENT,
        ref,
        f"recorded {L.ANN_REQUIREMENT} {recorded!r} but it resolves to {resolves} now "
        "(a runtime label, annotation or image changed after admission)",
        node=node_name(obj) if kind == "pod" else None,
        fix=fix,
    )


def service_findings(ctx: AuditContext) -> Iterator[Finding]:
    pending: dict[tuple[str, str], list[str]] = {}
    for pod in ctx.snapshot.pods:
        if node_name(pod) is None and not finished(pod) and ctx.covered(pod):
            ns = namespace_of(pod)
            owner = view_pod(pod).owner
            pending.setdefault((ns, owner or ""), []).append(name_of(pod))
    for obj in ctx.snapshot.inference_services:
        yield from _service(ctx, obj, ctx.resolve_isvc(obj), "InferenceService", pending)
    for obj in ctx.snapshot.llm_inference_services:
        yield from _service(ctx, obj, ctx.resolve_llm(obj), "LLMInferenceService", pending)


def _service(
    ctx: AuditContext,
    obj: Mapping[str, Any],
    found: Resolved,
    kind: str,
    pending: Mapping[tuple[str, str], list[str]],
) -> Iterator[Finding]:
    ref = object_ref(obj)
    if found.skipped:  # left out, as at admission: never read further, so never invalid
        return
    if found.error is not None:
        yield _invalid(ref, found.error)
        return
    if found.no_pods is not None:  # as explain counts it: on no node
        yield Finding(
            NO_COMPATIBLE_NODE,
            ref,
            f"KServe runs no predictor for it, so no node can run it: {found.no_pods}",
            fix="create the runtime it names, or name one that exists and serves its model",
        )
        return
    waiting = pending.get((namespace_of(obj), name_of(obj)), [])
    pods = f"; pending pods: {names(waiting)}" if waiting else ""
    yield from _placeable(ctx, ref, found, pending=True, pods=pods)
    yield from _unknown(ctx, ref, found, kind)
    yield from _stale(ctx, obj, ref, found, kind)


def _invalid(ref: str, error: str) -> Finding:
    return Finding(
        REQUIREMENT_INVALID,
        ref,
        f"its CUDA requirement cannot be read: {error}",
        fix="correct the value named in the message (see the README's annotation reference)",
    )
