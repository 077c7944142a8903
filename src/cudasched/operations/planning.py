"""``plan-drivers``: which driver branch each GPU pool should run so that every workload of the
cluster has a home, and the GPU Operator objects that install it.

Pure: a snapshot and its fleet in, a :class:`DriverPlan` out. The steps:

1. **Pools** (:func:`plan_pools`): GPU nodes grouped by GPU product, OS (the GPU Operator's OS
   tag, from NFD's ``system-os_release`` labels), kernel (NFD's ``kernel-version.full``, else
   the node status) and current driver. A GPU node without driver labels is still a pool (it has
   a GPU to plan for); one whose GPU is not known at all cannot be planned and says so; CPU
   nodes are never in a pool.
2. **Demand** (:func:`cudasched.operations.demand.cluster_demand`): every workload's
   requirement, grouped by (requirement, policy).
3. **Options** per pool: keeping its driver, and each branch that can drive its GPU
   (:mod:`cudasched.branches`: first driver, architecture ceiling, module flavour), is still
   supported on the date, has a release to install (or a precompiled container), and builds on
   the pool's kernel. Each option is judged by :func:`cudasched.engine.check` on the pool's
   facts with the option's release, once per demand group.
4. **Choice** per pool, best first: reaches ``--target-cuda`` natively when asked and any option
   can; serves the most workloads; no change; a supported long-term branch (LTSB), then other
   supported ones; the newest branch. Then a repair pass: a workload that runs somewhere today
   and would have no home afterwards pins one of the pools that serve it today to an option
   that still does (and keeps every earlier pin of that pool).
5. **Output**: per pool the change, the workloads it gains and loses and why; an
   ``NVIDIADriver`` per pool that changes (:mod:`.nvidiadriver`), the pool label of each of its
   nodes, rollout waves (:mod:`.waves`) and the workloads no pool can serve.

Cost: options × demand groups engine checks per pool, never per node or per workload.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING, Any

from cudasched import labels as L
from cudasched.branches import (
    GpuTarget,
    Lifecycle,
    LifecycleState,
    ModuleType,
    OsTag,
    candidate_branches,
    gpu_target,
    judged_release,
    kernel_breakages,
    kernel_problem,
    lifecycle,
    module_reason,
    module_type,
    os_tag,
    precompiled_problem,
    release_for,
    release_text,
    running,
)
from cudasched.engine import FORWARD_COMPAT, check
from cudasched.errors import InputError
from cudasched.knowledge.drivers import KernelRelease, parse_kernel
from cudasched.objects import labels_of, name_of
from cudasched.operations.demand import Demand, DemandGroup, cluster_demand
from cudasched.operations.nodelabels import (
    NFD_OS_ID,
    NFD_OS_VERSION,
    UPGRADE_DONE,
    UPGRADE_STATE_KEY,
    is_gpu_node,
    upgrade_state,
)
from cudasched.operations.nvidiadriver import (
    CLUSTER_POLICY_NOTE,
    nvidia_driver,
    selector_conflicts,
)
from cudasched.operations.reach import blocking
from cudasched.operations.waves import WaveInput, plan_waves, wave_capacity
from cudasched.requirements import Policy, Requirement

if TYPE_CHECKING:
    from cudasched.fleet import Fleet
    from cudasched.images import ImageTable
    from cudasched.knowledge import KnowledgeBase
    from cudasched.nodes import NodeFacts
    from cudasched.snapshot import ClusterSnapshot
    from cudasched.versions import CudaVersion, DriverVersion

__all__ = ["DriverPlan", "Option", "PlanPool", "PoolDecision", "plan_drivers", "plan_pools"]

NFD_KERNEL = "feature.node.kubernetes.io/kernel-version.full"
UPGRADE = "upgrade"
DOWNGRADE = "downgrade"
KEEP = "keep"
# Pool names stay short: they are label values and NVIDIADriver names, and the operator names
# its DaemonSet nvidia-gpu-driver-<name>-<os-tag>.
_NAME_LIMIT = 32


# --------------------------------------------------------------------------- pools


@dataclass(frozen=True, slots=True)
class PlanPool:
    """GPU nodes with one GPU product, OS, kernel and current driver."""

    name: str
    nodes: tuple[str, ...]
    gpu: str | None
    os: OsTag | None
    kernel: KernelRelease | None
    current: DriverVersion | None
    facts: tuple[NodeFacts, ...]
    target: GpuTarget | None = None

    def describe(self) -> str:
        parts = [
            self.gpu or "unknown GPU",
            str(self.os) if self.os else "OS unknown",
            f"kernel {self.kernel}" if self.kernel else "kernel unknown",
            f"driver {self.current}" if self.current else "no driver reported",
        ]
        return ", ".join(parts)


def _node_os(labels: Mapping[str, str]) -> OsTag | None:
    os_id = labels.get(NFD_OS_ID, "").strip()
    version = labels.get(NFD_OS_VERSION, "").strip()
    return os_tag(os_id, version) if os_id and version else None


def _node_kernel(node: Mapping[str, Any], labels: Mapping[str, str]) -> KernelRelease | None:
    text = labels.get(NFD_KERNEL, "").strip()
    if not text:
        status = node.get("status")
        info = status.get("nodeInfo") if isinstance(status, Mapping) else None
        value = info.get("kernelVersion") if isinstance(info, Mapping) else None
        text = value.strip() if isinstance(value, str) else ""
    if not text:
        return None
    try:
        return parse_kernel(text)
    except InputError:
        return None


def _slug(text: str, limit: int) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    for prefix in ("nvidia-", "tesla-"):
        if slug.startswith(prefix) and len(slug) > len(prefix):
            slug = slug[len(prefix) :]
    return slug[:limit].strip("-") or "gpu"


def _pool_name(gpu: str | None, os: OsTag | None, taken: set[str]) -> str:
    """``<gpu>-<os tag>`` (``h100-80gb-hbm3-amzn2023``), ``-2``, ``-3`` ... for the next pools
    of the same GPU and OS (another kernel or driver). The current driver is not in the name:
    the name outlives the plan."""
    tail = str(os) if os is not None else "os-unknown"
    room = _NAME_LIMIT - len(tail) - 1
    base = f"{_slug(gpu, max(room, 4)) if gpu else 'unknown-gpu'}-{tail}"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base[: _NAME_LIMIT - len(str(n)) - 1].rstrip('-')}-{n}"
    taken.add(name)
    return name


def plan_pools(snapshot: ClusterSnapshot, fleet: Fleet) -> tuple[PlanPool, ...]:
    """The GPU pools of a cluster (see the module docstring), ordered by GPU, OS, kernel and
    driver. ``fleet`` must be built from ``snapshot``'s nodes."""
    objects = {name_of(n): n for n in snapshot.nodes}
    groups: dict[tuple[Any, ...], tuple[list[str], dict[int, NodeFacts], Any]] = {}
    for node, number, facts in fleet.members():
        obj = objects.get(node.name)
        if obj is None:
            raise InputError(f"node {node.name!r} of the fleet is not in the snapshot")
        if not (facts.has_gpu or is_gpu_node(obj)):
            continue
        labels = labels_of(obj)
        os, kernel = _node_os(labels), _node_kernel(obj, labels)
        gpu = "/".join(facts.products) or None
        key = (gpu, str(os) if os else None, kernel.text if kernel else None, facts.driver)
        names, seen, _ = groups.setdefault(key, ([], {}, (os, kernel)))
        names.append(node.name)
        seen.setdefault(number, facts)

    def order(key: tuple[Any, ...]) -> tuple[str, str, str, int]:
        gpu, os, kernel, driver = key
        return (gpu or "~", os or "~", kernel or "~", driver.code if driver is not None else -1)

    taken: set[str] = set()
    pools = []
    for key in sorted(groups, key=order):
        names, seen, (os, kernel) = groups[key]
        facts = tuple(seen.values())
        targets = [gpu_target(fleet.kb, f) for f in facts]
        target = targets[0] if targets and all(t is not None for t in targets) else None
        pools.append(
            PlanPool(
                name=_pool_name(key[0], os, taken),
                nodes=tuple(names),
                gpu=key[0],
                os=os,
                kernel=kernel,
                current=key[3],
                facts=facts,
                target=target,
            )
        )
    return tuple(pools)


