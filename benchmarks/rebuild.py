"""Cost of rebuilding the webhook's cluster snapshot, against decoding the same objects.

The watch cache rebuilds its :class:`~cudasched.webhook.state.clusterstate.ClusterState` (node
facts, label scheme, runtime choice per InferenceService) whenever something admission can see
changes. The rebuild runs in a thread, but it holds the GIL for most of its time, so its length is
how long admission competes with it for the CPU; every rebuild also empties the decision memo.

Measured per fleet size, in the same process and on the same synthetic objects
(:mod:`tests.support.synth`, seeded):

* **decode** (the baseline): ``orjson.loads`` of the cache's objects serialised as one JSON
  document, what receiving them from the API server costs at the least;
* **rebuild**: ``ClusterState.from_objects`` over the decoded objects.

Each is the median of ``--repeats`` runs; the ratio rebuild/decode and the growth from one size
to the next (1 = linear) are printed. Run ``python -m benchmarks.rebuild --help``; ``--quick`` is
a small smoke run.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from benchmarks.common import Table, comma_list, loadavg, progress, report, scaling_exponent

__all__ = ["RebuildResult", "main", "run"]


@dataclass(slots=True)
class Size:
    nodes: int
    isvcs: int
    runtimes: int
    decode_s: float
    rebuild_s: float

    @property
    def ratio(self) -> float:
        return self.rebuild_s / self.decode_s if self.decode_s > 0 else math.inf


@dataclass(slots=True)
class RebuildResult:
    settings: dict[str, Any]
    sizes: list[Size] = field(default_factory=list)
    ratios: dict[str, float] = field(default_factory=dict)

    def table(self) -> str:
        t = Table(["nodes", "isvcs", "runtimes", "decode s", "rebuild s", "rebuild/decode"])
        for s in self.sizes:
            t.add(s.nodes, s.isvcs, s.runtimes, s.decode_s, s.rebuild_s, s.ratio)
        r = Table(["ratio", "value"])
        for name, value in self.ratios.items():
            r.add(name, value)
        return t.render() + "\n\n" + r.render()


def _median_seconds(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run(
    *,
    sizes: Sequence[int] = (500, 5000, 50000),
    isvcs: int = 1000,
    runtimes: int = 200,
    repeats: int = 3,
) -> RebuildResult:
    """Decode and rebuild at each fleet size; ratios against decoding in the same run."""
    from tests.support import synth

    from benchmarks.admission import _trim_node
    from cudasched.knowledge import KnowledgeBase
    from cudasched.webhook.state.clusterstate import ClusterState

    settings: dict[str, Any] = {
        "sizes": list(sizes),
        "isvcs": isvcs,
        "runtimes": runtimes,
        "repeats": repeats,
        "loadavg_before": loadavg(),
    }
    result = RebuildResult(settings)
    kb = KnowledgeBase.load()
    for nodes in sizes:
        progress(f"{nodes} nodes: generating the synthetic cluster")
        cluster = synth.make_cluster(nodes, runtimes, isvcs)
        blob = orjson.dumps(
            [
                [_trim_node(n) for n in cluster.nodes],
                list(cluster.inference_services),
                list(cluster.serving_runtimes),
                list(cluster.cluster_serving_runtimes),
            ]
        )
        del cluster
        progress(f"{nodes} nodes: decode x{repeats}")
        decode_s = _median_seconds(lambda blob=blob: orjson.loads(blob), repeats)
        objects = orjson.loads(blob)
        progress(f"{nodes} nodes: rebuild x{repeats}")
        rebuild_s = _median_seconds(
            lambda objects=objects: ClusterState.from_objects(*objects, kb=kb), repeats
        )
        result.sizes.append(Size(nodes, isvcs, runtimes, decode_s, rebuild_s))
    for a, b in itertools.pairwise(result.sizes):
        growth = b.nodes / a.nodes
        grew = b.rebuild_s / a.rebuild_s if a.rebuild_s > 0 else float("nan")
        if (exponent := scaling_exponent(grew, growth)) is not None:
            result.ratios[f"rebuild time {b.nodes}/{a.nodes} nodes (size x{growth:g})"] = grew
            result.ratios[f"scaling exponent {a.nodes}->{b.nodes} (1 = linear)"] = exponent
    for s in result.sizes:
        result.ratios[f"rebuild/decode at {s.nodes} nodes"] = s.ratio
    settings["loadavg_after"] = loadavg()
    return result


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.rebuild",
        description="Cluster-snapshot rebuild time against decoding the same objects.",
    )
    p.add_argument("--quick", action="store_true", help="small, fast smoke run")
    p.add_argument("--sizes", default=None, help="node counts, e.g. 500,5000,50000")
    p.add_argument("--isvcs", type=int, default=None)
    p.add_argument("--runtimes", type=int, default=None)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--json", default=None, help="also write the results to this file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    quick = args.quick
    sizes = comma_list(args.sizes, int, (50, 500) if quick else (500, 5000, 50000))
    result = run(
        sizes=sizes,
        isvcs=args.isvcs if args.isvcs is not None else (50 if quick else 1000),
        runtimes=args.runtimes if args.runtimes is not None else (20 if quick else 200),
        repeats=args.repeats if args.repeats is not None else (1 if quick else 3),
    )
    report(
        "rebuild",
        argv,
        result.settings,
        result.table(),
        args.json,
        {
            "settings": result.settings,
            "sizes": [asdict(s) | {"ratio": s.ratio} for s in result.sizes],
            "ratios": result.ratios,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
