"""What would fix a blocking reason: the one line a table shows next to ``driver-too-old``
(``needs driver >= 550.54.14 (R550)``), derived from the same knowledge base facts the engine
judged with, so the advice can never disagree with the verdict.

Every driver fix, here and in the audit (:func:`cudasched.operations.reach.driver_fix`), is
decided by :func:`driver_remedy`, which knows the GPU's first driver and its architecture's last
branch: a driver newer than the last branch (Kepler ends at R470; Maxwell, Pascal and Volta at
R580) is never offered; instead it says that no driver can, and what can (an image built for a
CUDA the last branch runs, or another GPU). A fix names the minimum the workload needs and the
branch to install for it, chosen by :func:`cudasched.compat.branches.installable_branch` (the
rule ``plan-drivers`` and ``recommend-driver`` choose by: a supported branch with a release out,
long-term first): Table 3 minimums of ended branches (570.26) are never the advice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import date
from typing import TYPE_CHECKING

from cudasched.compat import engine as E
from cudasched.compat.branches import BranchChoice, gpu_target, installable_branch
from cudasched.compat.engine import effective_cuda, resolve_policy
from cudasched.compat.verdict import (
    ARCH_DROPPED,
    ARCH_TOO_NEW,
    COMPAT_BRANCH_UNSUPPORTED,
    COMPUTE_CAPABILITY_TOO_LOW,
    DRIVER_BRANCH_UNSUPPORTED_GPU,
    DRIVER_TOO_OLD,
    FRAMEWORK_ARCH_UNSUPPORTED,
    NO_FORWARD_COMPAT_ON_GEFORCE,
    NO_GPU_FACTS,
    REQUIRE_CUDA_UNMET,
    UNKNOWN_ARCH,
    UNKNOWN_COMPUTE_CAPABILITY,
    UNKNOWN_DATACENTER,
    UNKNOWN_DRIVER,
    UNKNOWN_TOOLKIT,
    Reason,
    VerdictStatus,
)
from cudasched.nodes.facts import NodeFacts
from cudasched.vocab.requirements import Policy, Requirement, ToolkitMode

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.vocab.versions import DriverVersion

__all__ = ["DriverRemedy", "driver_remedy", "fix_for", "with_fixes"]


@dataclass(frozen=True, slots=True)
class DriverRemedy:
    """What a newer driver does for a GPU that needs ``needed``: ``driver`` is the oldest that
    would do (``None``: none can drive the GPU, ``text`` says why and what can)."""

    driver: DriverVersion | None
    text: str
    choice: BranchChoice | None = None  # the branch to install for it


def driver_remedy(
    facts: NodeFacts, needed: DriverVersion, kb: KnowledgeBase, today: date | None = None
) -> DriverRemedy:
    """The driver fix for a node whose workload needs at least ``needed``: ``needed`` raised to
    the GPU's first driver, unless that is past the last branch of the GPU's architecture, with
    the branch to install for it on ``today`` (default: the knowledge base's date)."""
    need = max(needed, facts.first_driver) if facts.first_driver is not None else needed
    arch = kb.arch(facts.compute) if facts.compute is not None else None
    cap = arch.last_driver_branch if arch is not None else None
    if arch is None or cap is None or need.branch <= cap:
        choice = installable_branch(kb, gpu_target(kb, facts), need, today)
        if choice is None:
            return DriverRemedy(need, f"needs driver >= {need} (R{need.branch})")
        return DriverRemedy(need, f"needs driver >= {need}: {choice.describe()}", choice)
    newest = kb.drivers.latest_release(cap)
    runs = kb.max_cuda_for_driver(newest) if newest is not None else None
    if runs is not None and arch.last_cuda is not None:
        runs = min(runs, arch.last_cuda.release)  # and a CUDA still built for the GPU
    image = (
        f"an image built for CUDA {runs} or older" if runs else "an image built for an older CUDA"
    )
    return DriverRemedy(
        None,
        f"no driver can: {arch.name} GPUs end at R{cap} and this needs R{need.branch} "
        f"(driver >= {need}); use {image}, or another GPU",
    )


def _driver_fix(req: Requirement, pol: Policy, facts: NodeFacts, kb: KnowledgeBase) -> str:
    cuda = effective_cuda(req)
    if cuda is None:
        return ""
    need = kb.min_driver(cuda)
    if need is not None:
        remedy = driver_remedy(facts, need, kb)
        if remedy.driver is None:
            return remedy.text
    parts = [remedy.text] if need is not None else []
    if pol in (Policy.MINOR_COMPAT, Policy.FORWARD_COMPAT):
        floor = kb.minor_compat_floor(cuda.major)
        if floor is not None and (need is None or floor < need):
            parts.append(f">= {floor} with minor-version compatibility")
    floor = kb.minor_compat_floor(cuda.major)
    if (
        pol is Policy.STRICT
        and floor is not None
        and facts.driver is not None
        and (facts.driver >= floor)
    ):  # this very driver may run it under minor-version compatibility: ask the engine
        relaxed = replace(req, policy=Policy.MINOR_COMPAT)
        verdict = E.check(facts, relaxed, Policy.MINOR_COMPAT, kb)
        blocking = {r.code for r in verdict.reasons if r.blocking}
        if verdict.status is not VerdictStatus.INCOMPATIBLE:
            parts.append("or policy minor-compat")
        elif blocking == {REQUIRE_CUDA_UNMET}:  # the image's own gate is all that is left
            parts.append("or policy minor-compat with NVIDIA_DISABLE_REQUIRE=true")
    return ", ".join(parts) if parts else f"no driver is known to run CUDA {cuda} natively"


def fix_for(
    reason: Reason, facts: NodeFacts, req: Requirement, policy: Policy | str, kb: KnowledgeBase
) -> str:
    """One line on what would let the workload run on the node despite ``reason`` (``""``
    for informational reasons and where nothing better than the message can be said)."""
    if not reason.blocking:
        return ""
    pol = resolve_policy(req, policy)
    code = reason.code
    if code == DRIVER_TOO_OLD:
        return _driver_fix(req, pol, facts, kb)
    if code in (ARCH_TOO_NEW, ARCH_DROPPED, DRIVER_BRANCH_UNSUPPORTED_GPU):
        return _gpu_fix(code, facts, kb)
    if code == REQUIRE_CUDA_UNMET:
        floor = req.gate.cuda_floor() if req.gate is not None else None
        driver = kb.driver_floor(floor) if floor is not None else None
        what = driver_remedy(facts, driver, kb).text if driver is not None else ""
        return ", or ".join(p for p in (what, "NVIDIA_DISABLE_REQUIRE=true on the container") if p)
    if code in (NO_FORWARD_COMPAT_ON_GEFORCE, COMPAT_BRANCH_UNSUPPORTED) and req.compat:
        return _compat_fix(code, req)
    if code == COMPUTE_CAPABILITY_TOO_LOW and req.min_compute is not None:
        return f"needs a GPU with compute capability >= {req.min_compute}"
    if code == FRAMEWORK_ARCH_UNSUPPORTED and facts.compute is not None:
        return f"needs a build with kernels for compute capability {facts.compute}"
    cuda = effective_cuda(req)
    if code == UNKNOWN_TOOLKIT and cuda is not None:
        return f"NVIDIA's minimum driver for CUDA {cuda} is not known: see cudasched knowledge cuda"
    return _FACT_FIXES.get(code, "")


# What to do about a reason that is about the node's facts or the GPU, whatever the numbers.
_RELABEL = "label the node's GPU facts: run the cudasched agent (or GFD) there"
_FACT_FIXES = {
    NO_FORWARD_COMPAT_ON_GEFORCE: (
        "needs a data-center GPU, or a driver that runs the CUDA natively"
    ),
    NO_GPU_FACTS: "label the node: run the cudasched agent or GPU Feature Discovery there",
    UNKNOWN_DRIVER: _RELABEL,
    UNKNOWN_COMPUTE_CAPABILITY: _RELABEL,
    UNKNOWN_DATACENTER: _RELABEL,
    UNKNOWN_ARCH: "the knowledge base does not know this GPU: see cudasched knowledge gpus",
}


def _compat_fix(code: str, req: Requirement) -> str:
    """Where the toolkit would leave the image's compat library unused, or where it works."""
    lib = req.compat
    assert lib is not None
    if req.toolkit is ToolkitMode.CDI and lib.branches is not None:
        unused = f"a driver >= {lib.driver} or a branch its note does not list"
    else:
        unused = f"a driver of R{lib.driver.major} or newer"
    where = "a data-center GPU" if code == NO_FORWARD_COMPAT_ON_GEFORCE else "a branch it supports"
    return f"needs {unused} (the toolkit then leaves the compat library unused), or {where}"


def _gpu_fix(code: str, facts: NodeFacts, kb: KnowledgeBase) -> str:
    """What would let the GPU run it: an image built for its architecture, a newer GPU, a
    driver that drives it."""
    arch = kb.arch(facts.compute) if facts.compute is not None else None
    if code == ARCH_TOO_NEW:
        if arch is not None and arch.first_cuda is not None:
            return f"needs an image built with CUDA >= {arch.first_cuda.release} (or with PTX)"
        return "needs an image that carries PTX for this GPU"
    if code == ARCH_DROPPED:
        if arch is not None and arch.last_cuda is not None:
            return f"needs an image built with CUDA <= {arch.last_cuda.release}, or a newer GPU"
        return "needs a newer GPU"
    if (
        facts.first_driver is not None
        and facts.driver is not None
        and (facts.driver < facts.first_driver)
    ):
        return driver_remedy(facts, facts.first_driver, kb).text
    if arch is not None and arch.last_driver_branch is not None:
        return f"needs driver branch R{arch.last_driver_branch} or older"
    return ""


def with_fixes(
    reasons: Iterable[Reason],
    facts: NodeFacts,
    req: Requirement,
    policy: Policy | str,
    kb: KnowledgeBase,
) -> tuple[Reason, ...]:
    """``reasons`` with their fixes filled in."""
    out = []
    for reason in reasons:
        fix = reason.fix or fix_for(reason, facts, req, policy, kb)
        out.append(replace(reason, fix=fix) if fix != reason.fix else reason)
    return tuple(out)