# --------------------------------------------------------------------------- options


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


_TIER = {LifecycleState.SUPPORTED: 2, LifecycleState.UNKNOWN: 1, LifecycleState.END_OF_LIFE: 0}


def _key(option: Option, with_target: bool) -> tuple[int, int, int, int, int, int]:
    lc = option.lifecycle
    tier = _TIER[lc.state] * 2 + (1 if lc.long_term and lc.state is LifecycleState.SUPPORTED else 0)
    return (
        int(option.reaches_target) if with_target else 0,
        option.weight,
        int(option.keep),
        tier,
        option.branch,
        int(option.known_release),
    )


class _Judge:
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


def _options(
    pool: PlanPool,
    judge: _Judge,
    today: date,
    precompiled: bool,
) -> tuple[Option | None, list[Option], list[tuple[int, str]]]:
    """(keeping the current driver, the branches the pool could take, branches left out and
    why). A pool without a known GPU has no branch options."""
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
        return keep, [], []
    can_precompile = precompiled and precompiled_problem(kb, pool.os, pool.kernel) is None
    options: list[Option] = []
    left_out: list[tuple[int, str]] = []
    for branch in candidate_branches(kb, target):
        if pool.current is not None and branch == pool.current.branch:
            continue
        lc = lifecycle(kb, branch, today)
        if lc.state is LifecycleState.END_OF_LIFE:
            left_out.append((branch, lc.describe()))
            continue
        known = release_for(kb, branch) is not None
        if not known and not can_precompile:
            left_out.append(
                (
                    branch,
                    f"no R{branch} release is known to install; a precompiled driver container "
                    "would need only the branch",
                )
            )
            continue
        release = judged_release(kb, branch, target)
        if pool.kernel is not None:
            problem = kernel_problem(kb, release, pool.kernel)
            if problem is not None:
                left_out.append((branch, problem))
                continue
        module = module_type(kb, target, branch)
        assert isinstance(module, ModuleType)  # candidate_branches kept only drivable ones
        served, forward, reaches = judge.serves(tuple(running(f, release, kb) for f in pool.facts))
        options.append(
            Option(
                branch=branch,
                release=release,
                keep=False,
                lifecycle=lc,
                serves=served,
                weight=judge.weight(served),
                module=module,
                precompiled=can_precompile,
                known_release=known,
                reaches_target=reaches,
                forward_compat=forward,
            )
        )
    return keep, options, left_out


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True, slots=True)
class PoolDecision:
    """What happens to one pool, and why."""

    pool: PlanPool
    chosen: Option | None
    current: frozenset[int]
    change: str
    gains: tuple[str, ...]
    loses: tuple[str, ...]
    why: tuple[str, ...]

    @property
    def changes(self) -> bool:
        return self.chosen is not None and not self.chosen.keep

    def to_dict(self) -> dict[str, object]:
        pool, chosen = self.pool, self.chosen
        target = pool.target
        return {
            "name": pool.name,
            "nodes": list(pool.nodes),
            "gpu": pool.gpu,
            "arch": target.arch.name if target is not None else None,
            "os": str(pool.os) if pool.os else None,
            "kernel": str(pool.kernel) if pool.kernel else None,
            "currentDriver": str(pool.current) if pool.current else None,
            "targetBranch": str(chosen.branch) if chosen is not None else None,
            "targetVersion": (
                chosen.version
                if chosen is not None and (chosen.precompiled or chosen.known_release)
                else None
            ),
            "kernelModuleType": chosen.module.value if chosen and chosen.module else None,
            "usePrecompiled": bool(chosen and chosen.precompiled),
            "change": self.change,
            "gains": list(self.gains),
            "loses": list(self.loses),
            "why": list(self.why),
        }


