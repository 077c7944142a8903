"""The control-plane benchmark's tables and the ratios that answer its questions: what the
webhook adds to pod creation (against Kyverno's published p99), what cudasched's node affinity
costs kube-scheduler per pod and in throughput (against scheduler_perf), and what the compiled
selector's size costs over one ``In`` admitting the same nodes."""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.common import Table
from benchmarks.controlplane.create import (
    CPU,
    KYVERNO_P99_MS,
    NONE,
    PLACED,
    POLICY,
    TRIVIAL,
    WEBHOOK,
    CreateResult,
)
from benchmarks.controlplane.match import MatchResult
from benchmarks.controlplane.pods import AUTO, BARE, OURS, PLAIN, SAME
from benchmarks.controlplane.schedule import SCHEDULER_PERF_AFFINITY_PODS_S, ScheduleResult

__all__ = ["render"]


def render(
    creates: Sequence[CreateResult],
    schedules: Sequence[ScheduleResult],
    matches: Sequence[MatchResult],
    sizes: Sequence[int],
) -> str:
    """Every part that was measured, as tables with their ratios below."""
    tables: list[str] = []
    if creates:
        tables += _create(creates)
    if schedules:
        tables += _schedule(schedules, sizes)
    if matches:
        tables += _match(matches, schedules, sizes)
    return "\n\n".join(tables)


def _create(creates: Sequence[CreateResult]) -> list[str]:
    tables: list[str] = []
    table = Table(
        [
            "pod create (real kube-apiserver)",
            "pods",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "mean ms",
            "mutated",
        ]
    )
    for r in creates:
        table.add(r.series, r.pods, r.p50_ms, r.p90_ms, r.p99_ms, r.mean_ms, r.mutated)
    by = {r.series: r for r in creates}
    hooked, bare, cpu = by[WEBHOOK], by[NONE], by[CPU]
    tables.append(table.render())
    lines = [
        f"ratio webhook/no admission (GPU pods): p50 {hooked.p50_ms / bare.p50_ms:.2f}, "
        f"p99 {hooked.p99_ms / bare.p99_ms:.2f}; added p50 {hooked.p50_ms - bare.p50_ms:.1f} ms, "
        f"p99 {hooked.p99_ms - bare.p99_ms:.1f} ms; CPU pods (matchConditions skip the "
        f"webhook) p50 ratio {cpu.p50_ms / bare.p50_ms:.2f}"
    ]
    if PLACED in by:
        placed = by[PLACED]
        lines.append(
            f"the placed object alone (no admission): added p50 "
            f"{placed.p50_ms - bare.p50_ms:.1f} ms, p99 {placed.p99_ms - bare.p99_ms:.1f} ms; "
            f"the webhook's call beyond it: p50 {hooked.p50_ms - placed.p50_ms:.1f} ms"
        )
    if POLICY in by:
        policy = by[POLICY]
        lines.append(
            f"ratio policy/no admission (GPU pods): p50 {policy.p50_ms / bare.p50_ms:.2f}, "
            f"p99 {policy.p99_ms / bare.p99_ms:.2f} (goal p99 <= 1.2); added p50 "
            f"{policy.p50_ms - bare.p50_ms:.1f} ms, p99 {policy.p99_ms - bare.p99_ms:.1f} ms"
        )
    if TRIVIAL in by:
        trivial = by[TRIVIAL]
        lines.append(
            f"ratio trivial policy (one constant patch)/no admission: p50 "
            f"{trivial.p50_ms / bare.p50_ms:.2f}, p99 {trivial.p99_ms / bare.p99_ms:.2f}; "
            f"added p50 {trivial.p50_ms - bare.p50_ms:.1f} ms, "
            f"p99 {trivial.p99_ms - bare.p99_ms:.1f} ms"
        )
    if POLICY in by and TRIVIAL in by:
        policy, trivial = by[POLICY], by[TRIVIAL]
        lines.append(
            f"ratio policy/trivial policy (the floor any mutating policy sets): p50 "
            f"{policy.p50_ms / trivial.p50_ms:.2f}, p99 {policy.p99_ms / trivial.p99_ms:.2f}"
        )
        lines.append(
            f"the API server's own time in its policy plugins per pod: trivial policy "
            f"{trivial.plugins_ms:.2f} ms, cudasched's policies {policy.plugins_ms:.2f} ms"
        )
    if hooked.call_ms:
        lines.append(
            f"the API server's call to the webhook: mean {hooked.call_ms:.2f} ms, of which the "
            f"webhook's handling {hooked.handler_ms:.2f} ms (the rest: TLS, HTTP, scheduling)"
        )
    lines.append(
        f"anchor: Kyverno's published pod-create p99 {KYVERNO_P99_MS[0]}-{KYVERNO_P99_MS[1]} ms; "
        f"here p99 {hooked.p99_ms:.1f} ms with the webhook"
    )
    tables.append("\n".join(lines))
    return tables


