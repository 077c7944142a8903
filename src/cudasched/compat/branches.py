"""Driver branches: which ones can drive a GPU, what CUDA each runs there and how, which kernel
modules it needs, how long it is supported, and whether it builds on a kernel.

Pure: knowledge base and facts in, answers out (no clock: callers pass the date a lifecycle is
judged at). Every answer is one of the knowledge base's facts or the engine's verdict:

* **drives the GPU**: a branch at or above the product's first driver (``gpus.yaml``) and at or
  below its architecture's last branch (Kepler R470; Maxwell, Pascal, Volta R580:
  ``architectures.yaml``); the same facts the engine applies to a node
  (``driver-branch-unsupported-gpu``);
* **CUDA**: the newest toolkit release a GPU runs on a release of the branch natively, under
  minor-version compatibility and through forward compatibility is asked of
  :func:`cudasched.compat.engine.check`, release by release (:func:`cuda_ceiling`), so a branch's
  answer and every verdict agree by construction;
* **kernel modules**: open modules exist from R515 and drive Turing (7.5) and newer only;
  Blackwell and GH200 are driven by the open modules alone (``open_kernel_only``); from R560 the
  open flavour is NVIDIA's default where the GPU supports it (``drivers.yaml``);
* **lifecycle**: LTSB / PB / NFB and end of life from ``compat.yaml``;
* **kernel**: the oldest kernel a release builds on and the build breakages users reported
  (``drivers.yaml``).

Whether NVIDIA ships a driver container (or a precompiled one) for a branch on an OS, and who
installs a node's driver, is :mod:`cudasched.compat.containers`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import date
from enum import StrEnum
from typing import TYPE_CHECKING

from cudasched.compat.engine import check
from cudasched.knowledge import ReleaseKind
from cudasched.nodes.facts import DERIVED_CUDA, NodeFacts
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import ComputeCapability, CudaVersion, DriverVersion

if TYPE_CHECKING:
    from cudasched.knowledge import ArchInfo, GpuInfo, KnowledgeBase
    from cudasched.knowledge.drivers import Breakage, KernelRelease

__all__ = [
    "LEGACY_BRANCHES",
    "LONG_TERM",
    "BranchChoice",
    "BranchCuda",
    "GpuTarget",
    "Lifecycle",
    "LifecycleState",
    "ModuleType",
    "OsTag",
    "branch_cuda",
    "branch_floor",
    "branch_versions",
    "candidate_branches",
    "cuda_ceiling",
    "data_date",
    "drive_problem",
    "first_driver",
    "gpu_target",
    "installable_branch",
    "judged_release",
    "kernel_breakages",
    "kernel_problem",
    "known_branches",
    "lifecycle",
    "module_reason",
    "module_type",
    "months_left",
    "os_tag",
    "parse_os_tag",
    "rank",
    "release_for",
    "release_text",
    "running",
]

#: The lifecycle type of NVIDIA's long-term support branches.
LONG_TERM = "LTSB"

#: README listing artefacts of ``first_listed_driver``: the README's first table (every board
#: listed when the README began, not when it was first driven) and the Tesla T4 (listed from
#: 575.51.02 although the open modules drive Turing since R515). Used only while the knowledge
#: base carries the listing rather than the first driver itself (``GpuInfo.first_driver``).
_README_FIRST_TABLE = DriverVersion(515, 48, 7)


class ModuleType(StrEnum):
    """The NVIDIA kernel-module flavour (the GPU Operator's ``kernelModuleType``)."""

    OPEN = "open"
    PROPRIETARY = "proprietary"


class LifecycleState(StrEnum):
    SUPPORTED = "supported"
    END_OF_LIFE = "end-of-life"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """A branch's lifecycle at a date: type (LTSB, PB, NFB; ``None`` unknown), end of life
    (``YYYY-MM``, ``past`` or ``None``) and what that makes it on the date."""

    branch: int
    type: str | None
    eol: str | None
    state: LifecycleState
    source: str = ""
    note: str = ""
    alternatives: tuple[str, ...] = ()  # end-of-life dates sources disagree on

    @property
    def long_term(self) -> bool:
        return self.type == LONG_TERM

    def describe(self) -> str:
        """``LTSB, end of life 2028-06`` / ``end of life (2026-06)`` / ``lifecycle unknown``."""
        if self.state is LifecycleState.UNKNOWN:
            return "lifecycle unknown" + (f" ({self.type})" if self.type else "")
        kind = f"{self.type}, " if self.type else ""
        if self.state is LifecycleState.END_OF_LIFE:
            when = f" {self.eol}" if self.eol and self.eol != "past" else ""
            return f"{kind}end of life{when}"
        return f"{kind}supported until {self.eol}"


@dataclass(frozen=True, slots=True)
class GpuTarget:
    """The GPU a branch must drive: what the knowledge base knows of it (one product, the
    lowest compute capability of a mixed node, or only a compute capability)."""

    name: str
    compute: ComputeCapability
    arch: ArchInfo
    first_driver: DriverVersion | None
    open_only: bool
    datacenter: bool | None
    first_branch: int | None = None  # the branch of the architecture's first toolkit


@dataclass(frozen=True, slots=True)
class BranchCuda:
    """The newest CUDA a GPU runs on a release: natively, under minor-version compatibility and
    through forward compatibility (each ``None`` when it runs no known release that way)."""

    native: CudaVersion | None
    minor_compat: CudaVersion | None
    forward_compat: CudaVersion | None

    def to_dict(self) -> dict[str, str | None]:
        return {
            "native": _str_or_none(self.native),
            "minorCompat": _str_or_none(self.minor_compat),
            "forwardCompat": _str_or_none(self.forward_compat),
        }


def _str_or_none(value: object | None) -> str | None:
    """``str(value)``, keeping ``None`` (a JSON ``null``)."""
    return None if value is None else str(value)


# --------------------------------------------------------------------------- the GPU


def first_driver(info: GpuInfo) -> DriverVersion | None:
    """The first driver that drives a product, per the knowledge base.

    ``GpuInfo.first_driver`` when the knowledge base carries it; otherwise the open-module
    README listing (``first_listed_driver``) where that is a real first listing, not one of the
    README's artefacts (:data:`_README_FIRST_TABLE`, Turing)."""
    found = getattr(info, "first_driver", None)
    if found is not None or not hasattr(info, "first_listed_driver"):
        return found
    listed: DriverVersion | None = info.first_listed_driver
    if listed is None or listed <= _README_FIRST_TABLE or info.arch == "Turing":
        return None
    return listed


def gpu_target(kb: KnowledgeBase, facts: NodeFacts) -> GpuTarget | None:
    """What a node's GPU asks of a driver branch; ``None`` when neither its product nor its
    compute capability is known (nothing can be planned for it)."""
    infos = [kb.gpu(p) for p in facts.products]
    known = [i for i in infos if i is not None]
    compute = facts.compute
    if compute is None and known and len(known) == len(infos):
        compute = min(i.compute for i in known)
    if compute is None:
        return None
    arch = kb.arch(compute)
    if arch is None:
        return None
    firsts = [f for f in (first_driver(i) for i in known) if f is not None]
    name = "/".join(facts.products) if facts.products else f"compute capability {compute}"
    first_toolkit = kb.min_driver(arch.first_cuda) if arch.first_cuda is not None else None
    return GpuTarget(
        name=name,
        compute=compute,
        arch=arch,
        first_driver=max(firsts) if firsts else None,
        open_only=_open_only(kb, known, arch),
        datacenter=facts.datacenter,
        first_branch=first_toolkit.branch if first_toolkit is not None else None,
    )


def _open_only(kb: KnowledgeBase, known: list[GpuInfo], arch: ArchInfo) -> bool:
    """Whether only the open kernel modules drive the GPU: any of the node's known products
    says so, or, with only a compute capability, every product of the architecture does."""
    if known:
        return any(i.open_kernel_only for i in known)
    same = [g for g in kb.gpus() if g.arch == arch.name]
    return bool(same) and all(g.open_kernel_only for g in same)


def release_text(release: DriverVersion) -> str:
    """A release as users read it; a stand-in for a branch (``620.00``) as the branch."""
    if release.minor == 0 and release.revision == 0:
        return f"R{release.branch}"
    return str(release)


def drive_problem(gpu: GpuTarget, release: DriverVersion) -> str | None:
    """Why ``release`` cannot drive the GPU (``None``: it can): a branch older than the
    architecture's first toolkit's (a driver that runs no toolkit knowing the architecture
    predates it), older than the product's first driver, or past the architecture's last
    branch."""
    if gpu.first_branch is not None and release.branch < gpu.first_branch:
        return (
            f"R{release.branch} predates {gpu.arch.name}: its first toolkit, CUDA "
            f"{gpu.arch.first_cuda}, needs R{gpu.first_branch}"
        )
    if gpu.first_driver is not None and release < gpu.first_driver:
        return f"{gpu.name} needs driver {gpu.first_driver} or newer (its first driver)"
    cap = gpu.arch.last_driver_branch
    if cap is not None and release.branch > cap:
        return f"{gpu.arch.name} GPUs end at R{cap} (their last driver branch)"
    return None


def module_type(kb: KnowledgeBase, gpu: GpuTarget, branch: int) -> ModuleType | str:
    """The kernel-module flavour a branch drives the GPU with, or why it cannot: proprietary
    before the open modules exist and for GPUs older than the open modules drive; open for
    GPUs only the open modules drive; else NVIDIA's default (open from R560)."""
    rules = kb.drivers.modules
    open_ok = gpu.compute >= rules.open_min_compute
    if gpu.open_only:
        if branch < rules.open_first_branch:
            return (
                f"{gpu.name} is driven by the open kernel modules only, which start at "
                f"R{rules.open_first_branch}"
            )
        return ModuleType.OPEN
    if not open_ok or branch < rules.open_first_branch:
        return ModuleType.PROPRIETARY
    return ModuleType.OPEN if branch >= rules.open_default_branch else ModuleType.PROPRIETARY


def module_reason(kb: KnowledgeBase, gpu: GpuTarget, chosen: ModuleType) -> str:
    """Why a flavour, in one sentence."""
    rules = kb.drivers.modules
    if gpu.open_only:
        return f"open kernel modules: {gpu.name} is driven by the open modules only"
    if gpu.compute < rules.open_min_compute:
        return (
            f"proprietary kernel modules: the open modules drive compute capability "
            f"{rules.open_min_compute} (Turing) and newer, {gpu.name} is {gpu.compute}"
        )
    if chosen is ModuleType.OPEN:
        return f"open kernel modules: NVIDIA's default from R{rules.open_default_branch}"
    return (
        f"proprietary kernel modules: NVIDIA's default before R{rules.open_default_branch} "
        "(open also works on this GPU)"
    )


# --------------------------------------------------------------------------- releases


def release_for(kb: KnowledgeBase, branch: int) -> DriverVersion | None:
    """The release of ``branch`` cudasched would install: the newest one a source names."""
    return kb.drivers.latest_release(branch)


def _stand_in(branch: int, gpu: GpuTarget | None) -> DriverVersion:
    """A release to judge a branch by when none is known: the branch's first release, or the
    GPU's first driver when that is in the branch (never shown to users)."""
    base = DriverVersion(branch, 0, 0, has_revision=False)
    if gpu is not None and gpu.first_driver is not None and gpu.first_driver.branch == branch:
        return max(base, gpu.first_driver)
    return base


def judged_release(kb: KnowledgeBase, branch: int, gpu: GpuTarget | None) -> DriverVersion:
    """The release a branch is judged by: its newest known release, else a stand-in."""
    return release_for(kb, branch) or _stand_in(branch, gpu)


def running(facts: NodeFacts, release: DriverVersion, kb: KnowledgeBase) -> NodeFacts:
    """A node's facts as they would be with ``release`` installed: the driver replaced and its
    CUDA version derived from it as for a node that reports only its driver."""
    return replace(
        facts,
        driver=release,
        cuda=kb.max_cuda_for_driver(release),
        derived=facts.derived | {DERIVED_CUDA},
        problems=(),
    )


def known_branches(kb: KnowledgeBase) -> tuple[int, ...]:
    """Every branch the knowledge base knows of: lifecycle rows, newest releases, and the last
    branch of each architecture; newest first."""
    found = {b.branch for b in kb.driver_branches()}
    found |= set(kb.drivers.latest)
    found |= {a.last_driver_branch for a in kb.architectures() if a.last_driver_branch}
    return tuple(sorted(found, reverse=True))


def candidate_branches(kb: KnowledgeBase, gpu: GpuTarget) -> tuple[int, ...]:
    """The known branches that can drive ``gpu``, newest first (judged by the release that
    would be installed)."""
    return tuple(
        b
        for b in known_branches(kb)
        if drive_problem(gpu, judged_release(kb, b, gpu)) is None
        and isinstance(module_type(kb, gpu, b), ModuleType)
    )


# --------------------------------------------------------------------------- lifecycle


def lifecycle(kb: KnowledgeBase, branch: int, today: date) -> Lifecycle:
    """The branch's lifecycle as judged on ``today``: end of life once the month of its EOL is
    over (a disputed date is judged by the value the knowledge base keeps, the earliest)."""
    row = kb.driver_branch(branch)
    if row is None:
        return Lifecycle(branch, None, None, LifecycleState.UNKNOWN)
    eol = row.eol
    if eol is None:
        state = LifecycleState.UNKNOWN
    elif eol == "past":
        state = LifecycleState.END_OF_LIFE
    else:
        m = re.match(r"^(\d{4})-(\d{2})$", eol)
        if m is None:
            state = LifecycleState.UNKNOWN
        else:
            ended = (today.year, today.month) > (int(m.group(1)), int(m.group(2)))
            state = LifecycleState.END_OF_LIFE if ended else LifecycleState.SUPPORTED
    return Lifecycle(branch, row.type, eol, state, row.source, row.note, row.alternatives)


#: Branches NVIDIA keeps as legacy (its Unix driver archive) for architectures newer branches
#: dropped; the lifecycle tables give them no end of life.
LEGACY_BRANCHES = frozenset({340, 390, 470})


_TIER = {LifecycleState.SUPPORTED: 2, LifecycleState.UNKNOWN: 1, LifecycleState.END_OF_LIFE: 0}


def rank(lc: Lifecycle, branch: int) -> tuple[int, int]:
    """How a branch ranks by lifecycle, best last: a supported long-term branch, other
    supported branches, unknown lifecycles, ended ones; then the newest. The one rule every
    command chooses a branch by: ``plan-drivers`` among the options that serve the most
    workloads, ``recommend-driver`` among the branches that satisfy everything asked, and a fix
    among the branches that would run the workload (:func:`installable_branch`)."""
    tier = _TIER[lc.state] * 2 + (1 if lc.long_term and lc.state is LifecycleState.SUPPORTED else 0)
    return (tier, branch)


def months_left(eol: str | None, today: date) -> int | None:
    """Whole months from ``today``'s month to an ``YYYY-MM`` end of life (``None``: no date)."""
    if eol is None or len(eol) != 7 or eol[4] != "-" or not (eol[:4] + eol[5:]).isdigit():
        return None
    return (int(eol[:4]) - today.year) * 12 + (int(eol[5:]) - today.month)


# --------------------------------------------------------------------------- a branch to name


def data_date(kb: KnowledgeBase) -> date:
    """The newest release date the knowledge base knows: the day commands without ``--as-of``
    (``check``, ``explain``) judge lifecycles and releases on, so that their answers depend on
    the data, not on the clock."""
    return max(r.released for rs in kb.drivers.releases.values() for r in rs)


def branch_versions(kb: KnowledgeBase, branch: int) -> list[DriverVersion]:
    """Every version of ``branch`` cudasched's sources name, newest first: its dated releases
    and the minimums NVIDIA's Table 3 gives in it (595.45.04 for CUDA 13.2). The dated releases
    alone are a sample (R535's oldest is 535.183.06, though Table 3's 535.54.03 runs CUDA 12.2),
    so a floor read from them alone would overstate what a workload needs."""
    found = {r.version for r in kb.drivers.releases.get(branch, ())}
    found.update(
        t.min_driver
        for t in kb.toolkits()
        if t.min_driver is not None and t.min_driver.branch == branch
    )
    return sorted(found, reverse=True)


def branch_floor(
    kb: KnowledgeBase, branch: int, need: DriverVersion | None = None
) -> DriverVersion | None:
    """The oldest version of ``branch`` at or above ``need`` that the sources name
    (:func:`branch_versions`; the branch's oldest without ``need``): the one minimum a refusal,
    a fix, the audit and a plan's node-image action name for the branch, so Table 3's minimum
    where it lies in the branch (docs/design.md, "one minimum per branch"). ``None``: no
    version qualifies."""
    found = [v for v in branch_versions(kb, branch) if need is None or v >= need]
    if need is not None and need.branch == branch:
        found.append(need)  # NVIDIA's own minimum (Table 3, a GPU's first driver) runs it
    return min(found) if found else None


@dataclass(frozen=True, slots=True)
class BranchChoice:
    """The branch a fix names: the branch, its minimum for the need (:func:`branch_floor`),
    and its newest release on the date."""

    branch: int
    floor: DriverVersion
    newest: DriverVersion
    lifecycle: Lifecycle

    def describe(self) -> str:
        """``install R580 >= 580.65.06 (LTSB)``: what a fix tells."""
        kind = f" ({self.lifecycle.type})" if self.lifecycle.type else ""
        return f"install R{self.branch} >= {self.floor}{kind}"


def installable_branch(
    kb: KnowledgeBase, gpu: GpuTarget | None, need: DriverVersion, today: date | None = None
) -> BranchChoice | None:
    """The branch to install for a workload that needs driver ``need`` on GPUs like ``gpu``:
    among the branches that drive the GPU (any, without ``gpu``), are not ended on ``today``
    (default: :func:`data_date`) and have a dated release at or above ``need`` out by then,
    the best by :func:`rank`, the rule ``plan-drivers`` and ``recommend-driver`` choose by.
    ``None``: no such branch (every one ended, or none drives the GPU that far)."""
    day = today or data_date(kb)
    branches = candidate_branches(kb, gpu) if gpu is not None else known_branches(kb)
    best: BranchChoice | None = None
    for branch in branches:
        if branch < need.branch:
            continue
        lc = lifecycle(kb, branch, day)
        if lc.state is LifecycleState.END_OF_LIFE:
            continue
        newest = kb.drivers.release_on(branch, day)
        floor = branch_floor(kb, branch, need)
        if newest is None or floor is None or floor > newest.version:
            continue
        if gpu is not None and drive_problem(gpu, newest.version) is not None:
            continue
        choice = BranchChoice(branch, floor, newest.version, lc)
        if best is None or rank(lc, branch) > rank(best.lifecycle, best.branch):
            best = choice
    return best


# --------------------------------------------------------------------------- CUDA


def _ga_releases(kb: KnowledgeBase) -> list[CudaVersion]:
    found = {t.cuda.release for t in kb.toolkits() if t.kind is ReleaseKind.GA}
    return sorted(found, reverse=True)


def cuda_ceiling(
    facts: tuple[NodeFacts, ...],
    policy: Policy,
    kb: KnowledgeBase,
    *,
    ships_cuda_compat: bool = False,
) -> CudaVersion | None:
    """The newest GA CUDA release every one of ``facts`` can run under ``policy`` (a workload
    with no other constraint; ``ships_cuda_compat``: its image carries cuda-compat)."""
    if not facts or not all(f.has_gpu for f in facts):
        return None
    for cuda in _ga_releases(kb):
        req = Requirement(cuda=cuda, ships_cuda_compat=ships_cuda_compat, source="ceiling")
        if all(check(f, req, policy, kb).compatible for f in facts):
            return cuda
    return None


def branch_cuda(kb: KnowledgeBase, facts: NodeFacts, release: DriverVersion) -> BranchCuda:
    """What a GPU (``facts``) runs on ``release``: the engine's ceilings under each policy."""
    on = (running(facts, release, kb),)
    return BranchCuda(
        native=cuda_ceiling(on, Policy.STRICT, kb),
        minor_compat=cuda_ceiling(on, Policy.MINOR_COMPAT, kb),
        forward_compat=cuda_ceiling(on, Policy.FORWARD_COMPAT, kb, ships_cuda_compat=True),
    )


# --------------------------------------------------------------------------- kernel


def kernel_problem(kb: KnowledgeBase, release: DriverVersion, kernel: KernelRelease) -> str | None:
    """Why ``release`` does not build on ``kernel`` (older than its minimum), else ``None``."""
    floor = kb.drivers.minimum_kernel(release)
    if kernel.version < floor.kernel.version:
        return (
            f"kernel {kernel} is older than {floor.kernel}, the oldest kernel "
            f"{release_text(release)} builds on"
        )
    return None


def kernel_breakages(
    kb: KnowledgeBase, release: DriverVersion, kernel: KernelRelease, module: ModuleType | None
) -> tuple[Breakage, ...]:
    """Reported build failures of ``release`` (or an older release of its branch) on
    ``kernel`` or older kernels, for the module flavour in use."""
    flavour = module.value if module is not None else None
    return kb.drivers.breakages_for(release, kernel, flavour)


@dataclass(frozen=True, slots=True)
class OsTag:
    """An OS as the GPU Operator names it in driver image tags (``ubuntu22.04``, ``rhel9``),
    with the full ``VERSION_ID`` it came from (``9.4``): GPU Operator releases before v26.7 tag
    RHEL 8 and 9 images with it (``OperatorVersion.image_os_tag``)."""

    id: str
    version: str
    version_id: str = ""

    def __str__(self) -> str:
        return f"{self.id}{self.version}"

    @property
    def full_version(self) -> str:
        """``VERSION_ID`` as os-release gives it (``9.4``; the tag's version when not known)."""
        return self.version_id or self.version


# The GPU Operator tags these OS ids with their major version only (getOSTag).
_MAJOR_ONLY = frozenset({"rhel", "rocky", "ol"})


def os_tag(os_id: str, version: str) -> OsTag:
    """The GPU Operator's tag for NFD's ``system-os_release.ID`` / ``VERSION_ID``."""
    os_id = os_id.strip().lower()
    full = version.strip()
    short = full.split(".", 1)[0] if os_id in _MAJOR_ONLY else full
    return OsTag(os_id, short, full if full != short else "")


def parse_os_tag(value: str) -> OsTag:
    """``ubuntu22.04``, ``rhel9``, ``amzn2023``; an :class:`InputError` for anything else."""
    m = re.match(r"^\s*([a-z][a-z-]*?)[-_ ]?(\d+(?:\.\d+)*)\s*$", str(value).lower())
    if m is None:
        raise InputError(
            f"invalid OS {value!r}: expected the GPU Operator's OS tag, ID and VERSION_ID of "
            "/etc/os-release, e.g. ubuntu22.04, ubuntu24.04, rhel9"
        )
    return os_tag(m.group(1), m.group(2))
