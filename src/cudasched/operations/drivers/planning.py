"""``plan-drivers``: which driver branch each GPU pool should run so that every workload of the
cluster has a home, and the GPU Operator objects that install it.

Pure: a snapshot and its fleet in, a :class:`DriverPlan` out. The steps:

1. **Pools** (:mod:`.planpools`): GPU nodes grouped by GPU product, OS (the GPU Operator's OS
   tag), kernel and current driver; a node whose GPU is not known at all is listed, not planned.
2. **Demand** (:func:`cudasched.operations.drivers.demand.cluster_demand`): every workload's
   requirement, grouped by (requirement, policy).
3. **Options and choice** (:mod:`.planoptions`): keeping the driver, or each branch that can
   drive the pool's GPU, is supported, can be installed and builds on its kernel, each judged by
   :func:`cudasched.compat.engine.check` once per demand group; the best per pool, then a repair
   pass so that no workload that runs somewhere today is left without a home.
5. **Output**: per pool the change, the workloads it gains and loses and why; an
   ``NVIDIADriver`` per pool that changes (:mod:`.nvidiadriver`), the pool label of each of its
   nodes, rollout waves (:mod:`.waves`) and the workloads no pool can serve.

Cost: options × demand groups engine checks per pool, never per node or per workload.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING, Any

from cudasched.compat.branches import (
    LifecycleState,
    kernel_breakages,
    module_reason,
    precompiled_problem,
    release_text,
    running,
)
from cudasched.compat.engine import check
from cudasched.operations.drivers.demand import Demand, DemandGroup, cluster_demand
from cudasched.operations.drivers.nvidiadriver import (
    CLUSTER_POLICY_NOTE,
    nvidia_driver,
    selector_conflicts,
)
from cudasched.operations.drivers.planoptions import Judge, Option, choose, options_of
from cudasched.operations.drivers.planpools import PlanPool, plan_pools
from cudasched.operations.drivers.waves import WaveInput, plan_waves, wave_capacity
from cudasched.operations.nodelabels import UPGRADE_DONE, UPGRADE_STATE_KEY, upgrade_state
from cudasched.operations.reach import blocking
from cudasched.vocab import labels as L
from cudasched.vocab.objects import labels_of, name_of
from cudasched.vocab.requirements import Policy

if TYPE_CHECKING:
    from cudasched.cluster.fleet import Fleet
    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.images import ImageTable
    from cudasched.vocab.versions import CudaVersion

__all__ = ["DriverPlan", "PoolDecision", "plan_drivers"]

UPGRADE = "upgrade"
DOWNGRADE = "downgrade"
KEEP = "keep"


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
    judge: Judge,
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
    judge = Judge(kb, demand, target_cuda)
    keeps: list[Option | None] = []
    options: list[list[Option]] = []
    left: list[list[tuple[int, str]]] = []
    for pool in pools:
        keep, opts, left_out = options_of(pool, judge, today, precompiled)
        keeps.append(keep)
        options.append(opts)
        left.append(left_out)
    with_target = target_cuda is not None
    chosen, pinned = choose(keeps, options, demand, with_target)

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