def _schedule(schedules: Sequence[ScheduleResult], sizes: Sequence[int]) -> list[str]:
    tables: list[str] = []
    table = Table(
        [
            "nodes",
            "pod shape",
            "pods",
            "bound",
            "pods/s",
            "algorithm mean ms",
            "algorithm p99 ms",
            "Filter mean ms",
            "NodeAffinity us/node",
            "nodes filtered/pod",
            "NodeAffinity ms/pod",
        ]
    )
    for r in schedules:
        table.add(
            r.nodes,
            r.shape,
            r.pods,
            r.bound,
            r.pods_per_s,
            r.algorithm_mean_ms,
            r.algorithm_p99_ms,
            r.filter_mean_ms,
            r.affinity_filter_us,
            r.affinity_nodes_per_pod,
            r.affinity_ms_per_pod,
        )
    tables.append(table.render())
    lines = []
    for size in sizes:
        rows = {r.shape: r for r in schedules if r.nodes == size}
        plain, bare = rows[PLAIN], rows[BARE]
        for shape in (SAME, AUTO, OURS):
            hooked = rows[shape]
            lines.append(
                f"{size} nodes, {shape}: throughput with/without "
                f"{hooked.pods_per_s / bare.pods_per_s:.2f} (vs plain GPU pod "
                f"{hooked.pods_per_s / plain.pods_per_s:.2f}); scheduling algorithm per pod "
                f"with/without {hooked.algorithm_mean_ms / bare.algorithm_mean_ms:.2f}, "
                f"Filter with/without {hooked.filter_mean_ms / bare.filter_mean_ms:.2f}; "
                f"NodeAffinity {hooked.affinity_ms_per_pod:.2f} ms/pod "
                f"({100 * hooked.affinity_ms_per_pod / hooked.algorithm_mean_ms:.1f}% of the "
                f"algorithm)"
            )
        floor, auto = rows[SAME], rows[AUTO]
        extra = auto.affinity_ms_per_pod - floor.affinity_ms_per_pod
        lines.append(
            f"{size} nodes, the compiled selector's size: NodeAffinity per node "
            f"{auto.affinity_filter_us:.2f} us (GFD terms) vs "
            f"{floor.affinity_filter_us:.2f} us (one In on the same nodes); per pod "
            f"{extra:.2f} ms more, {100 * extra / auto.algorithm_mean_ms:.1f}% of its "
            f"scheduling algorithm time"
        )
    lines.append(
        f"anchor: scheduler_perf ~{SCHEDULER_PERF_AFFINITY_PODS_S} pods/s with node affinity "
        f"at 5,000 nodes (a dedicated machine, apiserver in-process)"
    )
    tables.append("\n".join(lines))
    return tables


def _match(
    matches: Sequence[MatchResult], schedules: Sequence[ScheduleResult], sizes: Sequence[int]
) -> list[str]:
    tables: list[str] = []
    table = Table(
        [
            "nodes",
            "affinity (kube-scheduler's matching, Go, one thread)",
            "nodes admitted",
            "ns/node (Filter)",
            "us/pod (PreFilter)",
            "ms/pod at the nodes filtered",
            "% of the algorithm",
        ]
    )
    cost: dict[tuple[int, str], float] = {}
    for m in matches:
        row = next(r for r in schedules if r.nodes == m.nodes and r.shape == m.shape)
        cost[(m.nodes, m.shape)] = per_pod = (
            m.ns_per_node * row.affinity_nodes_per_pod / 1e6 + m.us_per_pod / 1000
        )
        table.add(
            m.nodes,
            m.shape,
            m.matched,
            m.ns_per_node,
            m.us_per_pod,
            per_pod,
            100 * per_pod / row.algorithm_mean_ms,
        )
    tables.append(table.render())
    lines = []
    for size in sizes:
        if (size, AUTO) in cost and (size, SAME) in cost:
            extra = cost[(size, AUTO)] - cost[(size, SAME)]
            auto = next(r for r in schedules if r.nodes == size and r.shape == AUTO)
            lines.append(
                f"{size} nodes, what the compiled selector's size costs kube-scheduler's CPU "
                f"over one In admitting the same nodes: {extra:.2f} ms per pod, "
                f"{100 * extra / auto.algorithm_mean_ms:.1f}% of its scheduling algorithm time"
            )
    tables.append("\n".join(lines))
    return tables