@dataclass(frozen=True, slots=True)
class DriverPlan:
    """A whole plan (``to_dict`` is the ``plan-drivers -o json`` contract)."""

    decisions: tuple[PoolDecision, ...]
    demand: Demand
    drivers: tuple[dict[str, Any], ...]
    node_labels: Mapping[str, Mapping[str, str]]
    waves: tuple[tuple[str, ...], ...]
    wave_capacity: int
    unservable: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]
    warnings: tuple[str, ...]
    policy: Policy
    today: date
    target_cuda: CudaVersion | None = None
    max_unavailable: int | str = "25%"
    gpu_nodes: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "pools": [d.to_dict() for d in self.decisions],
            "nvidiaDrivers": list(self.drivers),
            "nodeLabels": {n: dict(v) for n, v in self.node_labels.items()},
            "waves": [list(w) for w in self.waves],
            "unservable": [{"workload": w, "why": why} for w, why in self.unservable],
            "notes": list(self.notes),
            "warnings": list(self.warnings),
            "policy": self.policy.value,
            "asOf": self.today.isoformat(),
            "targetCuda": str(self.target_cuda) if self.target_cuda else None,
            "maxUnavailable": self.max_unavailable,
            "waveSize": self.wave_capacity,
            "gpuNodes": self.gpu_nodes,
            "workloads": self.demand.workloads,
        }


