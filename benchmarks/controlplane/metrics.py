"""kube-scheduler's own account of its work, read from its Prometheus text: a histogram's sum,
count and buckets, a quantile interpolated inside its bucket as Prometheus does, a counter
summed over matching series, and what its NodeAffinity plugin alone cost."""

from __future__ import annotations

import math
import re

__all__ = ["counter", "histogram", "node_affinity", "quantile"]


def histogram(
    text: str, name: str, labels: str = ""
) -> tuple[float, float, list[tuple[float, float]]]:
    """(sum, count, cumulative buckets) of one Prometheus histogram, labels filtered by regex."""
    total = count = 0.0
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if not line.startswith(name) or (labels and not re.search(labels, line)):
            continue
        value = float(line.rsplit(" ", 1)[1])
        if line.startswith(f"{name}_sum"):
            total += value
        elif line.startswith(f"{name}_count"):
            count += value
        elif line.startswith(f"{name}_bucket"):
            le = re.search(r'[{,]le="([^"]+)"', line)
            if le:
                bound = math.inf if le.group(1) == "+Inf" else float(le.group(1))
                buckets[bound] = buckets.get(bound, 0.0) + value
    return total, count, sorted(buckets.items())


def quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """Linear interpolation inside the bucket holding quantile ``q`` (Prometheus's way)."""
    if not buckets or buckets[-1][1] == 0:
        return float("nan")
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, cumulative in buckets:
        if cumulative >= rank:
            if math.isinf(bound):
                return lower
            span = cumulative - below
            return lower + (bound - lower) * ((rank - below) / span if span else 1.0)
        lower, below = bound, cumulative
    return lower


def counter(metrics: str, name: str, labels: str) -> float:
    """The sum of one Prometheus counter over the series whose labels match ``labels``."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith(name + "{") and re.search(labels, line)
    )


def node_affinity(metrics: str) -> tuple[float, float, float]:
    """kube-scheduler's NodeAffinity plugin alone: (mean Filter call on one node, mean
    PreFilter call per pod, in seconds; Filter calls per scheduling attempt).

    The times come from ``scheduler_plugin_execution_duration_seconds``, which kube-scheduler
    records in a random 10% of its cycles through a buffer flushed every second that drops what
    overflows it (a sample, fine for a mean); the calls from
    ``scheduler_plugin_evaluation_total``, counted on every call."""
    means = []
    for point in ("Filter", "PreFilter"):
        total, count, _ = histogram(
            metrics,
            "scheduler_plugin_execution_duration_seconds",
            rf'extension_point="{point}",plugin="NodeAffinity"',
        )
        means.append(total / count if count else float("nan"))
    calls = counter(
        metrics,
        "scheduler_plugin_evaluation_total",
        r'extension_point="Filter",plugin="NodeAffinity"',
    )
    attempts = counter(metrics, "scheduler_schedule_attempts_total", "")
    return means[0], means[1], calls / attempts if attempts else float("nan")
