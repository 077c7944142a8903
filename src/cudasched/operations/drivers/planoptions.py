"""The options of a pool in a driver plan, and the choice among them.

An option is keeping the pool's driver, or installing a branch that can drive its GPU, is not
ended on the date, and can be installed the way the pool gets its driver
(:func:`cudasched.compat.containers.install_option`): for a pool the GPU Operator drives, a driver
container NVIDIA publishes for the pool's OS, which the target operator version supports
(precompiled where NVIDIA's matrix has one and ``--precompiled`` asks for it); for a pool whose
driver comes with the host or a node image, any release out on the date. Each option is judged
by :func:`cudasched.compat.engine.check` on the pool's facts with the option's release installed,
once per demand group (:class:`Judge`).

The choice (:func:`choose`), best first: reaches ``--target-cuda`` natively (when asked); with
``--prefer-lts`` a supported long-term branch; serves the most workloads; keeps the driver; then
the one ranking every command chooses by (:func:`cudasched.compat.branches.rank`: a supported
long-term branch, other supported branches, unknown lifecycles, then ended ones, only the current
branch can be ended; the newest branch).
Then the repair pass: a workload group that runs somewhere today and would run nowhere pins one
of the pools that serve it today to its best option that still serves it and every earlier pin
of that pool (keeping the driver always does, so the pass ends).

For a pool that cannot take a branch only because of how it gets its driver (no container for
its OS, an OS the operator does not support), :func:`unblocked` says what the best branch would
be with a driver installed another way, so the plan can name what to change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING

from cudasched.compat.branches import (
    Lifecycle,
    LifecycleState,
    ModuleType,
    branch_versions,
    candidate_branches,
    drive_problem,
    lifecycle,
    rank,
    running,
)
from cudasched.compat.containers import Install, install_option
from cudasched.compat.engine import check
from cudasched.compat.verdict import FORWARD_COMPAT
from cudasched.vocab.requirements import Policy, Requirement

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.operator import OperatorVersion
    from cudasched.nodes.facts import NodeFacts
    from cudasched.operations.drivers.demand import Demand
    from cudasched.operations.pools import Pool
    from cudasched.vocab.versions import CudaVersion, DriverVersion

__all__ = [
    "Judge",
    "Option",
    "PoolChoice",
    "PoolOptions",
    "choose",
    "floor_release",
    "long_term",
    "options_of",
    "rank",
    "unblocked",
]


@dataclass(frozen=True, slots=True)
class Option:
    """One driver a pool could run: keep its current one, or install a branch."""

    branch: int
    release: DriverVersion  # installed (the current driver when keeping)
    keep: bool
    lifecycle: Lifecycle
    serves: frozenset[int]
    weight: int  # workloads served
    module: ModuleType | None = None  # None when keeping (the flavour in use is not reported)
    precompiled: bool = False
    known_release: bool = True
    reaches_target: bool = False
    forward_compat: frozenset[int] = frozenset()  # groups served only through forward compat

    @property
    def version(self) -> str:
        """The NVIDIADriver ``version``: the release, or the branch for precompiled drivers."""
        return str(self.branch) if self.precompiled else str(self.release)


@dataclass(frozen=True, slots=True)
class PoolOptions:
    """What one pool could run: keeping its driver (``None`` when it reports none), the branches
    it could take, and the branches left out with why. One record per pool, so that the plan's
    steps never line up lists by position."""

    pool: Pool
    keep: Option | None
    options: tuple[Option, ...]
    left_out: tuple[tuple[int, str], ...]

    @property
    def every(self) -> list[Option]:
        """Keeping first, then the branches."""
        return ([self.keep] if self.keep is not None else []) + list(self.options)

    @property
    def runs_today(self) -> frozenset[int]:
        """The demand groups the pool serves with the driver it has."""
        return self.keep.serves if self.keep is not None else frozenset()


@dataclass(frozen=True, slots=True)
class PoolChoice:
    """A pool's options and the one the plan takes (``None``: nothing to keep and no branch can
    be installed), with why the repair pass pinned it, if it did."""

    offer: PoolOptions
    chosen: Option | None
    pinned: tuple[str, ...] = ()

    @property
    def pool(self) -> Pool:
        return self.offer.pool


def long_term(option: Option) -> bool:
    """A supported long-term support branch (LTSB)."""
    lc = option.lifecycle
    return lc.long_term and lc.state is LifecycleState.SUPPORTED


def _key(option: Option, with_target: bool, prefer_lts: bool = False) -> tuple[int, ...]:
    return (
        int(option.reaches_target) if with_target else 0,
        int(long_term(option)) if prefer_lts else 0,
        option.weight,
        int(option.keep),
        *rank(option.lifecycle, option.branch),
        int(option.known_release),
    )


class Judge:
    """Engine verdicts of the demand groups on a pool's facts with a release."""

    def __init__(self, kb: KnowledgeBase, demand: Demand, target_cuda: CudaVersion | None) -> None:
        self.kb = kb
        self.groups = demand.groups
        self.target_cuda = target_cuda

    def serves(self, facts: tuple[NodeFacts, ...]) -> tuple[frozenset[int], frozenset[int], bool]:
        """(groups every one of ``facts`` runs, those run only through forward compatibility,
        whether the target CUDA runs natively)."""
        served: set[int] = set()
        forward: set[int] = set()
        for group in self.groups:
            verdicts = [check(f, group.requirement, group.policy, self.kb) for f in facts]
            if verdicts and all(v.compatible for v in verdicts):
                served.add(group.number)
                if any(v.codes[0] == FORWARD_COMPAT for v in verdicts):
                    forward.add(group.number)
        reaches = False
        if self.target_cuda is not None and facts:
            req = Requirement(cuda=self.target_cuda, source="--target-cuda")
            reaches = all(check(f, req, Policy.STRICT, self.kb).compatible for f in facts)
        return frozenset(served), frozenset(forward), reaches

    def weight(self, groups: frozenset[int]) -> int:
        return sum(len(self.groups[g].workloads) for g in groups)