def _change(pool: PlanPool, chosen: Option | None) -> str:
    if chosen is None or chosen.keep:
        return KEEP
    if pool.current is None or chosen.branch > pool.current.branch:
        return UPGRADE
    return DOWNGRADE


def _refs(groups: frozenset[int], demand: Demand) -> tuple[str, ...]:
    return tuple(sorted(w for g in groups for w in demand.groups[g].workloads))


def _choose(
    pools: tuple[PlanPool, ...],
    keeps: list[Option | None],
    options: list[list[Option]],
    demand: Demand,
    with_target: bool,
) -> tuple[list[Option | None], dict[int, list[str]]]:
    """Each pool's best option, then the repair pass (module docstring, step 4)."""
    every = [([k] if k is not None else []) + opts for k, opts in zip(keeps, options, strict=True)]
    chosen: list[Option | None] = [
        max(opts, key=lambda o: _key(o, with_target)) if opts else None for opts in every
    ]
    today = [k.serves if k is not None else frozenset() for k in keeps]
    runs_today = frozenset().union(*today) if today else frozenset()
    pins: dict[int, set[int]] = {}
    pinned_why: dict[int, list[str]] = {}
    for _ in range(len(demand.groups) + 1):
        homes = frozenset().union(*(c.serves for c in chosen if c is not None))
        orphans = sorted(runs_today - homes)
        if not orphans:
            break
        group = orphans[0]
        best: tuple[tuple[int, ...], int, Option] | None = None
        for i, served in enumerate(today):
            if group not in served:
                continue
            need = pins.get(i, set()) | {group}
            for opt in every[i]:
                if need <= opt.serves:
                    key = _key(opt, with_target)
                    if best is None or key > best[0]:
                        best = (key, i, opt)
        assert best is not None  # keeping the pool's driver serves the group
        _, i, opt = best
        chosen[i] = opt
        pins.setdefault(i, set()).add(group)
        refs = ", ".join(demand.groups[group].workloads[:3])
        pinned_why.setdefault(i, []).append(
            f"{'keeps' if opt.keep else 'takes'} R{opt.branch} so that {refs} keep a home "
            f"({demand.groups[group].describe()} runs nowhere else after the plan)"
        )
    return chosen, pinned_why


