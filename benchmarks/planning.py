"""Driver planning and recommendation at fleet scale.

For each fleet size (500 and 5,000 nodes by default), a synthetic cluster
(:func:`tests.support.synth.make_cluster`: nodes copied from the sample cluster's pools, 200
runtimes, 1,000 InferenceServices with their pending predictor pods) is planned with
:func:`cudasched.operations.drivers.planning.plan_drivers`, the way ``cudasched plan-drivers`` runs
it:

* **fleet**: building the :class:`~cudasched.cluster.fleet.Fleet` (node facts parsed once per label
  set), timed on its own since every command pays it;
* **plan**: the whole plan (demand, pools, options, choice, waves, NVIDIADriver objects), with
  its counts: pools, demand groups, workloads, engine checks (options x groups per pool);
* **naive**: the same decisions taken per node and per workload instead of per pool and per
  demand group: for every (node, candidate branch of its pool, workload) the engine runs once.
  Measured on a seeded sample of nodes for a time budget and extrapolated linearly to every
  node; the ratio naive/plan is what grouping saves;
* **recommend**: ``recommend-driver`` for every GPU product of the knowledge base with a few
  CUDA sets, per call.

Run ``python -m benchmarks.planning --help``; ``--quick`` is a small smoke run.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import date
from typing import Any

from benchmarks.common import Table, comma_list, loadavg, progress, report

__all__ = ["PlanningResult", "main", "run"]

TODAY = date(2026, 12, 1)


@dataclass(slots=True)
class SizeResult:
    nodes: int
    gpu_nodes: int
    runtimes: int
    pools: int
    groups: int
    workloads: int
    checks: int
    changing_pools: int
    waves: int
    fleet_s: float
    plan_s: float
    naive_sampled: int
    naive_s: float
    naive_full_s: float

    @property
    def naive_ratio(self) -> float:
        return self.naive_full_s / self.plan_s if self.plan_s else float("nan")


@dataclass(slots=True)
class PlanningResult:
    settings: dict[str, Any]
    sizes: list[SizeResult] = field(default_factory=list)
    recommend_calls: int = 0
    recommend_ms: float = float("nan")
    ratios: dict[str, float] = field(default_factory=dict)

    def table(self) -> str:
        t = Table(
            [
                "nodes",
                "GPU nodes",
                "runtimes",
                "pools",
                "demand groups",
                "workloads",
                "engine checks (at most)",
                "pools changing",
                "waves",
                "fleet s",
                "plan s",
                "naive sample",
                "naive s (all)",
                "naive/plan",
            ]
        )
        for s in self.sizes:
            t.add(
                s.nodes,
                s.gpu_nodes,
                s.runtimes,
                s.pools,
                s.groups,
                s.workloads,
                s.checks,
                s.changing_pools,
                s.waves,
                s.fleet_s,
                s.plan_s,
                s.naive_sampled,
                s.naive_full_s,
                s.naive_ratio,
            )
        r = Table(["ratio / figure", "value"])
        r.add("recommend-driver calls", self.recommend_calls)
        r.add("recommend-driver ms per call", self.recommend_ms)
        for name, value in self.ratios.items():
            r.add(name, value)
        return t.render() + "\n\n" + r.render()


def _naive(
    snapshot: Any, fleet: Any, plan: Any, budget_s: float, seed: int
) -> tuple[int, float, int]:
    """(nodes sampled, seconds, GPU nodes): every (node, candidate branch, workload) checked
    one by one, for a seeded sample of GPU nodes within the budget."""
    from cudasched.compat.branches import candidate_branches, gpu_target, judged_release, running
    from cudasched.compat.engine import check

    kb = fleet.kb
    facts_of = {node.name: facts for node, _, facts in fleet.members()}
    gpu_nodes = [n for d in plan.decisions for n in d.pool.nodes]
    order = random.Random(seed).sample(gpu_nodes, len(gpu_nodes))
    workloads = [
        (group.requirement, group.policy) for group in plan.demand.groups for _ in group.workloads
    ]
    sampled = 0
    started = time.perf_counter()
    for name in order:
        facts = facts_of[name]
        target = gpu_target(kb, facts)
        branches = candidate_branches(kb, target) if target is not None else ()
        for branch in branches:
            on = running(facts, judged_release(kb, branch, target), kb)
            for req, pol in workloads:
                check(on, req, pol, kb)
        for req, pol in workloads:
            check(facts, req, pol, kb)
        sampled += 1
        if time.perf_counter() - started > budget_s:
            break
    return sampled, time.perf_counter() - started, len(gpu_nodes)


def run(
    *,
    sizes: Sequence[int] = (500, 5000),
    runtimes: int = 200,
    isvcs: int = 1000,
    naive_budget_s: float = 10.0,
    seed: int = 4,
) -> PlanningResult:
    from tests.support import synth

    from cudasched.cluster.fleet import Fleet
    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.compat.branches import candidate_branches
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.images import ImageTable
    from cudasched.operations.drivers.planning import plan_drivers
    from cudasched.operations.drivers.recommend import recommend
    from cudasched.vocab.versions import parse_cuda

    kb = KnowledgeBase.load()
    images = ImageTable.builtin(kb)
    result = PlanningResult(
        {
            "sizes": list(sizes),
            "runtimes": runtimes,
            "isvcs": isvcs,
            "naive_budget_s": naive_budget_s,
            "as_of": TODAY.isoformat(),
            "loadavg_before": loadavg(),
        }
    )
    for size in sizes:
        progress(f"{size} nodes: generating the cluster")
        made = synth.make_cluster(size, runtimes=runtimes, isvcs=isvcs, seed=seed)
        snapshot = ClusterSnapshot(
            nodes=made.nodes,
            inference_services=made.inference_services,
            serving_runtimes=made.serving_runtimes,
            cluster_serving_runtimes=made.cluster_serving_runtimes,
            pods=made.pods,
        )
        progress(f"{size} nodes: planning")
        started = time.perf_counter()
        fleet = Fleet.from_snapshot(snapshot, kb)
        fleet_s = time.perf_counter() - started
        started = time.perf_counter()
        plan = plan_drivers(snapshot, fleet, images, today=TODAY)
        plan_s = time.perf_counter() - started
        # At most: candidate branches left out (end of life, kernel, no release) are not checked.
        checks = 0
        for d in plan.decisions:
            target = d.pool.target
            branches = len(candidate_branches(kb, target)) if target is not None else 0
            checks += (branches + 1) * len(plan.demand.groups) * len(d.pool.facts)
        progress(f"{size} nodes: naive per node and workload ({naive_budget_s:.0f} s budget)")
        sampled, naive_s, gpu_nodes = _naive(snapshot, fleet, plan, naive_budget_s, seed)
        result.sizes.append(
            SizeResult(
                nodes=size,
                gpu_nodes=plan.gpu_nodes,
                runtimes=len(made.serving_runtimes) + len(made.cluster_serving_runtimes),
                pools=len(plan.decisions),
                groups=len(plan.demand.groups),
                workloads=plan.demand.workloads,
                checks=checks,
                changing_pools=sum(1 for d in plan.decisions if d.changes),
                waves=len(plan.waves),
                fleet_s=fleet_s,
                plan_s=plan_s,
                naive_sampled=sampled,
                naive_s=naive_s,
                naive_full_s=naive_s / sampled * gpu_nodes if sampled else float("nan"),
            )
        )
    progress("recommend-driver for every GPU product")
    cuda_sets = ([], [parse_cuda("12.4")], [parse_cuda("12.8"), parse_cuda("13.0")])
    calls = 0
    started = time.perf_counter()
    for gpu in kb.gpus():
        for cudas in cuda_sets:
            recommend(kb, gpu.product, cudas, today=TODAY)
            calls += 1
    elapsed = time.perf_counter() - started
    result.recommend_calls = calls
    result.recommend_ms = elapsed / calls * 1000 if calls else float("nan")
    for s in result.sizes:
        result.ratios[f"naive/plan at {s.nodes} nodes"] = s.naive_ratio
    if len(result.sizes) >= 2:
        first, last = result.sizes[0], result.sizes[-1]
        result.ratios[f"plan s {last.nodes}/{first.nodes} nodes"] = (
            last.plan_s / first.plan_s if first.plan_s else float("nan")
        )
    result.settings["loadavg_after"] = loadavg()
    return result


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.planning",
        description="plan-drivers and recommend-driver at fleet scale, against per-node checks.",
    )
    p.add_argument("--quick", action="store_true", help="small, fast smoke run")
    p.add_argument("--sizes", default=None, help="fleet sizes, e.g. 500,5000")
    p.add_argument("--runtimes", type=int, default=None)
    p.add_argument("--isvcs", type=int, default=None)
    p.add_argument("--naive-budget", type=float, default=None, help="naive seconds per size")
    p.add_argument("--json", default=None, help="also write the results to this file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    quick = args.quick
    result = run(
        sizes=comma_list(args.sizes, int, (50, 200) if quick else (500, 5000)),
        runtimes=args.runtimes if args.runtimes is not None else (20 if quick else 200),
        isvcs=args.isvcs if args.isvcs is not None else (50 if quick else 1000),
        naive_budget_s=(
            args.naive_budget if args.naive_budget is not None else (0.5 if quick else 10.0)
        ),
    )
    report(
        "planning",
        argv,
        result.settings,
        result.table(),
        args.json,
        {
            "settings": result.settings,
            "sizes": [asdict(s) for s in result.sizes],
            "recommend_calls": result.recommend_calls,
            "recommend_ms": result.recommend_ms,
            "ratios": result.ratios,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
