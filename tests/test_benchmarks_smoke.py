"""Smoke test of the benchmark scripts: each one runs end to end on a tiny size and reports
its ratios. No timing is asserted (numbers belong in benchmarks/RESULTS.md); what is asserted is
that the scripts still work against the current code, that every request was answered, and
that explain and the naive pair-by-pair evaluation agree."""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(ROOT))

    def load(name: str) -> ModuleType:
        return importlib.import_module(f"benchmarks.{name}")

    return load


def _finite(ratios: dict[str, float]) -> bool:
    """Every ratio is a number; only scaling exponents may be <= 0 (timing noise at tiny
    sizes can make a bigger fleet look no slower)."""
    return bool(ratios) and all(
        math.isfinite(v) and (v > 0 or "exponent" in k) for k, v in ratios.items()
    )


def test_fleet_quick(bench) -> None:
    fleet = bench("fleet")
    result = fleet.run(sizes=(20, 60), workloads=30, budget_s=0.3, naive_budget_s=0.2)
    assert [s.nodes for s in result.sizes] == [20, 60]
    assert all(s.disagreements == 0 and s.explained > 0 for s in result.sizes)
    assert _finite(result.ratios)
    assert "naive/explain" in result.table()


def test_memory_quick(bench) -> None:
    memory = bench("memory")
    result = memory.run(nodes=30, runtimes=10, isvcs=8, requests=5)
    assert [s.answered for s in result.samples] == [5, 5]
    assert all(s.rss_mib > 0 for s in result.samples)
    assert _finite({k: v for k, v in result.ratios.items() if "added" not in k})


def test_memo_quick(bench) -> None:
    memo = bench("memo")
    result = memo.run(nodes=30, runtimes=10, isvcs=8, bodies=16, passes=2, budgets=(1 << 20,))
    (only,) = result.budgets
    assert only.hits[1] == 16  # a budget that holds the working set answers every repeat
    assert 0 < only.bytes_used <= 1 << 20
    assert "pass 2 hits" in result.table()


def test_admission_quick(bench) -> None:
    admission = bench("admission")
    result = admission.run(
        nodes=30,
        runtimes=10,
        isvcs=8,
        bodies=8,
        duration=0.3,
        rates=(40.0,),
        connections=2,
        max_requests=200,
        use_wrk=False,
    )
    for server in ("noop", "noop-stack", "mutation", "mutation-nomemo"):
        runs = result.runs[server]
        assert [r.mode for r in runs] == ["saturation", "rate=40/s"]
        assert all(r.ok > 0 and r.errors == 0 for r in runs)
    assert _finite(result.ratios)
    assert "throughput noop/mutation (python)" in result.ratios
    assert "throughput noop-stack/mutation-nomemo (python)" in result.ratios
    assert result.in_process > 0 and result.in_process_nomemo > 0


def test_wrk_output_is_parsed(bench) -> None:
    admission = bench("admission")
    out = """Running 2s test @ https://127.0.0.1:4443/mutate/pods
  1 threads and 8 connections
  Latency Distribution
     50%  410.00us
     75%  600.00us
     90%    1.20ms
     99%    3.50ms
  4512 requests in 2.00s, 1.23MB read
  Non-2xx or 3xx responses: 12
Requests/sec:   2256.00
"""
    r = admission._parse_wrk(out)
    assert (r.sent, r.ok, r.errors) == (4512, 4500, 12)
    assert r.p50_ms == pytest.approx(0.41) and r.p99_ms == pytest.approx(3.5)
    assert r.rps == pytest.approx(2250.0)


def test_rebuild_quick(bench) -> None:
    rebuild = bench("rebuild")
    result = rebuild.run(sizes=(20, 60), isvcs=10, runtimes=6, repeats=1)
    assert [s.nodes for s in result.sizes] == [20, 60]
    assert all(s.decode_s > 0 and s.rebuild_s > 0 for s in result.sizes)
    assert _finite(result.ratios)
    assert "rebuild/decode" in result.table()