def _why(
    pool: PlanPool,
    chosen: Option | None,
    keep: Option | None,
    options: list[Option],
    left_out: list[tuple[int, str]],
    pinned: list[str],
    demand: Demand,
    kb: KnowledgeBase,
    precompiled: bool,
    target_cuda: CudaVersion | None,
) -> list[str]:
    target = pool.target
    if target is None:
        return [
            "not planned: the nodes report no GPU product or compute capability cudasched "
            "knows; run GPU Feature Discovery or `cudasched agent` on them and plan again"
        ]
    why: list[str] = []
    total = demand.workloads
    if chosen is None:
        return [
            "no branch can drive this GPU on this kernel: "
            + "; ".join(f"R{b}: {w}" for b, w in left_out[:3])
        ]
    here = f"R{chosen.branch}"
    if chosen.keep:
        if not options:
            why.append(
                f"keeps driver {pool.current}: no other supported branch can drive "
                f"{target.name} here"
            )
        elif any(o.weight > chosen.weight for o in options):
            why.append(f"keeps driver {pool.current}")
        else:
            why.append(
                f"keeps driver {pool.current}: it serves {chosen.weight} of {total} workloads "
                "and no branch serves more"
            )
    else:
        before = keep.weight if keep is not None else 0
        what = f"driver {pool.current}" if pool.current else "no driver"
        why.append(
            f"{here} ({release_text(chosen.release) if chosen.known_release else 'branch'}) "
            f"serves {chosen.weight} of {total} workloads; {what} serves {before}"
        )
        lc = chosen.lifecycle
        peers = [o for o in options if o.weight == chosen.weight and o is not chosen]
        if lc.long_term and any(not o.lifecycle.long_term for o in peers):
            why.append(
                f"{here} is a long-term support branch ({lc.describe()}), preferred over "
                + ", ".join(f"R{o.branch}" for o in peers if not o.lifecycle.long_term)
            )
        else:
            why.append(f"{here}: {lc.describe()}")
    why.extend(pinned)
    cap = target.arch.last_driver_branch
    if cap is not None:
        why.append(f"{target.arch.name} GPUs end at R{cap}")
    if target_cuda is not None:
        if chosen.reaches_target:
            why.append(f"reaches CUDA {target_cuda} natively (--target-cuda)")
        else:
            why.append(f"cannot reach CUDA {target_cuda} natively on any branch it can take")
    if not chosen.keep:
        assert chosen.module is not None
        why.append(module_reason(kb, target, chosen.module))
        if not chosen.known_release:
            why.append(
                f"no R{chosen.branch} release is known: the precompiled container "
                "needs only the branch"
            )
    if pool.current is not None and chosen.keep:
        current_lc = chosen.lifecycle
        if current_lc.state is LifecycleState.END_OF_LIFE:
            why.append(
                f"R{chosen.branch} is {current_lc.describe()}: no supported branch "
                "serves more workloads here"
            )
    if chosen.forward_compat:
        refs = _refs(chosen.forward_compat, demand)
        why.append(
            "runs "
            + ", ".join(refs[:3])
            + (f" and {len(refs) - 3} more" if len(refs) > 3 else "")
            + " only through forward compatibility (cuda-compat in the image)"
        )
    if precompiled and not chosen.keep and not chosen.precompiled:
        problem = precompiled_problem(kb, pool.os, pool.kernel)
        if problem is not None:
            why.append(f"usePrecompiled: false: {problem}")
    if pool.kernel is not None and not chosen.keep:
        for broken in kernel_breakages(kb, chosen.release, pool.kernel, chosen.module):
            why.append(f"warning: reported build failure: {broken.describe()}")
    if pool.kernel is None:
        why.append("kernel unknown: the minimum kernel was not checked")
    newer = [(b, w) for b, w in left_out if b > chosen.branch]
    skipped = [f"R{b} ({w})" for b, w in newer if "end of life" not in w]
    ended = [f"R{b}" for b, w in newer if "end of life" in w]
    if ended:
        skipped.append(f"{', '.join(ended)} (end of life)")
    if skipped:
        why.append("left out: " + "; ".join(skipped))
    return why


