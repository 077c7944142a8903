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

from collections.abc import Mapping
from dataclasses import replace
from datetime import date
from typing import TYPE_CHECKING, Any

from cudasched.operations.drivers.demand import cluster_demand
from cudasched.operations.drivers.notes import label_homes, plan_notes, pool_warnings
from cudasched.operations.drivers.nvidiadriver import (
    immutable_renames,
    nvidia_driver,
    object_name,
    selector_conflicts,
    stale_objects,
)
from cudasched.operations.drivers.plan import (
    DriverPlan,
    PoolDecision,
    change_of,
    with_action,
    workload_refs,
)
from cudasched.operations.drivers.planoptions import (
    Judge,
    Option,
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
from cudasched.operations.drivers.waves import WaveInput, plan_waves, wave_capacity
from cudasched.operations.nodelabels import (
    UPGRADE_DONE,
    UPGRADE_STATE_KEY,
    gpu_capacity,
    upgrade_state,
)
from cudasched.operations.pools import node_pools
from cudasched.vocab import labels as L
from cudasched.vocab.objects import labels_of, name_of
from cudasched.vocab.requirements import Policy

if TYPE_CHECKING:
    from cudasched.cluster.fleet import Fleet
    from cudasched.cluster.snapshot import ClusterSnapshot
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
        keep = keeps[i]
        current = keep.serves if keep is not None else frozenset()
        pick = chosen[i]
        after = pick.serves if pick is not None else current
        why = pool_why(
            pool, pick, keep, options[i], left[i], pinned.get(i, []), demand, kb,
            precompiled, target_cuda,
        )  # fmt: skip
        blocked = (
            blocked_by_os(pool, pick, left[i], judge, today, demand.workloads)
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
                change=change_of(pool, pick),
                gains=workload_refs(after - current, demand),
                loses=workload_refs(current - after, demand),
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
        module = opt.module if opt.module is not None else current_module(kb, first.pool)
        manifests.append(
            nvidia_driver(
                name,
                version=opt.version,
                module=module.value if module is not None else None,
                precompiled=opt.precompiled,
                operator=op,
                max_unavailable=max_unavailable,
                max_parallel=1,
                description="; ".join(plan_line(drafts[i], opt) for i in idx),
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
            action = host_action(d)
        image = driver_image(d.pool, d.chosen, op) if obj is not None and d.chosen else None
        if image is not None and d.pool.os is not None and not image.endswith(f"-{d.pool.os}"):
            d = replace(
                d,
                why=(
                    *d.why,
                    f"GPU Operator {op.version} pulls {image}: releases before v26.7 tag RHEL 8 "
                    "and 9 driver images with the minor version",
                ),
            )
        decisions.append(with_action(d, action, obj, image))
    in_use = set(object_of.values()) | {
        labels_of(n).get(L.DRIVER_POOL, "") for n in snapshot.nodes if name_of(n) not in node_labels
    }
    already = {r.name for r in replaced}
    replaced += [r for r in stale_objects(snapshot.nvidia_drivers, in_use) if r.name not in already]

    homes = frozenset().union(*(d.chosen.serves for d in decisions if d.chosen is not None))
    every = [([k] if k is not None else []) + o for k, o in zip(keeps, options, strict=True)]
    homeless = unservable(
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
            spec = manifest_named(manifests, obj)["spec"]
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
            first_wave = min(wave_of[n] for n in nodes)
            m["spec"]["upgradePolicy"]["maxParallelUpgrades"] = sum(
                1 for n in nodes if wave_of[n] == first_wave
            )
    objects = tuple(driver_object(m, decisions, node_labels) for m in manifests)

    for node, groups in waves.stranded:
        refs = workload_refs(frozenset(groups), demand)
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
        pool_warnings(decisions, kb, op, today, min_support_months, alternatives, demand.workloads)
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

    default_version, default_note = default_driver(decisions, op)
    notes = [
        *operator_notes,
        *plan_notes(
            objects,
            decisions,
            op,
            operator_source,
            default_note,
            replaced,
            label_homes(objects, snapshot.nodes, kb),
        ),
    ]
    return DriverPlan(
        decisions=tuple(decisions),
        demand=demand,
        objects=objects,
        node_labels=node_labels,
        waves=waves.waves,
        wave_capacity=waves.capacity,
        unservable=tuple(homeless),
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


def _gpu_counts(
    snapshot: ClusterSnapshot, node_labels: Mapping[str, Mapping[str, str]]
) -> dict[str, int]:
    return {name_of(n): gpu_capacity(n) for n in snapshot.nodes if name_of(n) in node_labels}