def test_startup_quick(bench) -> None:
    startup = bench("startup")
    times = startup.run(1)
    assert set(times) == {"baseline", "help", "check", "check-cold"}
    assert all(len(v) == 1 and v[0] > 0 for v in times.values())


def test_planning_quick(bench) -> None:
    planning = bench("planning")
    result = planning.run(sizes=(30, 60), runtimes=12, isvcs=16, naive_budget_s=0.2)
    assert [s.nodes for s in result.sizes] == [30, 60]
    assert all(s.pools > 0 and s.workloads > 0 and s.naive_sampled > 0 for s in result.sizes)
    assert result.recommend_calls > 0
    assert _finite(result.ratios)


def test_image_resolver_benchmark_runs(bench) -> None:
    ratios = bench("imageresolver").run(reviews=40)
    assert set(ratios) == {
        "off_ms_per_review",
        "on_ms_per_review",
        "on_over_off",
        "cached_lookups_per_s",
    }
    assert _finite(ratios)


#: kube-scheduler's metrics as it prints them, cut to what the control-plane benchmark reads.
_SCHEDULER_METRICS = """\
# TYPE scheduler_scheduling_algorithm_duration_seconds histogram
scheduler_scheduling_algorithm_duration_seconds_bucket{le="0.001"} 2
scheduler_scheduling_algorithm_duration_seconds_bucket{le="0.01"} 8
scheduler_scheduling_algorithm_duration_seconds_bucket{le="+Inf"} 10
scheduler_scheduling_algorithm_duration_seconds_sum 0.05
scheduler_scheduling_algorithm_duration_seconds_count 10
scheduler_plugin_execution_duration_seconds_sum{extension_point="Filter",plugin="NodeAffinity",status="Success"} 0.002
scheduler_plugin_execution_duration_seconds_count{extension_point="Filter",plugin="NodeAffinity",status="Success"} 1000
scheduler_plugin_execution_duration_seconds_sum{extension_point="Filter",plugin="TaintToleration",status="Success"} 9
scheduler_plugin_execution_duration_seconds_count{extension_point="Filter",plugin="TaintToleration",status="Success"} 9
scheduler_plugin_execution_duration_seconds_sum{extension_point="PreFilter",plugin="NodeAffinity",status="Success"} 0.0001
scheduler_plugin_execution_duration_seconds_count{extension_point="PreFilter",plugin="NodeAffinity",status="Success"} 10
scheduler_plugin_evaluation_total{extension_point="Filter",plugin="NodeAffinity",profile="default-scheduler"} 1000
scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"} 10
"""  # noqa: E501


def test_controlplane_benchmark_reads_the_scheduler_metrics(bench) -> None:
    """What the control-plane benchmark reads from kube-scheduler, checked without one
    (tests/e2e runs the whole benchmark against a real one)."""
    metrics = bench("controlplane.metrics")
    algorithm = "scheduler_scheduling_algorithm_duration_seconds"
    total, count, buckets = metrics.histogram(_SCHEDULER_METRICS, algorithm)
    assert (total, count) == (0.05, 10)
    assert buckets == [(0.001, 2), (0.01, 8), (math.inf, 10)]
    assert metrics.quantile(buckets, 0.5) == pytest.approx(0.0055)  # 3 of the 6 in (1, 10] ms
    assert metrics.quantile(buckets, 0.99) == 0.01  # in the +Inf bucket: its lower bound
    per_node, per_pod, nodes_per_pod = metrics.node_affinity(_SCHEDULER_METRICS)
    assert (per_node, per_pod, nodes_per_pod) == pytest.approx((2e-6, 1e-5, 100))


