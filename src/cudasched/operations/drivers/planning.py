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

The result types are in :mod:`.plan`, the reasons in words in :mod:`.reasons`, each pool's action
and the default object's version in :mod:`.poolactions`, the closing notes and warnings in
:mod:`.notes`; this module only puts them together.

Cost: options × demand groups engine checks per pool, never per node or per workload.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date
from typing import TYPE_CHECKING, Any

from cudasched.operations.drivers.demand import Demand, cluster_demand
from cudasched.operations.drivers.notes import (
    cluster_warnings,
    label_homes,
    plan_notes,
    pool_warnings,
)
from cudasched.operations.drivers.nvidiadriver import (
    DriverObject,
    Replacement,
    immutable_renames,
    nvidia_driver,
    object_name,
    selector_conflicts,
    stale_objects,
)
from cudasched.operations.drivers.plan import (
    REOWN,
    DriverPlan,
    PoolDecision,
    change_of,
    with_action,
    workload_refs,
)
from cudasched.operations.drivers.planoptions import (
    Judge,
    PoolChoice,
    choose,
    floor_release,
    options_of,
)
from cudasched.operations.drivers.poolactions import (
    current_module,
    default_driver,
    driver_image,
    driver_object,
    host_action,
    manifest_named,
    plan_line,
)
from cudasched.operations.drivers.reasons import blocked_by_os, pool_why, unservable
from cudasched.operations.drivers.waves import WaveInput, Waves, plan_waves, wave_capacity
from cudasched.operations.nodelabels import (
    UPGRADE_DONE,
    UPGRADE_STATE_KEY,
    gpu_capacity,
    upgrade_state,
)
from cudasched.operations.pools import Pool, node_pools, snapshot_drivers
from cudasched.vocab import labels as L
from cudasched.vocab.objects import labels_of, name_of
from cudasched.vocab.requirements import Policy

if TYPE_CHECKING:
    from cudasched.cluster.fleet import Fleet
    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.compat.drivermanager import DriverCluster
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.images import ImageTable
    from cudasched.knowledge.operator import OperatorVersion
    from cudasched.vocab.versions import CudaVersion

__all__ = ["plan_drivers"]


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
    operator_notes: tuple[str, ...] = (),
    min_support_months: int = 12,
    operator_objects: Sequence[Mapping[str, Any]] = (),
    prefer_lts: bool = False,
) -> DriverPlan:
    """Plan the drivers of ``snapshot``'s GPU pools (see the module docstring). ``policy`` is
    the default for workloads that name none; lifecycles and releases are judged on ``today``;
    objects are written for GPU Operator ``operator`` (the newest known by default).
    ``operator_objects``: the cluster's ClusterPolicy read apart from the snapshot (``--live``),
    which tells with the snapshot's own objects who installs each node's driver.
    ``prefer_lts``: a supported long-term branch before one that serves more workloads (no
    workload that runs today loses its home)."""
    kb = fleet.kb
    demand = cluster_demand(snapshot, fleet, images, policy)
    evidence = snapshot_drivers(snapshot, fleet, tuple(operator_objects))
    run = _Run(
        snapshot=snapshot,
        kb=kb,
        op=operator or kb.operator.newest,
        demand=demand,
        judge=Judge(kb, demand, target_cuda),
        today=today,
        target_cuda=target_cuda,
        precompiled=precompiled,
        max_unavailable=max_unavailable,
        min_support_months=min_support_months,
        evidence=evidence,
        prefer_lts=prefer_lts,
    )
    choices = _choices(run, node_pools(snapshot, fleet, evidence))
    drafts = [_draft(run, c) for c in choices]
    drivers = _driver_objects(run, drafts)
    decisions = [_decision(run, d, drivers.object_of.get(d.pool.name)) for d in drafts]
    node_labels = _node_labels(decisions)
    replaced = _replaced(run, drivers, node_labels)
    waves = _waves(run, decisions, drivers.manifests, node_labels)
    objects = tuple(driver_object(m, decisions, node_labels) for m in drivers.manifests)
    default_version, default_note = default_driver(decisions, run.op, evidence.olm)
    homes = label_homes(objects, snapshot.nodes, kb)
    notes = plan_notes(
        objects, decisions, run.op, operator_source, default_note, replaced, homes, evidence.olm
    )
    return DriverPlan(
        decisions=tuple(decisions),
        demand=demand,
        objects=objects,
        node_labels=node_labels,
        waves=waves.waves,
        wave_capacity=waves.capacity,
        unservable=tuple(_homeless(run, choices, decisions)),
        notes=(*operator_notes, *notes),
        warnings=(
            *_warnings(run, choices, decisions, objects, replaced, node_labels, waves),
            *cluster_warnings(decisions, kb, default_version),
        ),
        policy=policy,
        today=today,
        operator=run.op,
        target_cuda=target_cuda,
        max_unavailable=max_unavailable,
        gpu_nodes=_gpu_nodes(decisions),
        replaced=tuple(replaced),
        default_driver=default_version,
        min_support_months=min_support_months,
        gpu_count=_gpu_counts(snapshot, node_labels),
    )


