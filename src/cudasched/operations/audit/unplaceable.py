"""How to give a requirement that no node can run a home, and how findings say so."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cudasched.compat import engine
from cudasched.compat.branches import branch_floor, installable_branch
from cudasched.compat.drivermanager import driver_change, driver_manager
from cudasched.compat.verdict import REQUIRE_CUDA_UNMET
from cudasched.operations.audit.context import AuditContext, wants
from cudasched.operations.fit import usable
from cudasched.operations.reach import Reach
from cudasched.vocab import labels as L
from cudasched.vocab.objects import labels_of, name_of
from cudasched.vocab.requirecuda import DISABLE_ENV
from cudasched.vocab.requirements import Policy, Requirement

if TYPE_CHECKING:
    from cudasched.vocab.versions import DriverVersion


__all__ = ["driver_step", "unplaceable_fix", "unplaceable_message"]


def _barred(ctx: AuditContext, pod: Mapping[str, Any] | None) -> dict[str, str]:
    """The GPU nodes the workload's own node selection, tolerations and GPU count rule out,
    with why (nothing without the pod it runs as)."""
    spec = pod.get("spec") if pod is not None else None
    if not isinstance(spec, Mapping):
        return {}
    return {n: why for n, why in usable(spec, ctx.snapshot.nodes).items() if why is not None}


def unplaceable_fix(
    ctx: AuditContext, req: Requirement, reach: Reach, pod: Mapping[str, Any] | None = None
) -> str | None:
    """How to give a requirement no node can run a home, from what the nearest node it may use
    lacks (``pod``: the pod it runs as, whose own node selection, tolerations and GPU count
    decide which nodes a fix may name)."""
    steps: list[str] = []
    cuda = engine.effective_cuda(req)
    barred = _barred(ctx, pod)
    if barred:
        reach = ctx.verdicts.reach(req, ctx.policy, exclude=frozenset(barred))
        if reach.nearest is None and not reach.anywhere:
            steps.extend(_no_node_fits(ctx, barred))
    nearest = reach.nearest
    # A newer driver helps only when the driver is all the nearest node lacks (for the
    # toolkit, the image's NVIDIA_REQUIRE_CUDA or the GPU product); a Kepler GPU, say,
    # cannot take a newer branch at all.
    if nearest is not None and nearest.driver is not None:
        steps.append(driver_step(ctx, nearest.node, nearest.alike, nearest.driver))
    steps.extend(_relaxed_steps(ctx, req, reach))
    newest = ctx.fleet.drivers.newest_cuda
    if cuda is not None and newest is not None and newest < cuda:
        steps.append(f"use an image built for CUDA {newest} or older")
    if nearest is not None and any("architecture" in lack for lack in nearest.lacks):
        steps.append("run it on GPUs its CUDA and kernels support")
    return "; or ".join(steps) or None


def _no_node_fits(ctx: AuditContext, barred: Mapping[str, str]) -> list[str]:
    """When the workload's own node selection, tolerations or GPU count leave it no GPU node:
    say so, with the first GPU node's reason."""
    gpu_nodes = [n for n in ctx.pools if n in barred]
    if not gpu_nodes:
        return []
    first = gpu_nodes[0]
    return [
        f"no GPU node fits its own node selection, tolerations and GPU count (on "
        f"{first}: {barred[first]}): change them, or add nodes that fit"
    ]


def _relaxed_steps(ctx: AuditContext, req: Requirement, reach: Reach) -> list[str]:
    """What turning off the image's NVIDIA_REQUIRE_CUDA gate or allowing minor-version
    compatibility would give (the gate holds under every policy)."""
    steps: list[str] = []
    nearest = reach.nearest
    if req.gate is not None and nearest is not None and REQUIRE_CUDA_UNMET in nearest.codes:
        ungated = ctx.verdicts.reach(replace(req, gate=None), ctx.policy)
        if ungated.anywhere:
            steps.append(
                f"set {DISABLE_ENV}=true on its container (the container toolkit then skips "
                f"the image's NVIDIA_REQUIRE_CUDA), which {len(ungated.compatible)} node(s) "
                f"would run under {ungated.policy.value}"
            )
    if reach.policy is not Policy.STRICT or engine.effective_cuda(req) is None:
        return steps
    relaxed_req = replace(req, policy=Policy.MINOR_COMPAT)
    relaxed = ctx.verdicts.reach(relaxed_req, ctx.policy)
    compat = f"allow minor-version compatibility (annotation {L.ANN_POLICY}: minor-compat)"
    if relaxed.anywhere:
        steps.append(f"{compat}, which {len(relaxed.compatible)} node(s) would satisfy")
    elif req.gate is not None:
        ungated = ctx.verdicts.reach(replace(relaxed_req, gate=None), ctx.policy)
        if ungated.anywhere:
            steps.append(
                f"{compat} and set {DISABLE_ENV}=true on its container (the image's "
                "NVIDIA_REQUIRE_CUDA refuses older drivers under every policy), which "
                f"{len(ungated.compatible)} node(s) would satisfy"
            )
    return steps


def driver_step(ctx: AuditContext, node: str, alike: int, need: DriverVersion) -> str:
    """The driver change a node needs to run a workload that needs ``need``, said the way its
    driver is installed (the decision ``plan-drivers`` makes per pool:
    :func:`cudasched.compat.drivermanager.driver_change`) and naming the branch to install by
    the rule the plan chooses by (:func:`cudasched.compat.branches.installable_branch`): the
    GPU Operator's nodes upgrade, a managed node group moves through its cloud's knob, a
    host-installed driver is installed on the hosts or their image."""
    who = f"{node}{' and the nodes like it' if alike else ''}"
    pool = ctx.pools.get(node)
    if pool is not None:
        manager, os = pool.manager, str(pool.os) if pool.os is not None else None
    else:
        obj = next((n for n in ctx.snapshot.nodes if name_of(n) == node), None)
        manager, os = driver_manager(ctx.kb, labels_of(obj) if obj is not None else {}), None
    choice = installable_branch(ctx.kb, pool.target if pool else None, need, ctx.today)
    if choice is None:
        floor = branch_floor(ctx.kb, need.branch, need) or need
        text = f"upgrade the driver of {who} to R{need.branch} >= {floor}"
        change = driver_change(ctx.kb, manager, need.branch, floor, None, text, os)
    else:
        text = f"upgrade the driver of {who}: {choice.describe()}"
        change = driver_change(
            ctx.kb, manager, choice.branch, choice.floor, choice.newest, text, os
        )
    return change if manager.operator else f"for {who}: {change}"


def unplaceable_message(
    ctx: AuditContext, req: Requirement, reach: Reach, subject: str = ""
) -> str:
    drivers = ctx.fleet.drivers.describe()
    text = f"no node can run {subject}{wants(req, reach.policy)}; {drivers}"
    if reach.nearest is not None:
        return f"{text}; {reach.nearest.describe()}"
    return f"{text}; the cluster has no node with GPU facts"