def _option(pool: Pool, judge: Judge, install: Install, lc: Lifecycle) -> Option:
    facts = tuple(running(f, install.release, judge.kb) for f in pool.facts)
    served, forward, reaches = judge.serves(facts)
    return Option(
        branch=install.branch,
        release=install.release,
        keep=False,
        lifecycle=lc,
        serves=served,
        weight=judge.weight(served),
        module=install.module,
        precompiled=install.precompiled,
        reaches_target=reaches,
        forward_compat=forward,
    )


def options_of(
    pool: Pool,
    judge: Judge,
    today: date,
    *,
    operator: OperatorVersion | None,
    precompiled: bool = False,
) -> PoolOptions:
    """Keeping the current driver, the branches the pool could take, branches left out and
    why. ``operator``: the pool's driver is the GPU Operator's (that version); ``None``: the
    host's or a node image's. A pool without a known GPU has no branch options."""
    kb = judge.kb
    keep: Option | None = None
    if pool.current is not None:
        served, forward, reaches = judge.serves(pool.facts)
        keep = Option(
            branch=pool.current.branch,
            release=pool.current,
            keep=True,
            lifecycle=lifecycle(kb, pool.current.branch, today),
            serves=served,
            weight=judge.weight(served),
            reaches_target=reaches,
            forward_compat=forward,
        )
    target = pool.target
    if target is None:
        return PoolOptions(pool, keep, (), ())
    products = pool.gpu.split("/") if pool.gpu else ()
    options: list[Option] = []
    left_out: list[tuple[int, str]] = []
    for branch in candidate_branches(kb, target):
        if pool.current is not None and branch == pool.current.branch:
            continue
        lc = lifecycle(kb, branch, today)
        if lc.state is LifecycleState.END_OF_LIFE:
            left_out.append((branch, lc.describe()))
            continue
        found = install_option(
            kb,
            target,
            branch,
            today=today,
            os=pool.os,
            kernel=pool.kernel,
            operator=operator,
            precompiled=precompiled,
            products=products,
            arch=pool.arch,
        )
        if isinstance(found, str):
            left_out.append((branch, found))
            continue
        options.append(_option(pool, judge, found, lc))
    return PoolOptions(pool, keep, tuple(options), tuple(left_out))