def test_controlplane_benchmark_reports_its_ratios(bench) -> None:
    create, schedule, match = (bench(f"controlplane.{m}") for m in ("create", "schedule", "match"))
    pods, report = bench("controlplane.pods"), bench("controlplane.report")
    creates = [
        create.CreateResult(series, 10, p50, p50, 2 * p50, p50, 0, plugins_ms=p50 / 4)
        for series, p50 in (
            (create.WEBHOOK, 4.0),
            (create.NONE, 2.0),
            (create.PLACED, 3.0),
            (create.POLICY, 2.2),
            (create.TRIVIAL, 2.1),
            (create.CPU, 2.0),
        )
    ]
    shapes = (pods.PLAIN, pods.BARE, pods.SAME, pods.AUTO, pods.OURS)
    schedules = [
        schedule.ScheduleResult(100, shape, 10, 1.0, 100.0, 2.0, 4.0, 1.0, 10, 1.0, 10.0, 50.0)
        for shape in shapes
    ]
    matches = [match.MatchResult(100, shape, 200.0, 5.0, 42) for shape in (pods.SAME, pods.AUTO)]
    text = report.render(creates, schedules, matches, (100,))
    assert "ratio webhook/no admission (GPU pods): p50 2.00, p99 2.00; added p50 2.0 ms" in text
    assert "the webhook's call beyond it: p50 1.0 ms" in text
    assert "ratio policy/no admission (GPU pods): p50 1.10, p99 1.10 (goal p99 <= 1.2)" in text
    assert "ratio trivial policy (one constant patch)/no admission: p50 1.05, p99 1.05" in text
    assert "policy plugins per pod: trivial policy 0.53 ms, cudasched's policies 0.55 ms" in text
    assert f"100 nodes, {pods.OURS}: throughput with/without 1.00" in text
    assert "over one In admitting the same nodes: 0.00 ms per pod" in text
    assert report.render([], [], [], (100,)) == ""  # nothing measured, nothing shown


def test_layerreads_quick(bench) -> None:
    layerreads = bench("layerreads")
    result = layerreads.run(gib=0.02, budget_gib=0.01)
    by = {r.name: r for r in result.reads}
    assert by["runners-over-weights"].cuda == "12.8" and by["runners-over-weights"].layers_read == 1
    assert by["weights-then-runtime"].cuda == "12.8"
    assert by["weights-budget"].cuda is None and "bytes budget" in by["weights-budget"].stopped
    assert by["pip-torch"].cuda == "12.6" and by["sbom"].cuda == "12.8"
    assert by["gzip-weights-then-runtime"].cuda == "12.8"
    libs = by["gzip-libs-over-runtime"]
    # four 4 MiB libraries, about half their size once compressed
    assert (libs.cuda, libs.layers_read) == ("12.8", 2) and libs.bytes < 12 * 2**20
    assert _finite({k: v for k, v in result.ratios.items() if "added" not in k})


def test_heldout_counts_each_verdict(bench) -> None:
    """The evaluation's verdicts on planted rows (none of the held-out set's images): the
    answer's major.minor against the row's, newer over-strict, older unsafe, none unknown."""
    heldout = bench("heldout")
    rows = [
        {"image": "nvidia/cuda:12.4.1-base-ubuntu22.04", "cuda": truth, "family": "planted"}
        for truth in ("12.4.1", "12.2", "12.6")
    ] + [{"image": "example.com/team/server:1", "cuda": "12.1", "family": "planted"}]
    verdicts = [o.verdict for o in heldout.evaluate(rows)]
    assert verdicts == ["exact", "over-strict", "unsafe", "unknown"]
    assert len(heldout.load_set()) == 100


@pytest.mark.parametrize("later", [1, 2])
def test_later_heldout_set_is_new(bench, later: int) -> None:
    """Each held-out set after the first (the second, then the third): 100 distinct references,
    none in any set chosen before it, each with a CUDA and a source (its header says how they
    were chosen)."""
    heldout = bench("heldout")
    rows = heldout.load_set(heldout.SETS[later])
    earlier = {r["image"] for path in heldout.SETS[:later] for r in heldout.load_set(path)}
    images = [r["image"] for r in rows]
    assert len(images) == 100 and len(set(images)) == 100
    assert not earlier & set(images)
    assert all(str(r["cuda"]).count(".") >= 1 and r["source"] for r in rows)