def _unservable(
    groups: list[DemandGroup],
    pools: tuple[PlanPool, ...],
    every: list[list[Option]],
    chosen: list[Option | None],
    judge: _Judge,
) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    kb = judge.kb
    for group in groups:
        # An option that would serve it but was not chosen (it serves fewer workloads there).
        alternatives = [
            (opt, i) for i, opts in enumerate(every) for opt in opts if group.number in opt.serves
        ]
        if alternatives:
            opt, i = max(alternatives, key=lambda a: (a[0].weight, a[0].branch))
            other = chosen[i]
            why = (
                f"needs {group.describe()}: R{opt.branch} on pool {pools[i].name} would run it, "
                f"but serves {opt.weight} workloads there against "
                f"{other.weight if other is not None else 0} for the plan's choice"
            )
        else:
            nearest: tuple[int, str] | None = None
            for i, opts in enumerate(every):
                pool = pools[i]
                for opt in opts:
                    facts = pool.facts[0] if opt.keep else running(pool.facts[0], opt.release, kb)
                    verdict = check(facts, group.requirement, group.policy, kb)
                    reasons = blocking(verdict)
                    text = "; ".join(dict.fromkeys(r.message for r in reasons))
                    score = len({r.code for r in reasons})
                    if text and (nearest is None or score < nearest[0]):
                        nearest = (score, f"nearest: pool {pool.name} on R{opt.branch}: {text}")
            why = f"needs {group.describe()}: no pool can run it on any branch it can take" + (
                f"; {nearest[1]}" if nearest is not None else "; the cluster has no GPU pool"
            )
        out.extend((w, why) for w in group.workloads)
    return sorted(out)