@dataclass(frozen=True, slots=True)
class _Run:
    """What every step of one plan reads: the cluster, the knowledge, the demand and the
    operator's settings."""

    snapshot: ClusterSnapshot
    kb: KnowledgeBase
    op: OperatorVersion
    demand: Demand
    judge: Judge
    today: date
    target_cuda: CudaVersion | None
    precompiled: bool
    max_unavailable: int | str
    min_support_months: int
    evidence: DriverCluster
    prefer_lts: bool = False


def _choices(run: _Run, pools: tuple[Pool, ...]) -> list[PoolChoice]:
    """Step 3: each pool's options (the GPU Operator's pools judged for its target version),
    then the choice and the repair pass."""
    offers = [
        options_of(
            pool,
            run.judge,
            run.today,
            operator=run.op if pool.manager.operator else None,
            precompiled=run.precompiled,
        )
        for pool in pools
    ]
    return choose(offers, run.demand, run.target_cuda is not None, run.prefer_lts)


def _draft(run: _Run, choice: PoolChoice) -> PoolDecision:
    """A pool's decision before any object is named: the change, the workloads it gains and
    loses, why, what a driver installed another way would give, and a node image's floor."""
    pool, pick = choice.pool, choice.chosen
    current = choice.offer.runs_today
    after = pick.serves if pick is not None else current
    why = pool_why(choice, run.demand, run.kb, run.precompiled, run.target_cuda)
    blocked = (
        blocked_by_os(choice, run.judge, run.today, run.demand.workloads, run.op)
        if pool.manager.operator
        else None
    )
    if blocked is not None:
        why.append(f"blocked: {blocked}")
    floor = (
        floor_release(pool, run.judge, pick)
        if pick is not None and not pick.keep and not pool.manager.operator
        else None
    )
    return PoolDecision(
        pool=pool,
        chosen=pick,
        current=current,
        change=change_of(pool, pick),
        gains=workload_refs(after - current, run.demand),
        loses=workload_refs(current - after, run.demand),
        why=tuple(why),
        blocked=blocked,
        floor=floor,
    )


@dataclass(frozen=True, slots=True)
class _Drivers:
    """The NVIDIADriver manifests (named after any immutable rename), which object drives each
    operator pool (by pool name), and the existing objects the renames replace."""

    manifests: list[dict[str, Any]]
    object_of: dict[str, str]
    replaced: list[Replacement]


