"""The audit's rules about nodes: missing or conflicting labels, old GPU Feature Discovery,
the GPU Operator's driver upgrades and the pods they displace."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from cudasched.operations.audit.context import AuditContext
from cudasched.operations.audit.findings import (
    DRIVER_UPGRADE_FAILED,
    DRIVER_UPGRADE_IN_PROGRESS,
    LABELS_CONFLICT,
    LABELS_DEPRECATED_ONLY,
    LABELS_MISSING,
    Finding,
)
from cudasched.operations.nodelabels import (
    GFD_NEW_KEYS_RELEASE,
    UPGRADE_DONE,
    UPGRADE_FAILED,
    UPGRADE_STATE_KEY,
    conflicts,
    deprecated_only,
    gpu_capacity,
    is_gpu_node,
    upgrade_state,
)
from cudasched.operations.refs import finished, names, node_name, object_ref
from cudasched.vocab import labels as L
from cudasched.vocab.objects import labels_of, name_of, namespace_of

if TYPE_CHECKING:
    from cudasched.nodes.facts import NodeFacts


__all__ = ["node_findings"]


def node_findings(ctx: AuditContext) -> Iterator[Finding]:
    for node in ctx.snapshot.nodes:
        yield from _node(ctx, node)


def _node(ctx: AuditContext, node: Mapping[str, Any]) -> Iterator[Finding]:
    name = name_of(node)
    ref = object_ref(node)
    labels = labels_of(node)
    facts = ctx.verdicts.facts_of(name)
    if facts is None:
        return
    if is_gpu_node(node) and facts.driver is None and facts.cuda is None:
        yield _labels_missing(ctx, ref, name, node, facts)
    if deprecated_only(labels):
        reads = (
            "decisions read its cudasched.io/ labels"
            if any(k.startswith(L.PREFIX) for k in labels)
            else "decisions read these keys, and label scheme gfd falls back to them for every node"
        )
        yield Finding(
            LABELS_DEPRECATED_ONLY,
            ref,
            f"only GPU Feature Discovery's deprecated keys (nvidia.com/cuda.driver.*, "
            f"nvidia.com/cuda.runtime.*): GFD older than {GFD_NEW_KEYS_RELEASE}; it works, "
            f"{reads}",
            node=name,
            fix=f"upgrade GFD (NVIDIA k8s-device-plugin, or the GPU Operator that ships it) "
            f"to {GFD_NEW_KEYS_RELEASE} or newer, which adds nvidia.com/cuda.driver-version.* "
            "and nvidia.com/cuda.runtime-version.*",
        )
    found = conflicts(labels, facts)
    if found:
        yield Finding(
            LABELS_CONFLICT,
            ref,
            "label sources disagree: " + "; ".join(c.describe() for c in found),
            node=name,
            fix="one publisher is stale: restart GPU Feature Discovery and the cudasched "
            "agent on the node so both read the running driver (GFD refreshes every 60 s "
            "by default)",
        )
    state = upgrade_state(labels)
    if state is not None and state != UPGRADE_DONE:
        yield _upgrade(ctx, ref, name, state)


def _labels_missing(
    ctx: AuditContext, ref: str, name: str, node: Mapping[str, Any], facts: NodeFacts
) -> Finding:
    gpus = gpu_capacity(node)
    why = f"{gpus} nvidia.com/gpu in its status" if gpus else f"{L.GFD_PRESENT}=true"
    unreadable = f" (unreadable: {'; '.join(facts.problems)})" if facts.problems else ""
    return Finding(
        LABELS_MISSING,
        ref,
        f"GPU node ({why}) without usable driver or CUDA labels{unreadable}: every pod with "
        "a CUDA requirement avoids it",
        node=name,
        fix="run GPU Feature Discovery (GPU Operator) or `cudasched agent` on the node so "
        "it publishes its driver and CUDA version",
    )


def _upgrade(ctx: AuditContext, ref: str, name: str, state: str) -> Finding:
    pods = [
        p
        for p in ctx.snapshot.pods
        if node_name(p) == name and not finished(p) and ctx.resolve_pod(p).gpu
    ]
    homes: list[str] = []
    homeless: list[str] = []
    for pod in pods:
        who = f"{namespace_of(pod)}/{name_of(pod)}"
        req = ctx.resolve_pod(pod).req
        if req.is_empty:
            homes.append(f"{who} (no CUDA requirement)")
            continue
        reach = ctx.verdicts.reach(req, ctx.policy, exclude=ctx.upgrading)
        if reach.anywhere:
            homes.append(f"{who} ({len(reach.compatible)} other node(s) can run it)")
        else:
            homeless.append(who)
            homes.append(f"{who} (no other node can run {req.describe()})")
    listed = "; ".join(homes) if homes else "none"
    label = f"{UPGRADE_STATE_KEY}={state}"
    if state == UPGRADE_FAILED:
        return Finding(
            DRIVER_UPGRADE_FAILED,
            ref,
            f"the GPU Operator's driver upgrade failed on this node ({label}); GPU pods on "
            f"it: {listed}",
            node=name,
            fix=f"inspect the GPU Operator's driver pod on {name} and its logs "
            f"(kubectl get pods -A -o wide --field-selector spec.nodeName={name})",
        )
    fix = None
    if homeless:
        have, them = ("has", "it") if len(homeless) == 1 else ("have", "them")
        fix = (
            f"{names(homeless)} {have} no other compatible node and will stay Pending "
            f"until the upgrade ends: add a node whose driver runs {them}, or pause the "
            "upgrade for this node"
        )
    return Finding(
        DRIVER_UPGRADE_IN_PROGRESS,
        ref,
        f"driver upgrade in progress ({label}); GPU pods on it that will need another "
        f"home: {listed}",
        node=name,
        fix=fix,
    )
