"""kube-scheduler's throughput on pods that carry cudasched's node affinity: for one fleet,
``count`` pods of each shape are created while kube-scheduler is stopped, then it is started
and its count of scheduled pods polled from its metrics every 0.1 s. Per-pod latency is its own
``scheduler_scheduling_algorithm_duration_seconds`` (filter + score) and its Filter extension
point; what the selector's size costs is its NodeAffinity plugin alone
(:func:`~benchmarks.controlplane.metrics.node_affinity`). The anchor is scheduler_perf's
~220 pods/s with node affinity at 5,000 nodes."""

from __future__ import annotations

import copy
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
from tests.harness.controlplane.plane import ControlPlane
from tests.harness.kube import Api

from benchmarks.common import progress
from benchmarks.controlplane.metrics import histogram, node_affinity, quantile
from benchmarks.controlplane.pods import BARE, JSON, NS, PLAIN, delete_all, plain, predictor

__all__ = [
    "SCHEDULER_PERF_AFFINITY_PODS_S",
    "Progress",
    "ScheduleResult",
    "measure_schedule",
]

SCHEDULER_PERF_AFFINITY_PODS_S = 220


@dataclass
class ScheduleResult:
    nodes: int
    shape: str
    pods: int
    seconds: float
    pods_per_s: float
    algorithm_mean_ms: float
    algorithm_p99_ms: float
    filter_mean_ms: float
    bound: int
    #: kube-scheduler's NodeAffinity plugin alone (:func:`.metrics.node_affinity`): the mean
    #: Filter call on one node, the PreFilter call per pod, and the nodes it filtered per pod.
    affinity_filter_us: float = float("nan")
    affinity_prefilter_us: float = float("nan")
    affinity_nodes_per_pod: float = float("nan")

    @property
    def affinity_ms_per_pod(self) -> float:
        """What evaluating the pod's node affinity cost the scheduler per pod."""
        filtered = self.affinity_filter_us * self.affinity_nodes_per_pod
        return (filtered + self.affinity_prefilter_us) / 1000


class Progress:
    """kube-scheduler's count of scheduled pods over time, polled from its ``/metrics`` every
    ``interval`` seconds (``scheduler_schedule_attempts_total{result="scheduled"}``): the rate
    between the first poll that sees a pod scheduled and the one that sees them all. (A watch
    on the pods is cut off by the API server when this 2-core machine is busy, and loses time
    stamps.)"""

    _PATTERN = re.compile(
        r'^scheduler_schedule_attempts_total\{[^}]*result="scheduled"[^}]*\} (\S+)$', re.M
    )

    def __init__(self, plane: ControlPlane, expected: int, interval: float = 0.1) -> None:
        self.samples: list[tuple[float, int]] = []
        self.expected = expected
        self._plane = plane
        self._interval = interval
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            began = time.monotonic()
            try:
                text = self._plane.scheduler_metrics()
            except (httpx.HTTPError, KeyError):
                time.sleep(self._interval)
                continue
            now = (began + time.monotonic()) / 2
            found = self._PATTERN.search(text)
            count = int(float(found.group(1))) if found else 0
            self.samples.append((now, count))
            if count >= self.expected:
                self._done.set()
                return
            time.sleep(max(0.0, self._interval - (time.monotonic() - began)))

    def wait(self, timeout: float) -> bool:
        finished = self._done.wait(timeout)
        self._done.set()
        self._thread.join(5)
        return finished

    def span(self) -> tuple[float, int, float]:
        """(seconds from the first poll seeing a scheduled pod to the last sample, pods
        scheduled in between, time of the first such poll)."""
        moving = [(t, n) for t, n in self.samples if n > 0]
        if len(moving) < 2:
            return float("nan"), 0, float("nan")
        (t0, n0), (t1, n1) = moving[0], moving[-1]
        return t1 - t0, n1 - n0, t0


def measure_schedule(
    plane: ControlPlane, nodes: int, count: int, affinities: dict[str, JSON]
) -> list[ScheduleResult]:
    """Time the scheduler on ``count`` pods of each shape; ``affinities``: shape -> affinity."""
    api = plane.api()
    api.ensure_namespace(NS)
    shapes: dict[str, Callable[[str], JSON]] = {PLAIN: plain, BARE: predictor}

    def with_affinity(affinity: JSON) -> Callable[[str], JSON]:
        def make(name: str) -> JSON:
            pod = predictor(name)
            pod["spec"]["affinity"] = copy.deepcopy(affinity)
            return pod

        return make

    for shape, affinity in affinities.items():
        shapes[shape] = with_affinity(affinity)
    results = []
    for shape, make in shapes.items():
        plane.stop_component("kube-scheduler")
        pods = [make(f"s{i:05d}") for i in range(count)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda p: api.create(p, strict=False), pods))
        results.append(_schedule_pending(plane, api, nodes, shape, count))
        plane.stop_component("kube-scheduler")
        delete_all(api)
    return results


def _schedule_pending(
    plane: ControlPlane, api: Api, nodes: int, shape: str, count: int
) -> ScheduleResult:
    """Start kube-scheduler on ``count`` pending pods of one shape and read what it did."""
    progress(f"schedule: {nodes} nodes, {shape}: {count} pods pending, starting kube-scheduler")
    started = time.monotonic()
    plane.start_scheduler()
    polled = Progress(plane, count)
    finished = polled.wait(timeout=max(120.0, count / 5))
    time.sleep(2.0)  # kube-scheduler flushes its per-plugin timings every second
    metrics = plane.scheduler_metrics()
    span, scheduled, first = polled.span()
    bound = sum(1 for p in api.list(f"/api/v1/namespaces/{NS}/pods") if p["spec"].get("nodeName"))
    atotal, acount, buckets = histogram(metrics, "scheduler_scheduling_algorithm_duration_seconds")
    ftotal, fcount, _ = histogram(
        metrics,
        "scheduler_framework_extension_point_duration_seconds",
        'extension_point="Filter"',
    )
    per_node, per_pod, nodes_per_pod = node_affinity(metrics)
    result = ScheduleResult(
        nodes,
        shape,
        count,
        round(span, 3),
        scheduled / span if span and span == span else float("nan"),
        1000 * atotal / acount if acount else float("nan"),
        1000 * quantile(buckets, 0.99),
        1000 * ftotal / fcount if fcount else float("nan"),
        bound,
        1e6 * per_node,
        1e6 * per_pod,
        nodes_per_pod,
    )
    progress(
        f"schedule: {shape}: {bound}/{count} bound, {scheduled} scheduled in {span:.1f}s "
        f"({result.pods_per_s:.0f}/s; {first - started:.1f}s to the first)"
        f"{'' if finished else ' TIMED OUT'}"
    )
    return result
