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
planner ranks them (:func:`cudasched.operations.drivers.planoptions.rank`): a supported
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
    release_text,
    running,
)
from cudasched.compat.containers import (
    gpu_problem,
    image_os_tag,
    install_option,
    precompiled_problem,
)
from cudasched.compat.engine import check
from cudasched.nodes.facts import facts_from_parts
from cudasched.operations.drivers.planoptions import rank
from cudasched.operations.reach import blocking
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
) -> Recommendation:
    """The driver for ``gpu`` (a product name or a compute capability) that runs every CUDA
    version of ``cudas`` under ``policy``, judged on ``today``; installed by GPU Operator
    ``operator``'s driver containers for ``os``, else on the host or its image. ``current``:
    the driver the nodes run now, kept when it satisfies everything. See the module docstring.
    Raises :class:`InputError` for a GPU the knowledge base does not know."""
    facts = facts_from_parts("recommend", gpu=gpu, driver=None, kb=kb)
    target = gpu_target(kb, facts)
    if target is None:
        raise kb.unknown_gpu(gpu, compute_too=True)
    name = target.name
    installer = "operator" if operator is not None else "host"
    passed: list[_Passed] = []
    failed: dict[int, str] = {}
    if current is not None:
        module = module_type(kb, target, current.branch)
        why, caveats = _runs(kb, facts, current, cudas, policy)
        if why is None and isinstance(module, ModuleType):
            lc = lifecycle(kb, current.branch, today)
            passed.append(_Passed(current.branch, current, module, lc, tuple(caveats), keep=True))
    for branch in known_branches(kb):
        if current is not None and branch == current.branch:
            continue
        never = gpu_problem(kb, target, branch)
        if never is not None:
            failed[branch] = never
            continue
        lc = lifecycle(kb, branch, today)
        if lc.state is LifecycleState.END_OF_LIFE:
            failed[branch] = f"end of life ({lc.eol})" if lc.eol != "past" else "end of life"
            continue
        found = install_option(
            kb,
            target,
            branch,
            today=today,
            os=os,
            kernel=kernel,
            operator=operator,
            precompiled=precompiled,
            products=facts.products,
        )
        if isinstance(found, str):
            failed[branch] = found
            continue
        why, caveats = _runs(kb, facts, found.release, cudas, policy)
        if why is not None:
            failed[branch] = why
            continue
        passed.append(
            _Passed(branch, found.release, found.module, lc, tuple(caveats), found.precompiled)
        )

    asked = tuple(cudas)
    if not passed:
        return _none(name, asked, policy, failed, installer, os)

    keep = next((p for p in passed if p.keep), None)
    chosen = keep or max(passed, key=lambda p: rank(p.lifecycle, p.branch))
    reasons: list[str] = []
    warnings: list[str] = []
    lc = chosen.lifecycle
    others = [p for p in passed if p is not chosen and p.branch > chosen.branch]
    if chosen.keep:
        reasons.append(f"keeps driver {current}: it satisfies everything asked")
    elif not others:
        reasons.append(f"R{chosen.branch} is the newest branch that satisfies everything asked")
    else:
        reasons.append(
            f"R{chosen.branch} is a long-term support branch ({lc.describe()}); newer "
            + ", ".join(f"R{p.branch} ({p.lifecycle.describe()})" for p in others)
            + " would be short-lived"
        )
    if lc.long_term and not others:
        reasons.append(f"R{chosen.branch} is a long-term support branch ({lc.describe()})")
    elif lc.state is LifecycleState.SUPPORTED and not others:
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
    dated = kb.drivers.release_on(chosen.branch, today, at_most=chosen.release)
    released = dated.released if dated is not None and dated.version == chosen.release else None
    if not chosen.keep:
        where = (
            f"the newest R{chosen.branch} driver container NVIDIA publishes for {os}"
            if operator is not None
            else f"the newest R{chosen.branch} release cudasched's sources name"
        )
        when = f", out since {released.isoformat()}" if released is not None else ""
        warnings.append(f"{chosen.release} is {where}{when}; newer ones may exist")
    if kernel is None:
        warnings.append("no --kernel: the kernel was not checked")
    else:
        floor = kb.drivers.minimum_kernel(chosen.release)
        reasons.append(f"kernel {kernel} meets the minimum {floor.kernel} for R{chosen.branch}")
        for broken in kernel_breakages(kb, chosen.release, kernel, chosen.module):
            warnings.append(f"reported build failure: {broken.describe()}")
    if operator is None and os is not None:
        warnings.append(
            f"installed on the host or its image (--installer host): no driver container for "
            f"{os} was checked"
        )
    if precompiled:
        if chosen.precompiled:
            reasons.append(
                f"precompiled driver container: the NVIDIADriver version is the branch "
                f"({chosen.branch}); image driver:{chosen.branch}-{kernel}-"
                f"{image_os_tag(os, operator) if os is not None else os}"
            )
        else:
            problem = (
                precompiled_problem(kb, os, kernel, chosen.branch)
                if operator is not None
                else "precompiled driver containers are the GPU Operator's (--installer operator)"
            )
            warnings.append(f"usePrecompiled: false: {problem}")

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
    return Recommendation(
        gpu=name,
        branch=chosen.branch,
        version=chosen.release,
        module=chosen.module,
        use_precompiled=chosen.precompiled,
        cuda=cuda,
        lifecycle=lc,
        reasons=tuple(dict.fromkeys(reasons)),
        warnings=tuple(dict.fromkeys(warnings)),
        rejected=tuple(rejected),
        asked=asked,
        released=released,
        installer=installer,
        os=os,
        keep=chosen.keep,
        image_os=image_os_tag(os, operator) if os is not None else None,
    )


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