def _driver_objects(run: _Run, drafts: list[PoolDecision]) -> _Drivers:
    """One NVIDIADriver per (GPU, OS, driver) among the operator's pools with a known GPU."""
    members = _object_members(drafts)
    manifests: list[dict[str, Any]] = []
    for name, pools in members.items():
        first = pools[0]
        opt = first.chosen
        assert opt is not None
        module = opt.module if opt.module is not None else current_module(run.kb, first.pool)
        manifests.append(
            nvidia_driver(
                name,
                version=opt.version,
                module=module.value if module is not None else None,
                precompiled=opt.precompiled,
                operator=run.op,
                max_unavailable=run.max_unavailable,
                max_parallel=1,
                description="; ".join(plan_line(d, opt) for d in pools),
            )
        )
    renamed, replaced = immutable_renames(run.snapshot.nvidia_drivers, manifests)
    for m in manifests:
        new = renamed[m["metadata"]["name"]]
        m["metadata"]["name"] = new
        m["spec"]["nodeSelector"] = {L.DRIVER_POOL: new}
        m["spec"]["labels"] = {L.DRIVER_POOL: new}
    object_of = {d.pool.name: renamed[name] for name, pools in members.items() for d in pools}
    return _Drivers(manifests, object_of, replaced)


def _object_members(drafts: list[PoolDecision]) -> dict[str, list[PoolDecision]]:
    """The operator's pools that share an object, under the object's name (unique in the
    plan)."""
    taken: set[str] = set()
    names: dict[tuple[Any, ...], str] = {}
    members: dict[str, list[PoolDecision]] = {}
    for d in drafts:
        opt = d.chosen
        if not d.operator or opt is None or d.pool.target is None:
            continue
        key = (d.pool.gpu, d.pool.os_text, opt.branch, opt.version, opt.precompiled)
        if key not in names:
            names[key] = object_name(
                d.pool.gpu, d.pool.os_text, opt.branch, opt.version, opt.precompiled, taken
            )
            taken.add(names[key])
        members.setdefault(names[key], []).append(d)
    return members


def _moving(run: _Run, nodes: Iterable[str], obj: str, version: str) -> tuple[str, ...]:
    """The nodes whose driver pod changes when ``obj`` (installing ``version``) drives them:
    all but those already labelled for an object of that name with the same version."""
    existing = next((o for o in run.snapshot.nvidia_drivers if name_of(o) == obj), None)
    before = existing.get("spec") if existing is not None else None
    same = isinstance(before, Mapping) and str(before.get("version")) == version
    current = {name_of(n): labels_of(n).get(L.DRIVER_POOL) for n in run.snapshot.nodes}
    return tuple(n for n in nodes if not (same and current.get(n) == obj))


def _was_precompiled(run: _Run, d: PoolDecision) -> str | None:
    """What drives the pool with precompiled drivers now (an NVIDIADriver whose pool label or
    owner label its nodes carry, or the ClusterPolicy), if anything does."""
    owner = run.kb.operator.driver_manager.owner_label
    labels = {name_of(n): labels_of(n) for n in run.snapshot.nodes}
    names = {
        v
        for node in d.pool.nodes
        for v in (labels.get(node, {}).get(L.DRIVER_POOL), labels.get(node, {}).get(owner))
        if v
    }
    for obj in run.snapshot.nvidia_drivers:
        spec = obj.get("spec")
        if name_of(obj) in names and isinstance(spec, Mapping) and spec.get("usePrecompiled"):
            return f"NVIDIADriver/{name_of(obj)}"
    policy = run.evidence.policy
    if policy is not None and policy.precompiled and not policy.use_crd:
        return f"ClusterPolicy {policy.name}"
    return None


