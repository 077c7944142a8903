"""``recommend-driver``: the driver to install for one GPU, worked out the way a platform
engineer does it by hand, from the knowledge base alone, with the same rules ``plan-drivers``
applies to a pool.

Newest first, each branch the knowledge base knows is asked: is it still supported on the date,
can it be installed the way the nodes get their driver
(:func:`cudasched.compat.containers.install_option`: it drives the GPU, its kernel modules exist
for it, it has a release on the date, with the GPU Operator a driver container NVIDIA publishes
for the OS, and it builds on the kernel), and does it run every CUDA version asked under the
policy (:func:`cudasched.compat.engine.check` on the GPU with that release installed). Of the
branches that pass, the current driver's is kept when given (``current``), else they rank as the
planner ranks them (:func:`cudasched.compat.branches.rank`): a supported
long-term branch (LTSB) over newer short-lived ones (PB, NFB), unknown lifecycles last. The
answer is an installable version (the branch and its newest release on the date, with that
release's date), or none, with why each branch failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING

from cudasched.compat.branches import (
    BranchCuda,
    GpuTarget,
    Lifecycle,
    LifecycleState,
    ModuleType,
    OsTag,
    branch_cuda,
    gpu_target,
    kernel_breakages,
    known_branches,
    lifecycle,
    module_reason,
    module_type,
    rank,
    release_text,
    running,
)
from cudasched.compat.containers import (
    container_release,
    gpu_problem,
    image_os_tag,
    install_option,
    precompiled_problem,
    scope_problem,
)
from cudasched.compat.engine import check
from cudasched.nodes.facts import facts_from_parts
from cudasched.operations.reach import blocking
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import Policy, Requirement

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.drivers import KernelRelease
    from cudasched.knowledge.operator import OperatorVersion
    from cudasched.nodes.facts import NodeFacts
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
    """The answer of ``recommend-driver`` (``branch`` None: nothing satisfies everything)."""

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
    released: date | None = None
    installer: str = "host"
    os: OsTag | None = None
    keep: bool = False
    image_os: str | None = None  # the OS part of the image tag the operator release pulls
    arch: str | None = None  # the nodes' CPU architecture (given, or the GPU's only one)

    @property
    def found(self) -> bool:
        return self.branch is not None

    @property
    def image(self) -> str | None:
        """The driver container image tag (GPU Operator installs with a known OS)."""
        if self.installer != "operator" or self.os is None or self.version is None:
            return None
        tag = self.image_os or str(self.os)
        if self.use_precompiled:
            return f"nvcr.io/nvidia/driver:{self.branch}-<kernel>-{tag}"
        return f"nvcr.io/nvidia/driver:{self.version}-{tag}"

    def to_dict(self) -> dict[str, object]:
        """The JSON contract of ``recommend-driver -o json`` (keys are only ever added)."""
        lc = self.lifecycle
        return {
            "gpu": self.gpu,
            "branch": str(self.branch) if self.branch is not None else None,
            "version": str(self.version) if self.version is not None else None,
            "released": self.released.isoformat() if self.released is not None else None,
            "installer": self.installer,
            "os": str(self.os) if self.os is not None else None,
            "arch": self.arch,
            "image": self.image,
            "keep": self.keep,
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
    module: ModuleType
    lifecycle: Lifecycle
    caveats: tuple[str, ...]  # CUDA versions run only under a compatibility mode
    precompiled: bool = False
    keep: bool = False


def _words(message: str, release: DriverVersion) -> str:
    """An engine message about a stand-in release speaks of the branch instead."""
    shown = release_text(release)
    return message if shown == str(release) else message.replace(f"driver {release}", shown)


def _runs(
    kb: KnowledgeBase,
    facts: NodeFacts,
    release: DriverVersion,
    cudas: Sequence[CudaVersion],
    policy: Policy,
) -> tuple[str | None, list[str]]:
    """(why ``release`` does not run every CUDA asked, the compatibility caveats)."""
    on = running(facts, release, kb)
    caveats: list[str] = []
    for cuda in cudas:
        req = Requirement(
            cuda=cuda, ships_cuda_compat=policy is Policy.FORWARD_COMPAT, source="--cuda"
        )
        verdict = check(on, req, policy, kb)
        if not verdict.compatible:
            reasons = blocking(verdict) or verdict.reasons
            return (
                f"does not run CUDA {cuda} [{policy.value}]: "
                + "; ".join(dict.fromkeys(_words(r.message, release) for r in reasons)),
                caveats,
            )
        if verdict.codes[0] != "native":
            caveats.append(f"CUDA {cuda}: {_words(verdict.reasons[0].message, release)}")
    return None, caveats


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
    operator: OperatorVersion | None = None,
    current: DriverVersion | None = None,
    arch: str | None = None,
) -> Recommendation:
    """The driver for ``gpu`` (a product name or a compute capability) that runs every CUDA
    version of ``cudas`` under ``policy``, judged on ``today``; installed by GPU Operator
    ``operator``'s driver containers for ``os`` (built for CPU architecture ``arch``: given, or
    the only one servers with the GPU have), else on the host or its image. ``current``: the
    driver the nodes run now, kept when it satisfies everything. See the module docstring.
    Raises :class:`InputError` for a GPU the knowledge base does not know, or an architecture
    servers with it never have."""
    facts = facts_from_parts("recommend", gpu=gpu, driver=None, kb=kb)
    target = gpu_target(kb, facts)
    if target is None:
        raise kb.unknown_gpu(gpu, compute_too=True)
    arch = _arch_of(kb, gpu, arch)
    ask = _Ask(
        kb,
        facts,
        target,
        tuple(cudas),
        policy,
        today,
        os,
        kernel,
        precompiled,
        operator,
        current,
        arch,
    )
    passed, failed = _judge(ask)
    if not passed:
        return _none(target.name, ask.cudas, policy, failed, ask.installer, os)
    chosen = next((p for p in passed if p.keep), None) or max(
        passed, key=lambda p: rank(p.lifecycle, p.branch)
    )
    others = [p for p in passed if p is not chosen and p.branch > chosen.branch]
    cuda = branch_cuda(kb, facts, chosen.release)
    dated = kb.drivers.release_on(chosen.branch, today, at_most=chosen.release)
    released = dated.released if dated is not None and dated.version == chosen.release else None
    return Recommendation(
        gpu=target.name,
        branch=chosen.branch,
        version=chosen.release,
        module=chosen.module,
        use_precompiled=chosen.precompiled,
        cuda=cuda,
        lifecycle=chosen.lifecycle,
        reasons=tuple(dict.fromkeys(_reasons(ask, chosen, others, cuda))),
        warnings=tuple(dict.fromkeys(_warnings(ask, chosen, released))),
        rejected=_rejected(failed, chosen, others),
        asked=ask.cudas,
        released=released,
        installer=ask.installer,
        os=os,
        keep=chosen.keep,
        image_os=image_os_tag(os, operator) if os is not None else None,
        arch=arch,
    )


def _arch_of(kb: KnowledgeBase, gpu: str, arch: str | None) -> str | None:
    """The nodes' CPU architecture: as given, else the only one servers with the GPU have
    (GH200, GB200: arm64); an :class:`InputError` when the two disagree."""
    info = kb.gpu(gpu)
    implied = info.host_arch if info is not None else None
    if arch is not None and implied is not None and arch != implied:
        raise InputError(
            f"invalid --arch {arch!r}: {info.product if info else gpu} comes only in "
            f"{implied} servers"
        )
    return arch or implied


@dataclass(frozen=True, slots=True)
class _Ask:
    """One question to ``recommend``, as every step reads it: the GPU (its facts without a
    driver, and what it needs), the CUDA versions and policy asked, and how the driver is
    installed."""

    kb: KnowledgeBase
    facts: NodeFacts
    target: GpuTarget
    cudas: tuple[CudaVersion, ...]
    policy: Policy
    today: date
    os: OsTag | None
    kernel: KernelRelease | None
    precompiled: bool
    operator: OperatorVersion | None
    current: DriverVersion | None
    arch: str | None = None

    @property
    def installer(self) -> str:
        return "operator" if self.operator is not None else "host"


def _judge(ask: _Ask) -> tuple[list[_Passed], dict[int, str]]:
    """Every branch asked about: those that satisfy everything (the current driver's first, when
    it does), and why each other one does not."""
    passed: list[_Passed] = []
    failed: dict[int, str] = {}
    current = ask.current
    if current is not None:
        kept = _keeps(ask, current)
        if kept is not None:
            passed.append(kept)
    for branch in known_branches(ask.kb):
        if current is not None and branch == current.branch:
            continue
        verdict = _branch(ask, branch)
        if isinstance(verdict, str):
            failed[branch] = verdict
        else:
            passed.append(verdict)
    return passed, failed


def _keeps(ask: _Ask, current: DriverVersion) -> _Passed | None:
    """The current driver, when it runs every CUDA asked and its modules are known."""
    module = module_type(ask.kb, ask.target, current.branch)
    why, caveats = _runs(ask.kb, ask.facts, current, ask.cudas, ask.policy)
    if why is not None or not isinstance(module, ModuleType):
        return None
    lc = lifecycle(ask.kb, current.branch, ask.today)
    return _Passed(current.branch, current, module, lc, tuple(caveats), keep=True)


def _branch(ask: _Ask, branch: int) -> _Passed | str:
    """A branch that drives the GPU, is not ended, can be installed as asked and runs every
    CUDA asked; else why not."""
    kb = ask.kb
    never = gpu_problem(kb, ask.target, branch)
    if never is not None:
        return never
    lc = lifecycle(kb, branch, ask.today)
    if lc.state is LifecycleState.END_OF_LIFE:
        return f"end of life ({lc.eol})" if lc.eol != "past" else "end of life"
    found = install_option(
        kb,
        ask.target,
        branch,
        today=ask.today,
        os=ask.os,
        kernel=ask.kernel,
        operator=ask.operator,
        precompiled=ask.precompiled,
        products=ask.facts.products,
        arch=ask.arch,
    )
    if isinstance(found, str):
        return found
    why, caveats = _runs(kb, ask.facts, found.release, ask.cudas, ask.policy)
    if why is not None:
        return why
    return _Passed(branch, found.release, found.module, lc, tuple(caveats), found.precompiled)


def _reasons(ask: _Ask, chosen: _Passed, others: list[_Passed], cuda: BranchCuda) -> list[str]:
    """Why the chosen branch, in the order a reader asks: the choice and its lifecycle, what the
    GPU needs, the CUDA asked and reached, the kernel, the precompiled container."""
    target = ask.target
    reasons = _choice_reasons(ask, chosen, others)
    cap = target.arch.last_driver_branch
    if cap is not None:
        reasons.append(f"{target.arch.name} GPUs end at R{cap}")
    if target.first_driver is not None:
        reasons.append(f"{target.name} needs driver {target.first_driver} or newer")
    reasons.append(module_reason(ask.kb, target, chosen.module))
    reasons.extend(f"runs CUDA {c} [{ask.policy.value}]" for c in ask.cudas)
    if cuda.native is not None:
        reasons.append(f"{target.name} runs CUDA up to {cuda.native} natively on R{chosen.branch}")
    if ask.kernel is not None:
        floor = ask.kb.drivers.minimum_kernel(chosen.release)
        reasons.append(f"kernel {ask.kernel} meets the minimum {floor.kernel} for R{chosen.branch}")
    if ask.precompiled and chosen.precompiled:
        reasons.append(
            f"precompiled driver container: the NVIDIADriver version is the branch "
            f"({chosen.branch}); image driver:{chosen.branch}-{ask.kernel}-"
            f"{image_os_tag(ask.os, ask.operator) if ask.os is not None else ask.os}"
        )
    return reasons


def _choice_reasons(ask: _Ask, chosen: _Passed, others: list[_Passed]) -> list[str]:
    """Why this branch over the others that pass, and its lifecycle."""
    lc = chosen.lifecycle
    if chosen.keep:
        reasons = [f"keeps driver {ask.current}: it satisfies everything asked"]
    elif not others:
        reasons = [f"R{chosen.branch} is the newest branch that satisfies everything asked"]
    else:
        reasons = [
            f"R{chosen.branch} is a long-term support branch ({lc.describe()}); newer "
            + ", ".join(f"R{p.branch} ({p.lifecycle.describe()})" for p in others)
            + " would be short-lived"
        ]
    if lc.long_term and not others:
        reasons.append(f"R{chosen.branch} is a long-term support branch ({lc.describe()})")
    elif lc.state is LifecycleState.SUPPORTED and not others:
        reasons.append(f"R{chosen.branch}: {lc.describe()}")
    return reasons


def _warnings(ask: _Ask, chosen: _Passed, released: date | None) -> list[str]:
    """What to watch with the chosen branch: compatibility modes, its lifecycle, how current
    its release is, the kernel, how it is installed."""
    lc = chosen.lifecycle
    warnings = list(chosen.caveats)
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
    if not chosen.keep:
        where = (
            f"the newest R{chosen.branch} driver container NVIDIA publishes for {ask.os}"
            if ask.operator is not None
            else f"the newest R{chosen.branch} release cudasched's sources name"
        )
        when = f", out since {released.isoformat()}" if released is not None else ""
        warnings.append(f"{chosen.release} is {where}{when}; newer ones may exist")
    warnings.extend(_install_warnings(ask, chosen))
    return warnings


def _install_warnings(ask: _Ask, chosen: _Passed) -> list[str]:
    """The kernel (unchecked, or reported build failures), a host install, and a precompiled
    container asked for but not taken."""
    warnings: list[str] = []
    if ask.kernel is None:
        warnings.append("no --kernel: the kernel was not checked")
    else:
        warnings.extend(
            f"reported build failure: {broken.describe()}"
            for broken in kernel_breakages(ask.kb, chosen.release, ask.kernel, chosen.module)
        )
    if ask.operator is None and ask.os is not None:
        warnings.append(
            f"installed on the host or its image (--installer host): no driver container for "
            f"{ask.os} was checked"
        )
    if ask.precompiled and not chosen.precompiled:
        problem = (
            precompiled_problem(ask.kb, ask.os, ask.kernel, chosen.branch, ask.arch)
            if ask.operator is not None
            else "precompiled driver containers are the GPU Operator's (--installer operator)"
        )
        warnings.append(f"usePrecompiled: false: {problem}")
    if ask.operator is not None:
        scope = scope_problem(ask.kb, ask.facts.products, ask.facts.datacenter)
        if scope is not None:
            warnings.append(scope)
        if ask.arch is None and ask.os is not None:
            arm = container_release(ask.kb, chosen.branch, ask.os, ask.today, ask.operator, "arm64")
            if isinstance(arm, str):
                warnings.append(f"for amd64 nodes; on arm64 (--arch arm64): {arm}")
    return warnings


def _rejected(
    failed: dict[int, str], chosen: _Passed, others: list[_Passed]
) -> tuple[Rejected, ...]:
    """The newer branches not chosen, newest first: those that fail, and those that pass but
    rank lower."""
    rejected = [Rejected(b, w) for b, w in failed.items() if b > chosen.branch]
    rejected += [
        Rejected(
            p.branch,
            f"{p.lifecycle.describe()}: a long-term support branch is preferred"
            if p.lifecycle.state is LifecycleState.SUPPORTED
            else f"{p.lifecycle.describe()}: a supported branch is preferred",
        )
        for p in others
    ]
    rejected.sort(key=lambda r: -r.branch)
    return tuple(rejected)


def _none(
    name: str,
    asked: tuple[CudaVersion, ...],
    policy: Policy,
    failed: dict[int, str],
    installer: str,
    os: OsTag | None,
) -> Recommendation:
    """No branch satisfies everything: why, with the branches' reasons."""
    summary = f"no driver branch drives {name} and runs " + (
        ", ".join(f"CUDA {c}" for c in asked) if asked else "on it"
    )
    if asked:
        summary += f" [{policy.value}]"
    if installer == "operator":
        shown = f"{os.id}{os.full_version}" if os is not None else "the OS"
        summary += f" with a GPU Operator driver container for {shown}"
    drivable = [b for b in failed if "end at R" not in failed[b] and "end of life" not in failed[b]]
    detail = [f"R{b}: {failed[b]}" for b in drivable[:1]]
    if installer == "operator" and any("driver container" in w for w in failed.values()):
        detail.append(
            "a driver installed on the host or in the node image is not limited to NVIDIA's "
            "driver containers: --installer host"
        )
    reported = {b: w for b, w in failed.items() if not w.startswith(f"R{b} predates ")}
    return Recommendation(
        gpu=name,
        branch=None,
        version=None,
        module=None,
        use_precompiled=False,
        cuda=None,
        lifecycle=None,
        reasons=(summary, *detail),
        rejected=tuple(Rejected(b, w) for b, w in reported.items()),
        asked=asked,
        installer=installer,
        os=os,
    )
