"""The placement compiler's plan, before any label scheme: the GPUs that can run a
requirement, grouped by their last driver branch and by how the build's kernels reach them,
each group with the ways its driver may run the toolkit (native, forward compatibility,
minor-version compatibility). The engine's own helpers decide which GPUs belong
(:mod:`cudasched.compat.coverage`), so compiled terms and verdicts cannot drift.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cudasched.compat.compatlibs import forward_compat_targets
from cudasched.compat.coverage import Coverage, arch_window_reason, framework_coverage
from cudasched.compat.engine import effective_cuda
from cudasched.vocab.errors import InputError
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import ComputeCapability, CudaVersion, DriverVersion

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase


__all__ = [
    "Alt",
    "Group",
    "plan_groups",
    "runs",
]

_MAX_MAJOR = 99  # compute-capability majors the knowledge base is asked about (code <= 999)


@dataclass(frozen=True, slots=True)
class Alt:
    """One way the driver can run the toolkit."""

    kind: str  # "native" | "fc" | "mvc"
    cuda: CudaVersion | None = None
    floor: DriverVersion | None = None  # native: the driver floor of `cuda`; mvc: the series'
    branches: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Group:
    codes: tuple[int, ...]  # compute-capability codes, sorted
    cap: int | None  # last driver branch for these GPUs
    alts: tuple[Alt, ...]


def runs(values: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted integers as inclusive runs: [1,2,3,7] -> [(1,3),(7,7)]."""
    out: list[tuple[int, int]] = []
    for v in sorted(set(values)):
        if out and v == out[-1][1] + 1:
            out[-1] = (out[-1][0], v)
        else:
            out.append((v, v))
    return out


def plan_groups(
    req: Requirement, pol: Policy, scheme: LabelScheme, kb: KnowledgeBase
) -> list[Group] | None:
    """The scheme-independent shape of the answer; ``None`` when nothing needs constraining."""
    if req.is_empty:
        return None
    cuda = effective_cuda(req)
    if req.framework is not None and cuda is None:
        raise InputError(
            f"{req.framework.name} {req.framework.version} does not say which CUDA it was built "
            "with: give the CUDA version explicitly"
        )
    if cuda is None:
        # Only a compute-capability floor: no toolkit, hence no architecture window or driver.
        assert req.min_compute is not None
        return [Group((req.min_compute.code,), None, ())]
    if kb.toolkit(cuda) is None:
        raise InputError(
            f"unknown CUDA toolkit {cuda}: not a release in the knowledge base (NVIDIA Table 3), "
            "so no node can be judged able to run it"
        )
    # A node runs it natively when its driver is one NVIDIA's tables read as supporting it: the
    # engine reads a node's CUDA from its driver (nodes.reconcile_cuda).
    # With NVIDIA's minimum unknown (13.5) there is no native alternative at all.
    native_floor = kb.driver_floor(cuda) if kb.min_driver(cuda) is not None else None

    members = _members(req, cuda, kb)
    if not members:
        raise InputError(
            f"no GPU can run {req.describe()}: no compute capability the knowledge base knows is "
            f"both supported by CUDA {cuda} and accepted by the requirement"
        )
    merged = _merged(members, req, pol, scheme, cuda, native_floor, kb)
    if not merged:
        raise InputError(
            f"no node can run {req.describe()} under {pol.value}: NVIDIA's minimum driver for "
            f"CUDA {cuda} is not in the knowledge base, so native support is never assumed"
        )
    groups = [Group(tuple(sorted(codes)), cap, alts) for (cap, alts), codes in merged.items()]
    return sorted(groups, key=lambda g: g.codes[0])


def _members(
    req: Requirement, cuda: CudaVersion, kb: KnowledgeBase
) -> dict[tuple[int | None, bool], list[int]]:
    """The compute capabilities that can run the requirement's CUDA and that it accepts, by
    (their architecture's last driver branch, reached only through PTX)."""
    members: dict[tuple[int | None, bool], list[int]] = {}
    for major in range(1, _MAX_MAJOR + 1):
        # The knowledge base answers a missing minor from the nearest lower one of the same
        # major, so when X.9 has no answer, no X.y has one.
        if kb.arch(ComputeCapability(major, 9)) is None:
            continue
        for minor in range(10):
            cc = ComputeCapability(major, minor)
            arch = kb.arch(cc)
            if arch is None or arch_window_reason(kb, arch, cc, cuda, req.framework) is not None:
                continue
            if req.min_compute is not None and cc < req.min_compute:
                continue
            coverage = framework_coverage(req.framework, cc)
            if coverage is Coverage.NONE:
                continue
            key = (arch.last_driver_branch, coverage is Coverage.PTX)
            members.setdefault(key, []).append(cc.code)
    return members


def _merged(
    members: dict[tuple[int | None, bool], list[int]],
    req: Requirement,
    pol: Policy,
    scheme: LabelScheme,
    cuda: CudaVersion,
    native_floor: DriverVersion | None,
    kb: KnowledgeBase,
) -> dict[tuple[int | None, tuple[Alt, ...]], list[int]]:
    """The members' compute capabilities by (cap, the driver alternatives that run the CUDA on
    them); GPUs without any alternative are left out."""
    floor = kb.minor_compat_floor(cuda.major)
    fc_branches = tuple(sorted(forward_compat_targets(req, cuda, kb)))
    # GPUs that end up with the same cap and the same alternatives share terms (PTX-only GPUs
    # differ from the others only where minor-version compat is on the table).
    merged: dict[tuple[int | None, tuple[Alt, ...]], list[int]] = {}
    for (cap, ptx_only), codes in members.items():
        alts = [Alt("native", cuda=cuda, floor=native_floor)] if native_floor is not None else []
        if (
            pol is Policy.FORWARD_COMPAT
            and req.ships_cuda_compat
            and scheme is LabelScheme.CUDASCHED
        ):
            usable = tuple(b for b in fc_branches if cap is None or b <= cap)
            if usable:
                alts.append(Alt("fc", branches=usable))
        # Minor-version compatibility has no PTX JIT: never for PTX-only GPUs.
        if (
            pol in (Policy.MINOR_COMPAT, Policy.FORWARD_COMPAT)
            and floor is not None
            and not ptx_only
        ):
            alts.append(Alt("mvc", floor=floor))
        if alts:
            merged.setdefault((cap, tuple(alts)), []).extend(codes)
    return merged