def _decision(run: _Run, d: PoolDecision, obj: str | None) -> PoolDecision:
    """A pool's draft with its action, the object that drives it and the image it pulls; a
    pool that keeps its driver but moves to another object is re-owned (its driver pods
    restart), one that leaves precompiled drivers is told so."""
    if obj is not None:
        opt = d.chosen
        assert opt is not None
        action = (
            f"pin driver {d.pool.current} with NVIDIADriver/{obj}"
            if opt.keep
            else f"NVIDIADriver/{obj} installs {opt.version}"
        )
        if opt.keep and _moving(run, d.pool.nodes, obj, opt.version):
            drain = "" if run.op.restart_in_place else ", drained: the driver is reinstalled"
            action = f"{REOWN}: driver pod restarts{drain} ({action})"
            d = replace(d, reown=True)
        source = _was_precompiled(run, d)
        if source is not None and not opt.precompiled:
            d = replace(
                d,
                why=(
                    *d.why,
                    f"moves off precompiled drivers ({source} installs them now): "
                    f"NVIDIADriver/{obj} builds the driver on the node",
                ),
            )
    elif d.operator:
        action = "nothing to pin: no driver reported" if d.pool.current is None else "not planned"
    else:
        action = host_action(run.kb, d)
    image = driver_image(d.pool, d.chosen, run.op) if obj is not None and d.chosen else None
    if image is not None and d.pool.os is not None and not image.endswith(f"-{d.pool.os}"):
        d = replace(
            d,
            why=(
                *d.why,
                f"GPU Operator {run.op.version} pulls {image}: releases before v26.7 tag RHEL 8 "
                "and 9 driver images with the minor version",
            ),
        )
    return with_action(d, action, obj, image)


def _node_labels(decisions: list[PoolDecision]) -> dict[str, dict[str, str]]:
    """The pool label of each node an object drives, in pool order."""
    return {
        node: {L.DRIVER_POOL: d.driver_object}
        for d in decisions
        if d.driver_object is not None
        for node in d.pool.nodes
    }


def _replaced(
    run: _Run, drivers: _Drivers, node_labels: Mapping[str, Mapping[str, str]]
) -> list[Replacement]:
    """The existing objects the plan replaces: renamed ones, then those no node will use."""
    in_use = set(drivers.object_of.values()) | {
        labels_of(n).get(L.DRIVER_POOL, "")
        for n in run.snapshot.nodes
        if name_of(n) not in node_labels
    }
    already = {r.name for r in drivers.replaced}
    stale = stale_objects(run.snapshot.nvidia_drivers, in_use)
    return [*drivers.replaced, *(r for r in stale if r.name not in already)]


def _homeless(
    run: _Run, choices: list[PoolChoice], decisions: list[PoolDecision]
) -> list[tuple[str, str]]:
    """The workloads no pool serves after the plan, and why."""
    homes = frozenset().union(*(d.chosen.serves for d in decisions if d.chosen is not None))
    groups = [g for g in run.demand.groups if g.number not in homes]
    return unservable(groups, choices, run.judge)


def _gpu_nodes(decisions: list[PoolDecision]) -> int:
    return sum(len(d.pool.nodes) for d in decisions)


def _waves(
    run: _Run,
    decisions: list[PoolDecision],
    manifests: list[dict[str, Any]],
    node_labels: Mapping[str, Mapping[str, str]],
) -> Waves:
    """The rollout waves of the operator's nodes that move to (or are pinned by) an object; each
    object upgrades as many nodes at once as its first wave holds."""
    current_label = {name_of(n): labels_of(n).get(L.DRIVER_POOL) for n in run.snapshot.nodes}
    existing = {name_of(o): o for o in run.snapshot.nvidia_drivers}
    capacity = wave_capacity(run.max_unavailable, _gpu_nodes(decisions))
    runs_today = frozenset().union(*(d.current for d in decisions))
    inputs = [_wave_input(d, manifests, existing, current_label) for d in decisions]
    waves = plan_waves(inputs, capacity, runs_today)
    _set_parallel_upgrades(manifests, node_labels, waves)
    return waves


def _wave_input(
    d: PoolDecision,
    manifests: list[dict[str, Any]],
    existing: Mapping[str, Mapping[str, Any]],
    current_label: Mapping[str, str | None],
) -> WaveInput:
    """A pool as the waves see it: the nodes whose driver changes (a node already labelled for
    an object of the same version does not move), or all of them when none does."""
    obj = d.driver_object
    moving: tuple[str, ...] = ()
    if obj is not None:
        spec = manifest_named(manifests, obj)["spec"]
        before = existing[obj].get("spec") if obj in existing else None
        same = isinstance(before, Mapping) and str(before.get("version")) == str(spec["version"])
        moving = tuple(n for n in d.pool.nodes if not (same and current_label.get(n) == obj))
    return WaveInput(
        name=d.pool.name,
        nodes=moving if moving else d.pool.nodes,
        before=d.current,
        after=d.chosen.serves if d.chosen is not None else d.current,
        changes=bool(moving),
        gains=len(d.gains),
    )