def plan_drivers(
    snapshot: ClusterSnapshot,
    fleet: Fleet,
    images: ImageTable,
    *,
    today: date,
    policy: Policy = Policy.STRICT,
    target_cuda: CudaVersion | None = None,
    max_unavailable: int | str = "25%",
    precompiled: bool = False,
) -> DriverPlan:
    """Plan the drivers of ``snapshot``'s GPU pools (see the module docstring). ``policy`` is
    the default for workloads that name none; lifecycles are judged on ``today``."""
    kb = fleet.kb
    demand = cluster_demand(snapshot, fleet, images, policy)
    pools = plan_pools(snapshot, fleet)
    judge = _Judge(kb, demand, target_cuda)
    keeps: list[Option | None] = []
    options: list[list[Option]] = []
    left: list[list[tuple[int, str]]] = []
    for pool in pools:
        keep, opts, left_out = _options(pool, judge, today, precompiled)
        keeps.append(keep)
        options.append(opts)
        left.append(left_out)
    with_target = target_cuda is not None
    chosen, pinned = _choose(pools, keeps, options, demand, with_target)

    decisions: list[PoolDecision] = []
    for i, pool in enumerate(pools):
        current = keeps[i].serves if keeps[i] is not None else frozenset()
        pick = chosen[i]
        after = pick.serves if pick is not None else current
        decisions.append(
            PoolDecision(
                pool=pool,
                chosen=pick,
                current=current,
                change=_change(pool, pick),
                gains=_refs(after - current, demand),
                loses=_refs(current - after, demand),
                why=tuple(
                    _why(
                        pool,
                        pick,
                        keeps[i],
                        options[i],
                        left[i],
                        pinned.get(i, []),
                        demand,
                        kb,
                        precompiled,
                        target_cuda,
                    )
                ),
            )
        )

    homes = frozenset().union(*(d.chosen.serves for d in decisions if d.chosen is not None))
    every = [([k] if k is not None else []) + o for k, o in zip(keeps, options, strict=True)]
    unservable = _unservable(
        [g for g in demand.groups if g.number not in homes], pools, every, chosen, judge
    )

    gpu_nodes = sum(len(p.nodes) for p in pools)
    capacity = wave_capacity(max_unavailable, gpu_nodes)
    runs_today = frozenset().union(*(d.current for d in decisions))
    waves = plan_waves(
        [
            WaveInput(
                name=d.pool.name,
                nodes=d.pool.nodes,
                before=d.current,
                after=d.chosen.serves if d.chosen is not None else d.current,
                changes=d.changes,
                gains=len(d.gains),
            )
            for d in decisions
        ],
        capacity,
        runs_today,
    )

    drivers: list[dict[str, Any]] = []
    node_labels: dict[str, dict[str, str]] = {}
    for d in decisions:
        if not d.changes:
            continue
        opt = d.chosen
        assert opt is not None and opt.module is not None
        pool = d.pool
        drivers.append(
            nvidia_driver(
                pool.name,
                version=opt.version,
                module=opt.module.value,
                precompiled=opt.precompiled,
                max_unavailable=max_unavailable,
                description=(
                    f"{pool.describe()}: "
                    f"{('R' + str(pool.current.branch)) if pool.current else 'no driver'} -> "
                    f"R{opt.branch}"
                ),
            )
        )
        for node in pool.nodes:
            node_labels[node] = {L.DRIVER_POOL: pool.name}

    warnings: list[str] = []
    for node, groups in waves.stranded:
        refs = _refs(frozenset(groups), demand)
        warnings.append(
            f"{node} is the only node that runs {', '.join(refs[:3])}"
            + (f" and {len(refs) - 3} more" if len(refs) > 3 else "")
            + ": they wait while its driver changes (its wave holds only it)"
        )
    warnings.extend(
        selector_conflicts(
            snapshot.nvidia_drivers,
            snapshot.nodes,
            node_labels,
            (d["metadata"]["name"] for d in drivers),
        )
    )
    for d in decisions:
        if d.changes and d.pool.os is None:
            warnings.append(
                f"pool {d.pool.name}: its nodes have no NFD system-os_release labels; the GPU "
                "Operator skips such nodes (install Node Feature Discovery)"
            )
    in_flight = [
        name_of(n)
        for n in snapshot.nodes
        if upgrade_state(labels_of(n)) not in (None, UPGRADE_DONE)
    ]
    if in_flight:
        shown = ", ".join(in_flight[:3]) + (
            f" and {len(in_flight) - 3} more" if len(in_flight) > 3 else ""
        )
        warnings.append(
            f"a driver upgrade is in flight on {shown} ({UPGRADE_STATE_KEY} is not "
            f"{UPGRADE_DONE}): their drivers are planned from what they report now; plan again "
            "when the upgrade ends"
        )
    for ref, error in demand.unreadable:
        warnings.append(f"{ref}: requirement unreadable, left out of the plan: {error}")

    notes = [CLUSTER_POLICY_NOTE] if drivers else []
    if drivers:
        notes.append(
            f"apply the NVIDIADriver objects, then label the nodes wave by wave ({L.DRIVER_POOL}); "
            "start a wave when the previous one's nodes report "
            "nvidia.com/gpu-driver-upgrade-state=upgrade-done"
        )
    return DriverPlan(
        decisions=tuple(decisions),
        demand=demand,
        drivers=tuple(drivers),
        node_labels=node_labels,
        waves=waves.waves,
        wave_capacity=waves.capacity,
        unservable=tuple(unservable),
        notes=tuple(notes),
        warnings=tuple(warnings),
        policy=policy,
        today=today,
        target_cuda=target_cuda,
        max_unavailable=max_unavailable,
        gpu_nodes=gpu_nodes,
    )
