"""``recommend-driver``: the driver branch to install for one GPU, worked out the way a platform
engineer does it by hand, from the knowledge base alone.

Newest first, each branch the knowledge base knows is asked (:mod:`cudasched.compat.branches`):
does it
drive the GPU (first driver, architecture ceiling), are its kernel modules available for it, is
it still supported on the date, does it build on the kernel, and does it run every CUDA version
asked under the policy (:func:`cudasched.compat.engine.check` on the GPU with the branch's newest
known release). Of the branches that pass, a supported long-term branch (LTSB) wins over newer
short-lived ones (PB, NFB), and the answer says so; a branch whose lifecycle is unknown (R470,
Kepler's last) comes only after every supported one. Nothing passes: no branch, and why each
failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING

from cudasched.compat.branches import (
    BranchCuda,
    Lifecycle,
    LifecycleState,
    ModuleType,
    OsTag,
    branch_cuda,
    drive_problem,
    gpu_target,
    judged_release,
    kernel_breakages,
    kernel_problem,
    known_branches,
    lifecycle,
    module_reason,
    module_type,
    precompiled_problem,
    release_for,
    release_text,
    running,
)
from cudasched.compat.engine import check
from cudasched.nodes.facts import facts_from_parts
from cudasched.operations.reach import blocking
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import Policy, Requirement

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.drivers import KernelRelease
    from cudasched.vocab.versions import CudaVersion, DriverVersion

__all__ = ["Recommendation", "Rejected", "recommend"]


@dataclass(frozen=True, slots=True)
class Rejected:
    """A branch that was not chosen, and why."""

    branch: int
    why: str

    def to_dict(self) -> dict[str, object]:
        return {"branch": str(self.branch), "why": self.why}


@dataclass(frozen=True, slots=True)
class Recommendation:
    """The answer of ``recommend-driver`` (``branch`` None: no branch satisfies everything)."""

    gpu: str
    branch: int | None
    version: DriverVersion | None
    module: ModuleType | None
    use_precompiled: bool
    cuda: BranchCuda | None
    lifecycle: Lifecycle | None
    reasons: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    rejected: tuple[Rejected, ...] = ()
    asked: tuple[CudaVersion, ...] = field(default=())

    @property
    def found(self) -> bool:
        return self.branch is not None

    def to_dict(self) -> dict[str, object]:
        """The JSON contract of ``recommend-driver -o json`` (keys are only ever added)."""
        lc = self.lifecycle
        return {
            "gpu": self.gpu,
            "branch": str(self.branch) if self.branch is not None else None,
            "version": str(self.version) if self.version is not None else None,
            "kernelModuleType": self.module.value if self.module is not None else None,
            "usePrecompiled": self.use_precompiled,
            "cuda": (str(self.cuda.native) if self.cuda is not None and self.cuda.native else None),
            "cudaByPolicy": self.cuda.to_dict() if self.cuda is not None else None,
            "lifecycle": lc.type if lc is not None else None,
            "eol": lc.eol if lc is not None else None,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
            "rejected": [r.to_dict() for r in self.rejected],
        }


@dataclass(frozen=True, slots=True)
class _Passed:
    branch: int
    release: DriverVersion
    known: bool  # the release is a named one, not a stand-in
    module: ModuleType
    lifecycle: Lifecycle
    caveats: tuple[str, ...]  # CUDA versions run only under a compatibility mode


def _words(message: str, release: DriverVersion) -> str:
    """An engine message about a stand-in release speaks of the branch instead."""
    shown = release_text(release)
    return message if shown == str(release) else message.replace(f"driver {release}", shown)


def _rank(p: _Passed) -> tuple[int, int]:
    """Supported LTSB first, then other supported branches, then unknown lifecycles; newest
    first within each."""
    lc = p.lifecycle
    tier = (0 if lc.long_term else 1) if lc.state is LifecycleState.SUPPORTED else 2
    return (tier, -p.branch)


def recommend(
    kb: KnowledgeBase,
    gpu: str,
    cudas: Sequence[CudaVersion] = (),
    *,
    policy: Policy = Policy.STRICT,
    today: date,
    os: OsTag | None = None,
    kernel: KernelRelease | None = None,
    precompiled: bool = False,
) -> Recommendation:
    """The driver branch for ``gpu`` (a product name or a compute capability) that runs every
    CUDA version of ``cudas`` under ``policy``, judged on ``today``; see the module docstring.
    Raises :class:`InputError` for a GPU the knowledge base does not know."""
    facts = facts_from_parts("recommend", gpu=gpu, driver=None, kb=kb)
    target = gpu_target(kb, facts)
    if target is None:
        raise InputError(
            f"unknown GPU {gpu!r}: expected a product name the knowledge base knows "
            "(A100, 'NVIDIA H100 80GB HBM3', Tesla-K80) or a compute capability (8.6)"
        )
    name = target.name
    passed: list[_Passed] = []
    failed: dict[int, str] = {}
    for branch in known_branches(kb):
        release = judged_release(kb, branch, target)
        why = drive_problem(target, release)
        module = module_type(kb, target, branch)
        lc = lifecycle(kb, branch, today)
        if why is None and not isinstance(module, ModuleType):
            why = module
        if why is None and lc.state is LifecycleState.END_OF_LIFE:
            why = f"end of life ({lc.eol})" if lc.eol != "past" else "end of life"
        if why is None and kernel is not None:
            why = kernel_problem(kb, release, kernel)
        caveats: list[str] = []
        if why is None:
            on = running(facts, release, kb)
            for cuda in cudas:
                req = Requirement(
                    cuda=cuda,
                    ships_cuda_compat=policy is Policy.FORWARD_COMPAT,
                    source="--cuda",
                )
                verdict = check(on, req, policy, kb)
                if not verdict.compatible:
                    reasons = blocking(verdict) or verdict.reasons
                    why = f"does not run CUDA {cuda} [{policy.value}]: " + "; ".join(
                        dict.fromkeys(_words(r.message, release) for r in reasons)
                    )
                    break
                if verdict.codes[0] != "native":
                    caveats.append(f"CUDA {cuda}: {_words(verdict.reasons[0].message, release)}")
        if why is not None:
            failed[branch] = why
            continue
        assert isinstance(module, ModuleType)
        known = release_for(kb, branch) is not None
        passed.append(_Passed(branch, release, known, module, lc, tuple(caveats)))

    asked = tuple(cudas)
    if not passed:
        drivable = [b for b in failed if "end at R" not in failed[b]]
        summary = f"no driver branch drives {name} and runs " + (
            ", ".join(f"CUDA {c}" for c in asked) if asked else "on it"
        )
        if asked:
            summary += f" [{policy.value}]"
        detail = [f"R{b}: {failed[b]}" for b in drivable[:1]]
        shown = {b: w for b, w in failed.items() if not w.startswith(f"R{b} predates ")}
        return Recommendation(
            gpu=name,
            branch=None,
            version=None,
            module=None,
            use_precompiled=False,
            cuda=None,
            lifecycle=None,
            reasons=(summary, *detail),
            rejected=tuple(Rejected(b, w) for b, w in shown.items()),
            asked=asked,
        )

    chosen = min(passed, key=_rank)
    reasons: list[str] = []
    warnings: list[str] = []
    lc = chosen.lifecycle
    newest = passed[0]
    if chosen is newest:
        reasons.append(f"R{chosen.branch} is the newest branch that satisfies everything asked")
    else:
        newer = [p for p in passed if p.branch > chosen.branch]
        reasons.append(
            f"R{chosen.branch} is a long-term support branch ({lc.describe()}); newer "
            + ", ".join(f"R{p.branch} ({p.lifecycle.describe()})" for p in newer)
            + " would be short-lived"
        )
    if lc.long_term and chosen is newest:
        reasons.append(f"R{chosen.branch} is a long-term support branch ({lc.describe()})")
    elif lc.state is LifecycleState.SUPPORTED and chosen is newest:
        reasons.append(f"R{chosen.branch}: {lc.describe()}")
    cap = target.arch.last_driver_branch
    if cap is not None:
        reasons.append(f"{target.arch.name} GPUs end at R{cap}")
    if target.first_driver is not None:
        reasons.append(f"{name} needs driver {target.first_driver} or newer")
    reasons.append(module_reason(kb, target, chosen.module))
    cuda = branch_cuda(kb, facts, chosen.release)
    for asked_cuda in asked:
        reasons.append(f"runs CUDA {asked_cuda} [{policy.value}]")
    if cuda.native is not None:
        reasons.append(f"{name} runs CUDA up to {cuda.native} natively on R{chosen.branch}")
    warnings.extend(chosen.caveats)

    if lc.state is LifecycleState.UNKNOWN:
        warnings.append(
            f"R{chosen.branch}'s lifecycle is not in the knowledge base"
            + (f" ({lc.note})" if lc.note else "")
        )
    elif lc.alternatives:
        warnings.append(
            f"R{chosen.branch}'s end of life is disputed: sources give "
            f"{' and '.join(lc.alternatives)}; judged by the earlier, {lc.eol}"
        )
    version = chosen.release if chosen.known else None
    if version is None:
        warnings.append(
            f"no release of R{chosen.branch} is in the knowledge base: take the newest "
            f"R{chosen.branch} release from NVIDIA's data-center driver documentation"
        )
    else:
        warnings.append(
            f"{version} is the newest R{chosen.branch} release cudasched's sources name; newer "
            "ones may exist"
        )
    if kernel is None:
        warnings.append("no --kernel: the kernel was not checked")
    else:
        floor = kb.drivers.minimum_kernel(chosen.release)
        reasons.append(f"kernel {kernel} meets the minimum {floor.kernel} for R{chosen.branch}")
        for broken in kernel_breakages(kb, chosen.release, kernel, chosen.module):
            warnings.append(f"reported build failure: {broken.describe()}")

    use_precompiled = False
    if precompiled:
        problem = precompiled_problem(kb, os, kernel)
        if problem is None:
            use_precompiled = True
            reasons.append(
                f"precompiled driver container: the NVIDIADriver version is the branch "
                f"({chosen.branch}); image driver:{chosen.branch}-{kernel}-{os}"
            )
        else:
            warnings.append(f"usePrecompiled: false: {problem}")

    rejected = [Rejected(b, w) for b, w in failed.items() if b > chosen.branch]
    rejected += [
        Rejected(
            p.branch,
            f"{p.lifecycle.describe()}: a long-term support branch is preferred"
            if p.lifecycle.state is LifecycleState.SUPPORTED
            else f"{p.lifecycle.describe()}: a supported branch is preferred",
        )
        for p in passed
        if p.branch > chosen.branch
    ]
    rejected.sort(key=lambda r: -r.branch)
    return Recommendation(
        gpu=name,
        branch=chosen.branch,
        version=version,
        module=chosen.module,
        use_precompiled=use_precompiled,
        cuda=cuda,
        lifecycle=lc,
        reasons=tuple(dict.fromkeys(reasons)),
        warnings=tuple(dict.fromkeys(warnings)),
        rejected=tuple(rejected),
        asked=asked,
    )
