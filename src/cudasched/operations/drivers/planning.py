"""``plan-drivers``: which driver each GPU pool should run so that every workload of the cluster
has a home, and how to get it there the way the pool gets its driver.

Pure: a snapshot and its fleet in, a :class:`DriverPlan` out. The steps:

1. **Pools** (:func:`cudasched.operations.pools.node_pools`): GPU nodes grouped by GPU product,
   driver, OS, kernel and driver manager; the same pools, with the same names, that ``report`` and
   ``audit`` print.
2. **Demand** (:func:`cudasched.operations.drivers.demand.cluster_demand`): every workload's
   requirement, grouped by (requirement, policy).
3. **Options and choice** (:mod:`.planoptions`): keeping the driver, or each branch that drives
   the pool's GPU, is supported and can be installed the way the pool gets its driver (a driver
   container NVIDIA publishes for its OS and the target GPU Operator supports; else a release for
   the host or node image), each judged by :func:`cudasched.compat.engine.check` once per demand
   group; the best per pool, then a repair pass so that no workload that runs somewhere today is
   left without a home.
4. **Output**, per pool: the change, the workloads it gains and loses, and why. Pools the GPU
   Operator drives get an ``NVIDIADriver`` each (:mod:`.nvidiadriver`), those that keep their
   driver included (a pin: otherwise the default object would take them), written for the target
   operator version, with rollout waves (:mod:`.waves`) and a runbook (:mod:`.runbook`). Pools whose
   driver comes with the host or a node image get an action instead ("move node group X to an
   image with driver >= V"), never an object: the operator's driver pods select
   ``nvidia.com/gpu.deploy.driver=true`` only. Lifecycle warnings (an ended or legacy branch kept,
   a target that ends within ``min_support_months``), support-scope warnings and the workloads no
   pool can serve close the plan.

Cost: options × demand groups engine checks per pool, never per node or per workload.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING, Any

from cudasched.compat.branches import (
    LEGACY_BRANCHES,
    LifecycleState,
    ModuleType,
    kernel_breakages,
    module_reason,
    module_type,
    months_left,
    release_text,
    running,
)
from cudasched.compat.containers import (
    DriverManager,
    container_oses,
    container_release,
    operator_os_problem,
    precompiled_problem,
    scope_problem,
)
from cudasched.compat.engine import check
from cudasched.operations.drivers.demand import Demand, DemandGroup, cluster_demand
from cudasched.operations.drivers.nvidiadriver import (
    DriverObject,
    Replacement,
    immutable_renames,
    nvidia_driver,
    object_name,
    selector_conflicts,
    stale_objects,
)
from cudasched.operations.drivers.planoptions import (
    Judge,
    Option,
    choose,
    floor_release,
    options_of,
    unblocked,
)
from cudasched.operations.drivers.waves import WaveInput, plan_waves, wave_capacity
from cudasched.operations.nodelabels import (
    UPGRADE_DONE,
    UPGRADE_STATE_KEY,
    gpu_capacity,
    upgrade_state,
)
from cudasched.operations.pools import Pool, node_pools
from cudasched.operations.reach import blocking
from cudasched.vocab import labels as L
from cudasched.vocab.objects import labels_of, name_of
from cudasched.vocab.requirements import Policy

if TYPE_CHECKING:
    from cudasched.cluster.fleet import Fleet
    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.images import ImageTable
    from cudasched.knowledge.operator import OperatorVersion
    from cudasched.vocab.versions import CudaVersion, DriverVersion

__all__ = ["DriverPlan", "PoolDecision", "plan_drivers"]

UPGRADE = "upgrade"
DOWNGRADE = "downgrade"
KEEP = "keep"


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True, slots=True)
class PoolDecision:
    """What happens to one pool, and why."""

    pool: Pool
    chosen: Option | None
    current: frozenset[int]
    change: str
    gains: tuple[str, ...]
    loses: tuple[str, ...]
    why: tuple[str, ...]
    action: str = ""
    driver_object: str | None = None  # the NVIDIADriver that drives it after the plan
    blocked: str | None = None  # a better driver exists, but not the way the pool gets it
    floor: DriverVersion | None = None  # the oldest release of the branch that serves the same

    @property
    def changes(self) -> bool:
        return self.chosen is not None and not self.chosen.keep

    @property
    def operator(self) -> bool:
        return self.pool.manager.operator

    def to_dict(self) -> dict[str, object]:
        pool, chosen = self.pool, self.chosen
        target = pool.target
        lc = chosen.lifecycle if chosen is not None else None
        return {
            "name": pool.name,
            "nodes": list(pool.nodes),
            "gpu": pool.gpu,
            "arch": target.arch.name if target is not None else None,
            "os": str(pool.os) if pool.os else None,
            "kernel": str(pool.kernel) if pool.kernel else None,
            "currentDriver": str(pool.current) if pool.current else None,
            "driverManager": pool.manager.kind.value,
            "nodeGroup": pool.manager.group,
            "targetBranch": str(chosen.branch) if chosen is not None else None,
            "targetVersion": chosen.version if chosen is not None else None,
            "targetFloor": str(self.floor) if self.floor is not None else None,
            "kernelModuleType": chosen.module.value if chosen and chosen.module else None,
            "usePrecompiled": bool(chosen and chosen.precompiled),
            "lifecycle": lc.type if lc is not None else None,
            "eol": lc.eol if lc is not None else None,
            "change": self.change,
            "action": self.action,
            "nvidiaDriver": self.driver_object,
            "blocked": self.blocked,
            "gains": list(self.gains),
            "loses": list(self.loses),
            "why": list(self.why),
        }


@dataclass(frozen=True, slots=True)
class DriverPlan:
    """A whole plan (``to_dict`` is the ``plan-drivers -o json`` contract)."""

    decisions: tuple[PoolDecision, ...]
    demand: Demand
    objects: tuple[DriverObject, ...]
    node_labels: Mapping[str, Mapping[str, str]]
    waves: tuple[tuple[str, ...], ...]
    wave_capacity: int
    unservable: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]
    warnings: tuple[str, ...]
    policy: Policy
    today: date
    operator: OperatorVersion
    target_cuda: CudaVersion | None = None
    max_unavailable: int | str = "25%"
    gpu_nodes: int = 0
    replaced: tuple[Replacement, ...] = ()
    default_driver: str | None = None
    min_support_months: int = 12
    gpu_count: Mapping[str, int] = field(default_factory=dict)

    @property
    def drivers(self) -> tuple[Mapping[str, Any], ...]:
        """The NVIDIADriver manifests, in object order."""
        return tuple(o.manifest for o in self.objects)

    @property
    def host_actions(self) -> tuple[PoolDecision, ...]:
        """The pools whose driver comes with the host or a node image and should change."""
        return tuple(d for d in self.decisions if not d.operator and d.changes)

    def to_dict(self) -> dict[str, object]:
        return {
            "pools": [d.to_dict() for d in self.decisions],
            "nvidiaDrivers": [dict(o.manifest) for o in self.objects],
            "hostActions": [
                {"pool": d.pool.name, "nodes": list(d.pool.nodes), "action": d.action}
                for d in self.host_actions
            ],
            "nodeLabels": {n: dict(v) for n, v in self.node_labels.items()},
            "waves": [list(w) for w in self.waves],
            "replaced": [{"name": r.name, "by": r.by, "why": r.why} for r in self.replaced],
            "defaultDriver": self.default_driver,
            "gpuOperatorVersion": self.operator.version,
            "unservable": [{"workload": w, "why": why} for w, why in self.unservable],
            "notes": list(self.notes),
            "warnings": list(self.warnings),
            "policy": self.policy.value,
            "asOf": self.today.isoformat(),
            "targetCuda": str(self.target_cuda) if self.target_cuda else None,
            "maxUnavailable": self.max_unavailable,
            "minSupportMonths": self.min_support_months,
            "waveSize": self.wave_capacity,
            "gpuNodes": self.gpu_nodes,
            "workloads": self.demand.workloads,
        }


def _change(pool: Pool, chosen: Option | None) -> str:
    if chosen is None or chosen.keep:
        return KEEP
    if pool.current is None or chosen.branch > pool.current.branch:
        return UPGRADE
    return DOWNGRADE


def _refs(groups: frozenset[int], demand: Demand) -> tuple[str, ...]:
    return tuple(sorted(w for g in groups for w in demand.groups[g].workloads))


def _why(
    pool: Pool,
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
            "no branch can be installed here: " + "; ".join(f"R{b}: {w}" for b, w in left_out[:3])
        ]
    here = f"R{chosen.branch}"
    if chosen.keep:
        if not options:
            why.append(
                f"keeps driver {pool.current}: no other supported branch can be installed on "
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
            f"{here} ({release_text(chosen.release)}) serves {chosen.weight} of {total} "
            f"workloads; {what} serves {before}"
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
    if precompiled and pool.manager.operator and not chosen.keep and not chosen.precompiled:
        problem = precompiled_problem(kb, pool.os, pool.kernel, chosen.branch)
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
    pools: tuple[Pool, ...],
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


# --------------------------------------------------------------------------- what to do


def _host_action(d: PoolDecision) -> str:
    pool, opt = d.pool, d.chosen
    if opt is None or opt.keep:
        return f"keep driver {pool.current}" if pool.current else "nothing to do"
    floor = d.floor or opt.release
    what = f"an R{opt.branch} driver >= {floor} (newest known: {opt.release})"
    if pool.manager.kind is DriverManager.NODE_IMAGE:
        group = f"{pool.manager.provider} node group {pool.manager.group}"
        return f"move {group} to a node image with {what}"
    return (
        f"install {what} on the hosts or their image ({pool.manager.evidence}: the GPU Operator "
        "does not install this driver)"
    )


def _blocked(
    pool: Pool,
    chosen: Option | None,
    left_out: list[tuple[int, str]],
    judge: Judge,
    today: date,
    total: int,
) -> str | None:
    """For a GPU Operator pool: what a driver installed another way would give, when that is
    more than the containers NVIDIA publishes for its OS allow."""
    if pool.target is None:
        return None
    better = unblocked(pool, judge, today)
    if better is None or better.keep:
        return None
    if chosen is not None and (better.weight, better.branch) <= (chosen.weight, chosen.branch):
        return None
    reason = next((w for b, w in left_out if b == better.branch), None)
    if reason is None:
        return None
    oses = ", ".join(container_oses(judge.kb, better.branch)) or "no OS"
    return (
        f"R{better.branch} ({better.release}) would serve {better.weight} of {total} workloads, "
        f"but {reason}; move the nodes to an OS with R{better.branch} driver containers ({oses}), "
        "or install the driver on the hosts (then label them nvidia.com/gpu.deploy.driver=false)"
    )


def _default_driver(
    decisions: list[PoolDecision], operator: OperatorVersion
) -> tuple[str | None, str | None]:
    """(the version the default NVIDIADriver should have, the note that says so): the
    supported driver most operator-managed nodes get, else the chart's own."""
    counts: Counter[tuple[int, str]] = Counter()
    operated = False
    for d in decisions:
        if not d.operator or d.pool.target is None:
            continue
        operated = True
        if d.chosen is not None and d.chosen.lifecycle.state is LifecycleState.SUPPORTED:
            counts[(d.chosen.branch, d.chosen.version)] += len(d.pool.nodes)
    if not operated:
        return None, None
    chart = str(operator.default_driver)
    if counts:
        (_, version), _ = max(counts.items(), key=lambda kv: (kv[1], kv[0][0]))
        why = "the supported driver most operator-managed nodes get"
    else:
        version = chart
        why = "every operator-managed pool is pinned to its own object; keep the chart's default"
    return version, (
        "the default NVIDIADriver (Helm driver.version; the GPU Operator "
        f"{operator.version} chart's is {chart}) drives every GPU node no other NVIDIADriver "
        f"selects, nodes that join later included: set driver.version={version} ({why})"
    )


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
    operator: OperatorVersion | None = None,
    operator_source: str = "",
    min_support_months: int = 12,
) -> DriverPlan:
    """Plan the drivers of ``snapshot``'s GPU pools (see the module docstring). ``policy`` is
    the default for workloads that name none; lifecycles and releases are judged on ``today``;
    objects are written for GPU Operator ``operator`` (the newest known by default)."""
    kb = fleet.kb
    op = operator or kb.operator.newest
    demand = cluster_demand(snapshot, fleet, images, policy)
    pools = node_pools(snapshot, fleet)
    judge = Judge(kb, demand, target_cuda)
    keeps: list[Option | None] = []
    options: list[list[Option]] = []
    left: list[list[tuple[int, str]]] = []
    for pool in pools:
        keep, opts, left_out = options_of(
            pool,
            judge,
            today,
            operator=op if pool.manager.operator else None,
            precompiled=precompiled,
        )
        keeps.append(keep)
        options.append(opts)
        left.append(left_out)
    with_target = target_cuda is not None
    chosen, pinned = choose(keeps, options, demand, with_target)

    drafts: list[PoolDecision] = []
    for i, pool in enumerate(pools):
        current = keeps[i].serves if keeps[i] is not None else frozenset()
        pick = chosen[i]
        after = pick.serves if pick is not None else current
        why = _why(
            pool, pick, keeps[i], options[i], left[i], pinned.get(i, []), demand, kb,
            precompiled, target_cuda,
        )  # fmt: skip
        blocked = (
            _blocked(pool, pick, left[i], judge, today, demand.workloads)
            if pool.manager.operator
            else None
        )
        if blocked is not None:
            why.append(f"blocked: {blocked}")
        floor = (
            floor_release(pool, judge, pick)
            if pick is not None and not pick.keep and not pool.manager.operator
            else None
        )
        drafts.append(
            PoolDecision(
                pool=pool,
                chosen=pick,
                current=current,
                change=_change(pool, pick),
                gains=_refs(after - current, demand),
                loses=_refs(current - after, demand),
                why=tuple(why),
                blocked=blocked,
                floor=floor,
            )
        )

    # ---- NVIDIADriver objects: one per (GPU, OS, driver) among the operator's pools
    taken: set[str] = set()
    names: dict[tuple[Any, ...], str] = {}
    members: dict[str, list[int]] = {}
    warnings: list[str] = []
    for i, d in enumerate(drafts):
        opt = d.chosen
        if not d.operator or opt is None:
            continue
        if d.pool.target is None:
            continue
        key = (d.pool.gpu, d.pool.os_text, opt.branch, opt.version, opt.precompiled)
        if key not in names:
            names[key] = object_name(
                d.pool.gpu, d.pool.os_text, opt.branch, opt.version, opt.precompiled, taken
            )
            taken.add(names[key])
        members.setdefault(names[key], []).append(i)

    manifests: list[dict[str, Any]] = []
    for name, idx in members.items():
        first = drafts[idx[0]]
        opt = first.chosen
        assert opt is not None
        module = opt.module if opt.module is not None else _current_module(kb, first.pool)
        manifests.append(
            nvidia_driver(
                name,
                version=opt.version,
                module=module.value if module is not None else None,
                precompiled=opt.precompiled,
                operator=op,
                max_unavailable=max_unavailable,
                max_parallel=1,
                description="; ".join(_describe(drafts[i], opt) for i in idx),
            )
        )
    renamed, replaced = immutable_renames(snapshot.nvidia_drivers, manifests)
    for m in manifests:
        new = renamed[m["metadata"]["name"]]
        m["metadata"]["name"] = new
        m["spec"]["nodeSelector"] = {L.DRIVER_POOL: new}
        m["spec"]["labels"] = {L.DRIVER_POOL: new}
    object_of = {i: renamed[name] for name, idx in members.items() for i in idx}

    node_labels: dict[str, dict[str, str]] = {}
    decisions: list[PoolDecision] = []
    for i, d in enumerate(drafts):
        obj = object_of.get(i)
        if obj is not None:
            for node in d.pool.nodes:
                node_labels[node] = {L.DRIVER_POOL: obj}
            opt = d.chosen
            assert opt is not None
            action = (
                f"pin driver {d.pool.current} with NVIDIADriver/{obj}"
                if opt.keep
                else f"NVIDIADriver/{obj} installs {opt.version}"
            )
        elif d.operator:
            action = (
                "nothing to pin: no driver reported" if d.pool.current is None else "not planned"
            )
        else:
            action = _host_action(d)
        decisions.append(_with(d, action, obj))
    in_use = set(object_of.values()) | {
        labels_of(n).get(L.DRIVER_POOL, "") for n in snapshot.nodes if name_of(n) not in node_labels
    }
    already = {r.name for r in replaced}
    replaced += [r for r in stale_objects(snapshot.nvidia_drivers, in_use) if r.name not in already]

    homes = frozenset().union(*(d.chosen.serves for d in decisions if d.chosen is not None))
    every = [([k] if k is not None else []) + o for k, o in zip(keeps, options, strict=True)]
    unservable = _unservable(
        [g for g in demand.groups if g.number not in homes], pools, every, chosen, judge
    )

    # ---- waves: the operator's nodes that move to (or are pinned by) an object
    current_label = {name_of(n): labels_of(n).get(L.DRIVER_POOL) for n in snapshot.nodes}
    existing = {name_of(o): o for o in snapshot.nvidia_drivers}
    gpu_nodes = sum(len(p.nodes) for p in pools)
    capacity = wave_capacity(max_unavailable, gpu_nodes)
    runs_today = frozenset().union(*(d.current for d in decisions))
    inputs = []
    for d in decisions:
        obj = d.driver_object
        moving: tuple[str, ...] = ()
        if obj is not None:
            spec = _manifest(manifests, obj)["spec"]
            before = existing[obj].get("spec") if obj in existing else None
            same = isinstance(before, Mapping) and before.get("version") == spec["version"]
            moving = tuple(n for n in d.pool.nodes if not (same and current_label.get(n) == obj))
        inputs.append(
            WaveInput(
                name=d.pool.name,
                nodes=moving if moving else d.pool.nodes,
                before=d.current,
                after=d.chosen.serves if d.chosen is not None else d.current,
                changes=bool(moving),
                gains=len(d.gains),
            )
        )
    waves = plan_waves(inputs, capacity, runs_today)
    wave_of = {n: w for w, nodes in enumerate(waves.waves) for n in nodes}
    for m in manifests:
        obj = m["metadata"]["name"]
        nodes = [n for n, lab in node_labels.items() if lab[L.DRIVER_POOL] == obj and n in wave_of]
        if nodes and "upgradePolicy" in m["spec"]:
            first = min(wave_of[n] for n in nodes)
            m["spec"]["upgradePolicy"]["maxParallelUpgrades"] = sum(
                1 for n in nodes if wave_of[n] == first
            )
    objects = tuple(_driver_object(m, decisions, node_labels) for m in manifests)

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
            (o.name for o in objects),
            (r.name for r in replaced),
        )
    )
    alternatives = {
        p.name: [o for o in opts if o.weight > 0] for p, opts in zip(pools, options, strict=True)
    }
    warnings.extend(
        _pool_warnings(decisions, kb, op, today, min_support_months, alternatives, demand.workloads)
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

    default_version, default_note = _default_driver(decisions, op)
    notes = _notes(objects, decisions, op, operator_source, default_note, replaced)
    return DriverPlan(
        decisions=tuple(decisions),
        demand=demand,
        objects=objects,
        node_labels=node_labels,
        waves=waves.waves,
        wave_capacity=waves.capacity,
        unservable=tuple(unservable),
        notes=tuple(notes),
        warnings=tuple(dict.fromkeys(warnings)),
        policy=policy,
        today=today,
        operator=op,
        target_cuda=target_cuda,
        max_unavailable=max_unavailable,
        gpu_nodes=gpu_nodes,
        replaced=tuple(replaced),
        default_driver=default_version,
        min_support_months=min_support_months,
        gpu_count=_gpu_counts(snapshot, node_labels),
    )


def _with(d: PoolDecision, action: str, obj: str | None) -> PoolDecision:
    return PoolDecision(
        pool=d.pool,
        chosen=d.chosen,
        current=d.current,
        change=d.change,
        gains=d.gains,
        loses=d.loses,
        why=d.why,
        action=action,
        driver_object=obj,
        blocked=d.blocked,
        floor=d.floor,
    )


def _driver_object(
    manifest: dict[str, Any],
    decisions: list[PoolDecision],
    node_labels: Mapping[str, Mapping[str, str]],
) -> DriverObject:
    name = manifest["metadata"]["name"]
    spec = manifest["spec"]
    mine = [d for d in decisions if d.driver_object == name]
    return DriverObject(
        name=name,
        pools=tuple(d.pool.name for d in mine),
        nodes=tuple(n for n, labels in node_labels.items() if labels[L.DRIVER_POOL] == name),
        branch=int(str(spec["version"]).split(".")[0]),
        version=str(spec["version"]),
        module=spec.get("kernelModuleType"),
        precompiled=bool(spec["usePrecompiled"]),
        pin=all(d.chosen is not None and d.chosen.keep for d in mine),
        manifest=manifest,
    )


def _manifest(manifests: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(m for m in manifests if m["metadata"]["name"] == name)


def _describe(d: PoolDecision, opt: Option) -> str:
    """A pool's line in an object's ``cudasched.io/plan`` annotation."""
    if opt.keep:
        return f"{d.pool.name}: pins {d.pool.current}"
    before = f"R{d.pool.current.branch}" if d.pool.current is not None else "no driver"
    return f"{d.pool.name}: {before} -> R{opt.branch}"


def _current_module(kb: KnowledgeBase, pool: Pool) -> ModuleType | None:
    """The flavour a pin writes: what the branch drives the GPU with (NVIDIA's choice)."""
    if pool.target is None or pool.current is None:
        return None
    found = module_type(kb, pool.target, pool.current.branch)
    return found if isinstance(found, ModuleType) else None


def _gpu_counts(
    snapshot: ClusterSnapshot, node_labels: Mapping[str, Mapping[str, str]]
) -> dict[str, int]:
    return {name_of(n): gpu_capacity(n) for n in snapshot.nodes if name_of(n) in node_labels}


def _pool_warnings(
    decisions: list[PoolDecision],
    kb: KnowledgeBase,
    op: OperatorVersion,
    today: date,
    min_support_months: int,
    alternatives: Mapping[str, list[Option]],
    total: int,
) -> list[str]:
    out: list[str] = []
    for d in decisions:
        pool, opt = d.pool, d.chosen
        if opt is None:
            if pool.manager.operator and pool.current is None and pool.target is not None:
                out.append(
                    f"pool {pool.name}: no driver reported and no branch can be installed: the "
                    "default NVIDIADriver will take these nodes"
                )
            continue
        lc = opt.lifecycle
        if lc.state is LifecycleState.END_OF_LIFE:
            out.append(
                f"pool {pool.name}: {'keeps' if opt.keep else 'takes'} R{opt.branch}, "
                f"{lc.describe()}: it gets no fixes any more"
            )
        elif lc.state is LifecycleState.UNKNOWN and opt.branch in LEGACY_BRANCHES:
            arch = pool.target.arch if pool.target is not None else None
            capped = arch is not None and arch.last_driver_branch == opt.branch
            out.append(
                f"pool {pool.name}: {'keeps' if opt.keep else 'takes'} R{opt.branch}, a legacy "
                "branch NVIDIA no longer maintains"
                + (f" ({arch.name} GPUs end there)" if capped and arch is not None else "")
            )
        else:
            left = months_left(lc.eol, today)
            if left is not None and left < min_support_months:
                longer = [
                    f"R{o.branch} ({o.lifecycle.describe()}) serves {o.weight}"
                    for o in alternatives.get(pool.name, ())
                    if (m := months_left(o.lifecycle.eol, today)) is not None
                    and m >= min_support_months
                ]
                out.append(
                    f"pool {pool.name}: R{opt.branch} ({lc.describe()}) ends within "
                    f"{min_support_months} months (--min-support-months): plan the next move"
                    + (f"; {'; '.join(longer)} of {total}" if longer else "")
                )
        if pool.manager.operator and pool.target is not None:
            problem = scope_problem(
                kb, pool.gpu.split("/") if pool.gpu else (), pool.target.datacenter
            )
            if problem is not None:
                out.append(f"pool {pool.name}: {problem}")
            if pool.os is None:
                out.append(
                    f"pool {pool.name}: its nodes have no NFD system-os_release labels; the GPU "
                    "Operator skips such nodes (install Node Feature Discovery)"
                )
            if opt.keep and d.driver_object is not None:
                problem = operator_os_problem(op, pool.os)
                if problem is not None:
                    out.append(
                        f"pool {pool.name}: {problem}; the pin keeps today's driver, but move "
                        "the nodes to a supported OS"
                    )
                found = container_release(kb, opt.branch, pool.os, None)
                if isinstance(found, str) or found < opt.release:
                    out.append(
                        f"pool {pool.name}: the pin names driver:{opt.release}-{pool.os_text}, "
                        "which cudasched's sources do not list as published; check the tag "
                        "before applying"
                    )
        if pool.manager.assumed and pool.manager.operator:
            out.append(
                f"pool {pool.name}: its nodes carry no {kb.operator.driver_manager.deploy_label} "
                "label; planned as GPU Operator nodes (the operator labels every GPU node it "
                "manages): if their driver is installed on the host, label them "
                f"{kb.operator.driver_manager.deploy_label}=false"
            )
    return out


def _notes(
    objects: tuple[DriverObject, ...],
    decisions: list[PoolDecision],
    op: OperatorVersion,
    op_source: str,
    default_note: str | None,
    replaced: list[Replacement],
) -> list[str]:
    notes: list[str] = []
    if objects:
        notes.append(
            "the GPU Operator reconciles NVIDIADriver objects only with ClusterPolicy "
            "spec.driver.useNvidiaDriverCRD=true (Helm driver.nvidiaDriverCRD.enabled=true); "
            "from a release before v26.7 NVIDIA's migration takes two Helm upgrades: first to "
            "v26.7 with driver.nvidiaDriverCRD.enabled=false, then again with it enabled "
            "(gpu-driver-configuration.rst)"
        )
        minimum = (
            "spec.default and spec.upgradePolicy need GPU Operator v26.7 or newer, "
            "kernelModuleType v25.3 or newer"
        )
        notes.append(
            f"NVIDIADriver objects written for GPU Operator {op.version} "
            f"({op_source or '--gpu-operator-version'}): {minimum}; fields an older version "
            "does not define are left out"
        )
        if not op.accepts("upgradePolicy"):
            notes.append(
                f"GPU Operator {op.version} has no per-object upgradePolicy: set the cluster's "
                "driver.upgradePolicy (maxParallelUpgrades, maxUnavailable) in the Helm values"
            )
        if not op.accepts("default"):
            notes.append(
                "before v26.7 an NVIDIADriver without nodeSelector selects every GPU node and "
                "conflicts with the pool objects: install with "
                "driver.nvidiaDriverCRD.deployDefaultCR=false"
            )
        pins = [o.name for o in objects if o.pin]
        if pins:
            notes.append(
                "pools that keep their driver are pinned too ("
                + ", ".join(pins)
                + "): without an object of their own the default NVIDIADriver would take them"
            )
        notes.append(
            "rollout: `cudasched plan-drivers -o script` writes a runbook that, wave by wave, "
            "cordons, drains GPU pods (PodDisruptionBudgets hold), labels, creates or touches the "
            "NVIDIADriver, waits for it to be ready, for the driver pod and nvidia.com/gpu on "
            "every node, then uncordons (docs/guide/drivers.md)"
        )
        notes.append(
            f"the pool label ({L.DRIVER_POOL}) is set with kubectl label: nodes a node group or "
            "autoscaler creates later do not have it; add it to the node group's template "
            "(cudasched node-template --driver-pool NAME), the Karpenter NodePool's "
            "spec.template.metadata.labels or the kubelet's --node-labels"
        )
    if default_note is not None:
        notes.append(default_note)
    for r in replaced:
        notes.append(
            f"delete NVIDIADriver/{r.name} after the rollout: {r.why}"
            + (f" (NVIDIADriver/{r.by} takes its nodes)" if r.by else "")
        )
    hosts = [d for d in decisions if not d.operator and d.changes]
    if hosts:
        notes.append(
            f"{len(hosts)} pool(s) get their driver from the host or a node image "
            "(nvidia.com/gpu.deploy.driver is pre-installed or false, or a managed node group): "
            "no NVIDIADriver can change it; their actions are listed per pool"
        )
    return notes