def unblocked(pool: Pool, judge: Judge, today: date) -> Option | None:
    """The branch the pool would take with its driver installed another way than the GPU
    Operator's containers for its OS (any release out on ``today``): what moving it to an OS
    with driver containers, or to a host-installed driver, would give."""
    every = options_of(pool, judge, today, operator=None).every
    return max(every, key=lambda o: _key(o, False)) if every else None


def floor_release(pool: Pool, judge: Judge, option: Option) -> DriverVersion:
    """The oldest version of the option's branch the sources name (its dated releases and Table
    3's minimums in it: :func:`cudasched.compat.branches.branch_versions`, the versions the
    audit's fix chooses from) that serves the same workloads on the pool: what a node image must
    have at least; the option's own release when none older is known."""
    best = option.release
    for version in branch_versions(judge.kb, option.branch):
        if version >= best:
            continue
        if pool.target is not None and drive_problem(pool.target, version) is not None:
            break
        served, _, _ = judge.serves(tuple(running(f, version, judge.kb) for f in pool.facts))
        if served != option.serves:
            break
        best = version
    return best


def choose(
    offers: Sequence[PoolOptions], demand: Demand, with_target: bool, prefer_lts: bool = False
) -> list[PoolChoice]:
    """Each pool's best option, then the repair pass (module docstring), which also says why it
    pinned a pool."""
    chosen: list[Option | None] = [
        max(o.every, key=lambda opt: _key(opt, with_target, prefer_lts)) if o.every else None
        for o in offers
    ]
    runs_today = frozenset().union(*(o.runs_today for o in offers))
    pins: dict[int, set[int]] = {}
    pinned_why: dict[int, list[str]] = {}
    for _ in range(len(demand.groups) + 1):
        homes = frozenset().union(*(c.serves for c in chosen if c is not None))
        orphans = sorted(runs_today - homes)
        if not orphans:
            break
        group = orphans[0]
        i, opt = _repair(offers, pins, group, with_target, prefer_lts)
        chosen[i] = opt
        pins.setdefault(i, set()).add(group)
        refs = ", ".join(demand.groups[group].workloads[:3])
        pinned_why.setdefault(i, []).append(
            f"{'keeps' if opt.keep else 'takes'} R{opt.branch} so that {refs} keep a home "
            f"({demand.groups[group].describe()} runs nowhere else after the plan)"
        )
    return [
        PoolChoice(offer, pick, tuple(pinned_why.get(i, ())))
        for i, (offer, pick) in enumerate(zip(offers, chosen, strict=True))
    ]


def _repair(
    offers: Sequence[PoolOptions],
    pins: dict[int, set[int]],
    group: int,
    with_target: bool,
    prefer_lts: bool = False,
) -> tuple[int, Option]:
    """The best option, over the pools that serve ``group`` today, that serves it and every
    earlier pin of its pool: (the pool's position, the option)."""
    best: tuple[tuple[int, ...], int, Option] | None = None
    for i, offer in enumerate(offers):
        if group not in offer.runs_today:
            continue
        need = pins.get(i, set()) | {group}
        for opt in offer.every:
            if need <= opt.serves:
                key = _key(opt, with_target, prefer_lts)
                if best is None or key > best[0]:
                    best = (key, i, opt)
    assert best is not None  # keeping the pool's driver serves the group
    return best[1], best[2]
