"""The audit's rules about workloads: serving runtimes no node can run, services no node can
run or whose requirement is unknown or stale, and those findings' words, which the rules about
pods (:mod:`~cudasched.operations.audit.podrules`) share."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from cudasched.operations.audit.context import AuditContext, Resolved, wants
from cudasched.operations.audit.findings import (
    NO_COMPATIBLE_NODE,
    REQUIREMENT_INVALID,
    REQUIREMENT_UNKNOWN,
    RUNTIME_WITHOUT_NODE,
    STALE_REQUIREMENT,
    Finding,
)
from cudasched.operations.audit.nodegroups import scale_up_hint
from cudasched.operations.audit.unplaceable import unplaceable_fix, unplaceable_message
from cudasched.operations.refs import finished, names, node_name, object_ref
from cudasched.operations.runtimes import RuntimeRow, runtime_rows
from cudasched.vocab import labels as L
from cudasched.vocab.objects import annotations_of, name_of, namespace_of
from cudasched.vocab.requirements import Policy
from cudasched.workloads.kserve import (
    SERVING_RUNTIME,
)
from cudasched.workloads.resolution import UNKNOWN_RECORD
from cudasched.workloads.view import view_pod

if TYPE_CHECKING:
    pass


__all__ = [
    "invalid_finding",
    "placeable_findings",
    "runtime_findings",
    "service_findings",
    "stale_findings",
    "unknown_findings",
]


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


def placeable_findings(
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


def unknown_findings(ctx: AuditContext, ref: str, found: Resolved, kind: str) -> Iterator[Finding]:
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


def stale_findings(
    ctx: AuditContext,
    obj: Mapping[str, Any],
    ref: str,
    found: Resolved,
    kind: str,
    recreate: str = "",
) -> Iterator[Finding]:
    """A recorded requirement that no longer matches; ``recreate`` is how a pod is admitted
    again (``kind`` ``pod``; :func:`~cudasched.operations.audit.podrules.recreate`)."""
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
        fix = f"{recreate} so admission records and enforces the current one"
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
        yield invalid_finding(ref, found.error)
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
    yield from placeable_findings(ctx, ref, found, pending=True, pods=pods)
    yield from unknown_findings(ctx, ref, found, kind)
    yield from stale_findings(ctx, obj, ref, found, kind)


def invalid_finding(ref: str, error: str) -> Finding:
    return Finding(
        REQUIREMENT_INVALID,
        ref,
        f"its CUDA requirement cannot be read: {error}",
        fix="correct the value named in the message (see the README's annotation reference)",
    )
