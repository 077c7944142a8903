"""Fleet scale: ``cudasched.explain`` over many workloads and growing fleets.

For each fleet size (500 -> 5,000 -> 50,000 nodes by default) and a fixed set of 20,000
workloads (:func:`tests.support.synth.make_workloads`), this measures:

* **explain**: :func:`cudasched.explain.explain_many` over a prepared
  :class:`~cudasched.explain.Fleet` (the way ``cudasched explain`` runs it), plus reading each
  answer's eligible count (what the CLI overview shows). This is the decision cost: the
  per-node answers are lazy and not built. Fleet preparation is timed separately.
* **nodes**: then reading ``Explanation.nodes`` of every answer of that call, which builds the
  per-node answer tuples (``NodeExplanation`` blocks per distinct decision, fleet order
  restored). Timed separately and extrapolated the same way; explain + nodes is what a caller
  that reads every node pays (the table and JSON output).
* Each size has a time budget: when all workloads would not fit in it, a random sample
  (seeded) of the workloads is explained and the times are extrapolated linearly to the full
  count (the table says how many were measured).
* **naive**: the same question answered pair by pair, with no grouping of any kind: for every
  (workload, node) the compatibility engine runs on that node's facts and the merged affinity is
  matched and scored on that node. Node facts are read once per node (not per pair) and each
  workload's requirement is compiled and merged once; only the per-pair work is what grouping
  saves. Measured on a sample of workloads and extrapolated.
* **agreement**: on the naive sample both answers are compared node by node (eligibility and
  score); any difference is reported, since a fast wrong answer is worthless.

Linearity is shown as the cost per (workload, node) pair at each size and the ratio of the
extrapolated times between consecutive sizes next to the ratio of the sizes.

Run ``python -m benchmarks.fleet --help``; ``--quick`` is a small smoke run.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.common import Table, comma_list, loadavg, progress, report, scaling_exponent

__all__ = ["FleetResult", "SizeResult", "main", "naive_answers", "run"]


@dataclass(slots=True)
class SizeResult:
    """What one fleet size measured (seconds; ``*_full_s`` extrapolated to all workloads)."""

    nodes: int
    groups: int
    prepare_s: float
    workloads: int
    explained: int
    explain_s: float
    explain_full_s: float
    naive_sampled: int
    naive_s: float
    naive_full_s: float
    disagreements: int
    single_sampled: int = 0
    single_ms: float = float("nan")  # one explain() call, no sharing, per workload
    single_nodes_ms: float = float("nan")  # the same calls with .nodes read
    nodes_s: float = float("nan")  # materialising .nodes of the explained answers
    nodes_full_s: float = float("nan")
    # The same explain call's CPU time (this thread): on a shared machine the wall clock also
    # counts what other processes ran.
    explain_cpu_full_s: float = float("nan")

    @property
    def with_nodes_full_s(self) -> float:
        return self.explain_full_s + self.nodes_full_s

    @property
    def us_per_pair(self) -> float:
        pairs = self.explained * self.nodes
        return self.explain_s / pairs * 1e6 if pairs else float("nan")

    @property
    def naive_ratio(self) -> float:
        return self.naive_full_s / self.explain_full_s if self.explain_full_s else float("nan")


@dataclass(slots=True)
class FleetResult:
    settings: dict[str, Any]
    sizes: list[SizeResult] = field(default_factory=list)
    ratios: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def table(self) -> str:
        t = Table(
            [
                "nodes",
                "fact groups",
                "fleet prep s",
                "explained",
                "explain s (all)",
                "explain CPU s (all)",
                "+ nodes s (all)",
                "explain+nodes s (all)",
                "us/pair",
                "naive sample",
                "naive s (all)",
                "naive/explain",
                "disagree",
                "explain() ms/workload",
                "explain()+nodes ms/workload",
            ]
        )
        for s in self.sizes:
            t.add(
                s.nodes,
                s.groups,
                s.prepare_s,
                f"{s.explained}/{s.workloads}",
                s.explain_full_s,
                s.explain_cpu_full_s,
                s.nodes_full_s,
                s.with_nodes_full_s,
                s.us_per_pair,
                s.naive_sampled,
                s.naive_full_s,
                s.naive_ratio,
                s.disagreements,
                s.single_ms,
                s.single_nodes_ms,
            )
        r = Table(["ratio", "value"])
        for name, value in self.ratios.items():
            r.add(name, value)
        return t.render() + "\n\n" + r.render() + "\n\n" + "\n".join(self.notes)


def naive_answers(
    workload: Mapping[str, Any],
    nodes: Sequence[Any],
    facts: Sequence[Any],
    policy: Any,
    kb: Any,
    offered: Sequence[frozenset[str] | None] | None = None,
) -> list[tuple[bool, Any, bool | None]]:
    """(eligible, score, engine accepts) for every node, evaluated pair by pair with no
    grouping of nodes or workloads. ``offered``: the GPU resources each node offers (the
    scheduler's resource fit), ``None`` when not known."""
    from cudasched.compat.engine import check, resolve_policy
    from cudasched.compat.verdict import VerdictStatus
    from cudasched.explain.eligibility import requirement_from_annotations
    from cudasched.nodes.scheme import GfdKeys, choose_gfd_keys, choose_scheme
    from cudasched.placement.compile import compile_requirement
    from cudasched.placement.merge import merge_required
    from cudasched.vocab import labels as L
    from cudasched.vocab.errors import InputError
    from cudasched.vocab.nodeaffinity import PreferredTerms, RequiredNodeAffinity
    from cudasched.vocab.nodeterms import NodeSelectorError
    from cudasched.workloads.gpu import requested_gpu_resources
    from cudasched.workloads.pods import pod_spec_of

    spec = pod_spec_of(workload)
    requested = requested_gpu_resources(spec)
    resources = offered if offered is not None else [None] * len(nodes)
    req = requirement_from_annotations(workload)
    if req is not None and req.is_empty:
        req = None
    effective = resolve_policy(req, policy) if req is not None else policy
    scheme = choose_scheme(nodes)
    gfd_keys = choose_gfd_keys(nodes)
    terms: list[Any] = []
    impossible = False
    if req is not None:
        try:
            keys = gfd_keys if scheme is L.LabelScheme.GFD else GfdKeys.NEW
            terms = compile_requirement(req, effective, scheme, kb, keys)
        except InputError:
            impossible = True
    merged = merge_required(spec, terms) if req is not None else dict(spec)
    required = RequiredNodeAffinity.from_pod_spec(merged)
    try:
        preferred: PreferredTerms | None = PreferredTerms.from_pod_spec(merged)
    except NodeSelectorError:
        preferred = None
    out: list[tuple[bool, Any, bool | None]] = []
    for node, node_facts, gpus in zip(nodes, facts, resources, strict=True):
        # The engine's verdict for the pair (explain reports its reasons per node).
        compatible = (
            check(node_facts, req, effective, kb).status is not VerdictStatus.INCOMPATIBLE
            if req is not None
            else None
        )
        fits = gpus is None or requested <= gpus
        eligible = required.match(node) and not impossible and fits
        score = preferred.score(node) if preferred is not None else "error"
        out.append((eligible, score, compatible))
    return out


def run(
    *,
    sizes: Sequence[int] = (500, 5000, 50000),
    workloads: int = 20000,
    budget_s: float = 30.0,
    naive_budget_s: float = 15.0,
    policy: str = "strict",
    max_pairs: int = 100_000_000,
) -> FleetResult:
    """Measure every size; see the module docstring for what is timed and what is sampled."""
    from tests.support import synth

    from cudasched.cluster.fleet import Fleet
    from cudasched.explain.eligibility import explain, explain_many
    from cudasched.knowledge import KnowledgeBase
    from cudasched.nodes.facts import facts_from_labels
    from cudasched.vocab.requirements import Policy
    from cudasched.workloads.gpu import node_gpu_resources

    kb = KnowledgeBase.load()
    base_policy = Policy.parse(policy)
    result = FleetResult(
        {
            "sizes": list(sizes),
            "workloads": workloads,
            "budget_s": budget_s,
            "naive_budget_s": naive_budget_s,
            "policy": policy,
            "max_pairs": max_pairs,
            "loadavg_before": loadavg(),
        }
    )
    progress(f"generating {workloads} workloads")
    items = synth.make_workloads(workloads)
    for size in sizes:
        progress(f"{size} nodes: generating the fleet")
        node_objs = synth.make_nodes(size)
        started = time.perf_counter()
        fleet = Fleet(node_objs, kb)
        prepare = time.perf_counter() - started
        offered = [node_gpu_resources(o) for o in node_objs]  # for the naive reference
        del node_objs

        # Explain: one call on a growing prefix of a seeded shuffle (16, 32, 64, ... workloads)
        # until a call takes more than half the budget or covers every workload. Whole calls,
        # not chunks, because explain_many shares answers between the workloads it is given;
        # extrapolating the last prefix linearly is therefore conservative.
        order = random.Random(7).sample(items, len(items))  # any prefix is a fair sample
        done = min(len(order), 16, max(1, max_pairs // max(1, size)))
        while True:
            # As `cudasched explain` does (cli/explain.py) for its one call: what is alive
            # before the call (the inputs, the fleet and what earlier calls left in it) out of
            # the garbage collector's sight while it runs. Frozen again before every call, so
            # the measured call sees what the command's call sees, not the collector's counts
            # left by the smaller calls before it (which made it run full collections).
            gc.unfreeze()
            gc.collect()
            gc.freeze()
            started = time.perf_counter()
            cpu = time.thread_time()
            answers = explain_many(order[:done], fleet, base_policy, kb)
            counts = [a.eligible_count for a in answers]  # the CLI overview's read
            spent = time.perf_counter() - started
            cpu_spent = time.thread_time() - cpu
            del counts
            limit = min(len(order), max(1, max_pairs // max(1, size)))
            if done >= limit or spent > budget_s / 2:
                break
            # Grow towards what the rest of the budget allows, at most 8x per step.
            affordable = int(done * (budget_s / 2) / spent) if spent > 0 else done * 8
            done = max(done + 1, min(limit, done * 8, affordable))
            del answers
        # Materialising every per-node answer of the same call, timed on its own.
        started = time.perf_counter()
        built = sum(len(a.nodes) for a in answers)
        nodes_spent = time.perf_counter() - started
        gc.unfreeze()
        assert built == done * size
        explained = list(zip(order[: min(64, done)], answers[:64], strict=True))
        del answers
        full = spent / done * len(items)
        nodes_full = nodes_spent / done * len(items)

        # Single calls: explain() one workload at a time shares nothing between workloads, so
        # its cost per workload is the per-workload linearity measure.
        single_done = 0
        single_spent = 0.0
        single_nodes_spent = 0.0
        for workload in order[:200]:
            if single_spent + single_nodes_spent >= budget_s / 4:
                break
            started = time.perf_counter()
            answer = explain(workload, fleet, base_policy, kb)
            decided = time.perf_counter()
            answer.nodes  # noqa: B018 - builds the per-node answers
            single_nodes_spent += time.perf_counter() - decided
            single_spent += decided - started
            single_done += 1

        # Naive: pair by pair on a sample of the workloads explained above.
        progress(f"{size} nodes: naive pair-by-pair on a sample")
        nodes = fleet.nodes
        facts = [facts_from_labels(n.name, n.labels, kb) for n in nodes]
        naive_done = 0
        naive_spent = 0.0
        disagreements = 0
        for workload, answer in explained:
            if naive_spent >= naive_budget_s:
                break
            started = time.perf_counter()
            pairs = naive_answers(workload, nodes, facts, base_policy, kb, offered)
            naive_spent += time.perf_counter() - started
            naive_done += 1
            for (eligible, score, _), node_answer in zip(pairs, answer.nodes, strict=True):
                if eligible != node_answer.eligible or score != node_answer.score:
                    disagreements += 1
        naive_full = naive_spent / naive_done * len(items) if naive_done else float("nan")
        result.sizes.append(
            SizeResult(
                nodes=size,
                groups=fleet.group_count,
                prepare_s=prepare,
                workloads=len(items),
                explained=done,
                explain_s=spent,
                explain_full_s=full,
                naive_sampled=naive_done,
                naive_s=naive_spent,
                naive_full_s=naive_full,
                disagreements=disagreements,
                single_sampled=single_done,
                single_ms=single_spent / single_done * 1e3 if single_done else float("nan"),
                single_nodes_ms=(
                    (single_spent + single_nodes_spent) / single_done * 1e3
                    if single_done
                    else float("nan")
                ),
                nodes_s=nodes_spent,
                nodes_full_s=nodes_full,
                explain_cpu_full_s=cpu_spent / done * len(items),
            )
        )
        progress(
            f"{size} nodes: explain {full:.2f}s for all {len(items)} "
            f"({done} measured), + nodes {nodes_full:.2f}s, "
            f"naive {naive_full:.1f}s ({naive_done} measured)"
        )
        del fleet, nodes, facts
    _ratios(result)
    result.settings["loadavg_after"] = loadavg()
    return result


def _ratios(result: FleetResult) -> None:
    sizes = result.sizes
    for a, b in itertools.pairwise(sizes):
        grow = b.nodes / a.nodes
        ratio = b.explain_full_s / a.explain_full_s if a.explain_full_s else float("nan")
        result.ratios[f"explain time {b.nodes}/{a.nodes} nodes (size x{grow:g})"] = ratio
        if (exponent := scaling_exponent(ratio, grow)) is not None:
            result.ratios[f"scaling exponent {a.nodes}->{b.nodes} (1 = linear)"] = exponent
        with_nodes = (
            b.single_nodes_ms / a.single_nodes_ms if a.single_nodes_ms > 0 else float("nan")
        )
        if (exponent := scaling_exponent(with_nodes, grow)) is not None:
            result.ratios[f"explain()+nodes scaling exponent {a.nodes}->{b.nodes}"] = exponent
        single = b.single_ms / a.single_ms if a.single_ms > 0 else float("nan")
        if (exponent := scaling_exponent(single, grow)) is not None:
            result.ratios[f"explain() per workload {b.nodes}/{a.nodes} nodes"] = single
            result.ratios[f"explain() scaling exponent {a.nodes}->{b.nodes} (1 = linear)"] = (
                exponent
            )
    for s in sizes:
        result.ratios[f"naive/explain at {s.nodes} nodes"] = s.naive_ratio
        if s.explained < s.workloads:
            result.notes.append(
                f"{s.nodes} nodes: explain measured on {s.explained} of {s.workloads} workloads "
                "(a seeded random sample) and extrapolated linearly."
            )
        if s.naive_sampled < s.workloads:
            result.notes.append(
                f"{s.nodes} nodes: naive measured on {s.naive_sampled} workloads and "
                "extrapolated linearly."
            )
        if s.disagreements:
            result.notes.append(
                f"{s.nodes} nodes: {s.disagreements} (workload, node) answers differ between "
                "explain and the naive evaluation!"
            )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.fleet",
        description="cudasched.explain over growing fleets, against naive pair-by-pair evaluation.",
    )
    p.add_argument("--quick", action="store_true", help="small, fast smoke run")
    p.add_argument("--sizes", default=None, help="fleet sizes, e.g. 500,5000,50000")
    p.add_argument("--workloads", type=int, default=None)
    p.add_argument("--budget", type=float, default=None, help="explain seconds per size")
    p.add_argument("--naive-budget", type=float, default=None, help="naive seconds per size")
    p.add_argument("--policy", default="strict")
    p.add_argument("--json", default=None, help="also write the results to this file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    quick = args.quick
    sizes = comma_list(args.sizes, int, (50, 500) if quick else (500, 5000, 50000))
    result = run(
        sizes=sizes,
        workloads=args.workloads if args.workloads is not None else (500 if quick else 20000),
        budget_s=args.budget if args.budget is not None else (1.0 if quick else 30.0),
        naive_budget_s=(
            args.naive_budget if args.naive_budget is not None else (0.5 if quick else 15.0)
        ),
        policy=args.policy,
    )
    report(
        "fleet",
        argv,
        result.settings,
        result.table(),
        args.json,
        {
            "settings": result.settings,
            "sizes": [asdict(s) for s in result.sizes],
            "ratios": result.ratios,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
