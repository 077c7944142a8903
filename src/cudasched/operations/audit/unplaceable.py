"""How to give a requirement that no node can run a home, and how findings say so."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from cudasched.compat import engine
from cudasched.compat.drivermanager import driver_change, driver_manager
from cudasched.compat.verdict import REQUIRE_CUDA_UNMET
from cudasched.operations.audit.context import AuditContext, wants
from cudasched.operations.reach import Reach
from cudasched.vocab import labels as L
from cudasched.vocab.objects import labels_of, name_of
from cudasched.vocab.requirecuda import DISABLE_ENV
from cudasched.vocab.requirements import Policy, Requirement

if TYPE_CHECKING:
    from cudasched.vocab.versions import DriverVersion


__all__ = ["unplaceable_fix", "unplaceable_message"]


def unplaceable_fix(ctx: AuditContext, req: Requirement, reach: Reach) -> str | None:
    """How to give a requirement no node can run a home, from what the nearest node lacks."""
    steps: list[str] = []
    cuda = engine.effective_cuda(req)
    nearest = reach.nearest
    # A newer driver helps only when the driver is all the nearest node lacks (for the
    # toolkit, the image's NVIDIA_REQUIRE_CUDA or the GPU product); a Kepler GPU, say,
    # cannot take a newer branch at all.
    if nearest is not None and nearest.driver is not None:
        steps.append(_driver_step(ctx, nearest.node, nearest.alike, nearest.driver))
    # The container toolkit's gate holds under every policy: say what turning it off gives.
    if req.gate is not None and nearest is not None and REQUIRE_CUDA_UNMET in nearest.codes:
        ungated = ctx.verdicts.reach(replace(req, gate=None), ctx.policy)
        if ungated.anywhere:
            steps.append(
                f"set {DISABLE_ENV}=true on its container (the container toolkit then skips "
                f"the image's NVIDIA_REQUIRE_CUDA), which {len(ungated.compatible)} node(s) "
                f"would run under {ungated.policy.value}"
            )
    if reach.policy is Policy.STRICT and cuda is not None:
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
    newest = ctx.fleet.drivers.newest_cuda
    if cuda is not None and newest is not None and newest < cuda:
        steps.append(f"use an image built for CUDA {newest} or older")
    if nearest is not None and any("architecture" in lack for lack in nearest.lacks):
        steps.append("run it on GPUs its CUDA and kernels support")
    return "; or ".join(steps) or None


def _driver_step(ctx: AuditContext, node: str, alike: int, need: DriverVersion) -> str:
    """The driver change the nearest node needs, said the way its driver is installed (the
    decision ``plan-drivers`` makes per pool: :func:`cudasched.compat.drivermanager.driver_change`):
    the GPU Operator's nodes upgrade, a managed node group moves to a node image with the
    driver, a host-installed driver is installed on the hosts or their image."""
    who = f"{node}{' and the nodes like it' if alike else ''}"
    pool = ctx.pools.get(node)
    if pool is not None:
        manager, os = pool.manager, str(pool.os) if pool.os is not None else None
    else:
        obj = next((n for n in ctx.snapshot.nodes if name_of(n) == node), None)
        manager, os = driver_manager(ctx.kb, labels_of(obj) if obj is not None else {}), None
    newest = ctx.kb.drivers.latest_release(need.branch)
    change = driver_change(
        ctx.kb,
        manager,
        need.branch,
        need,
        newest if newest is not None and newest > need else None,
        f"upgrade the driver of {who} to {need} or newer (R{need.branch}+)",
        os,
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
