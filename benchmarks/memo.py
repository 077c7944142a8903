"""The decision memo under the admission benchmark's working set: how much of it is answered.

The reviews of :mod:`benchmarks.admission` (``--bodies`` reviews of ``--isvcs`` predictor pods
on a ``--nodes`` cluster) go through the production
:class:`~cudasched.webhook.admission.admitter.Admitter` in process, in the order the load generators
send them, ``--passes`` times, for each memo budget of ``--budgets`` (bytes; the default 16 MiB and
smaller ones). For each pass the table gives how many reviews the memo answered (found without
deciding), and what the memo holds at the end: entries (requests remembered) and bytes. Nothing is
timed: this is the policy's hit rate under a cyclic working set (issue 22: first-in-first-out
answered none of it once the set outgrew the budget).

Run ``python -m benchmarks.memo --help``; ``--quick`` is a small smoke run.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.common import Table, comma_list, loadavg, progress, report

__all__ = ["MemoResult", "main", "run"]

MIB = 1024 * 1024


@dataclass(slots=True)
class Budget:
    budget: int
    hits: list[int]
    entries: int
    bytes_used: int


@dataclass(slots=True)
class MemoResult:
    settings: dict[str, Any]
    budgets: list[Budget] = field(default_factory=list)

    def table(self) -> str:
        passes = max((len(b.hits) for b in self.budgets), default=0)
        t = Table(
            ["budget MiB", *(f"pass {i + 1} hits" for i in range(passes)), "entries", "MiB used"]
        )
        total = self.settings["bodies"]
        for b in self.budgets:
            cells = [f"{h} ({h / total:.0%})" for h in b.hits]
            t.add(round(b.budget / MIB, 2), *cells, b.entries, round(b.bytes_used / MIB, 2))
        return t.render()


def run(
    *,
    nodes: int = 5000,
    runtimes: int = 200,
    isvcs: int = 1000,
    bodies: int = 2000,
    passes: int = 3,
    budgets: Sequence[int] = (16 * MIB, 4 * MIB, 2 * MIB, MIB),
) -> MemoResult:
    from tests.support import synth

    from cudasched.knowledge import KnowledgeBase
    from cudasched.settings.config import WebhookConfig
    from cudasched.webhook.admission.admitter import Admitter
    from cudasched.webhook.state.clusterstate import ClusterState

    settings: dict[str, Any] = {
        "nodes": nodes,
        "runtimes": runtimes,
        "isvcs": isvcs,
        "bodies": bodies,
        "passes": passes,
        "budgets": list(budgets),
        "loadavg_before": loadavg(),
    }
    progress(f"generating {bodies} AdmissionReviews from a {nodes}-node synthetic cluster")
    kb = KnowledgeBase.load()
    cluster = synth.make_cluster(nodes, runtimes, max(isvcs, 1))
    reviews = synth.review_bodies(cluster, bodies)
    state = ClusterState.from_objects(
        cluster.nodes,
        cluster.inference_services,
        cluster.serving_runtimes,
        cluster.cluster_serving_runtimes,
        kb=kb,
    )
    result = MemoResult(settings)
    for budget in budgets:
        progress(f"budget {budget / MIB:g} MiB: {passes} passes")
        admitter = Admitter.from_config(
            WebhookConfig.from_mapping({"decisionCacheBytes": budget}), kb
        )
        hits: list[int] = []
        for _ in range(passes):
            found = 0
            for body in reviews:
                if admitter.recall_body("pod", body, state) is not None:
                    found += 1
                else:
                    admitter.review("pod", body, state)
            hits.append(found)
        memo = admitter.memo
        result.budgets.append(Budget(budget, hits, len(memo), memo.bytes_used))
    settings["loadavg_after"] = loadavg()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.memo", description=__doc__)
    p.add_argument("--quick", action="store_true", help="small, fast smoke run")
    p.add_argument("--nodes", type=int, default=None)
    p.add_argument("--runtimes", type=int, default=None)
    p.add_argument("--isvcs", type=int, default=None)
    p.add_argument("--bodies", type=int, default=None)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--budgets", default=None, help="memo budgets in bytes, e.g. 16777216,1048576")
    p.add_argument("--json", default=None, help="also write the results to this file")
    args = p.parse_args(argv)
    quick = args.quick
    result = run(
        nodes=args.nodes if args.nodes is not None else (100 if quick else 5000),
        runtimes=args.runtimes if args.runtimes is not None else (20 if quick else 200),
        isvcs=args.isvcs if args.isvcs is not None else (40 if quick else 1000),
        bodies=args.bodies if args.bodies is not None else (80 if quick else 2000),
        passes=args.passes,
        budgets=comma_list(
            args.budgets, int, (16 * MIB, 64 * 1024) if quick else (16 * MIB, 4 * MIB, 2 * MIB, MIB)
        ),
    )
    report(
        "memo",
        argv,
        result.settings,
        result.table(),
        args.json,
        {"settings": result.settings, "budgets": [asdict(b) for b in result.budgets]},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