def _set_parallel_upgrades(
    manifests: list[dict[str, Any]], node_labels: Mapping[str, Mapping[str, str]], waves: Waves
) -> None:
    """Each object's ``maxParallelUpgrades``: the number of its nodes in its first wave."""
    wave_of = {n: w for w, nodes in enumerate(waves.waves) for n in nodes}
    for m in manifests:
        obj = m["metadata"]["name"]
        nodes = [n for n, lab in node_labels.items() if lab[L.DRIVER_POOL] == obj and n in wave_of]
        if nodes and "upgradePolicy" in m["spec"]:
            first = min(wave_of[n] for n in nodes)
            m["spec"]["upgradePolicy"]["maxParallelUpgrades"] = sum(
                1 for n in nodes if wave_of[n] == first
            )


def _warnings(
    run: _Run,
    choices: list[PoolChoice],
    decisions: list[PoolDecision],
    objects: tuple[DriverObject, ...],
    replaced: list[Replacement],
    node_labels: Mapping[str, Mapping[str, str]],
    waves: Waves,
) -> tuple[str, ...]:
    """The plan's warnings, each once: nodes that wait alone, selectors that would clash,
    each pool's lifecycle and support warnings, upgrades in flight, unreadable workloads."""
    warnings = [_stranded(node, groups, run.demand) for node, groups in waves.stranded]
    warnings.extend(
        selector_conflicts(
            run.snapshot.nvidia_drivers,
            run.snapshot.nodes,
            node_labels,
            (o.name for o in objects),
            (r.name for r in replaced),
        )
    )
    alternatives = {c.pool.name: [o for o in c.offer.options if o.weight > 0] for c in choices}
    warnings.extend(
        pool_warnings(
            decisions,
            run.kb,
            run.op,
            run.today,
            run.min_support_months,
            alternatives,
            run.demand.workloads,
        )
    )
    in_flight = _in_flight(run.snapshot)
    if in_flight is not None:
        warnings.append(in_flight)
    for ref, error in run.demand.unreadable:
        warnings.append(f"{ref}: requirement unreadable, left out of the plan: {error}")
    return tuple(dict.fromkeys(warnings))


def _stranded(node: str, groups: Iterable[int], demand: Demand) -> str:
    refs = workload_refs(frozenset(groups), demand)
    return (
        f"{node} is the only node that runs {', '.join(refs[:3])}"
        + (f" and {len(refs) - 3} more" if len(refs) > 3 else "")
        + ": they wait while its driver changes (its wave holds only it)"
    )


def _in_flight(snapshot: ClusterSnapshot) -> str | None:
    """A warning when a driver upgrade is under way on some node."""
    in_flight = [
        name_of(n)
        for n in snapshot.nodes
        if upgrade_state(labels_of(n)) not in (None, UPGRADE_DONE)
    ]
    if not in_flight:
        return None
    shown = ", ".join(in_flight[:3]) + (
        f" and {len(in_flight) - 3} more" if len(in_flight) > 3 else ""
    )
    return (
        f"a driver upgrade is in flight on {shown} ({UPGRADE_STATE_KEY} is not "
        f"{UPGRADE_DONE}): their drivers are planned from what they report now; plan again "
        "when the upgrade ends"
    )


def _gpu_counts(
    snapshot: ClusterSnapshot, node_labels: Mapping[str, Mapping[str, str]]
) -> dict[str, int]:
    return {name_of(n): gpu_capacity(n) for n in snapshot.nodes if name_of(n) in node_labels}
