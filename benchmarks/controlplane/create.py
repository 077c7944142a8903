"""Pod-create latency through a real kube-apiserver: GPU pods POSTed one at a time with the
webhook registered and without, in alternating rounds so drift hits both, plus CPU pods with the
webhook registered (its ``matchConditions`` keep them away from it). The scheduler is not
running, so only admission and storage are timed. The anchor is Kyverno's published pod-create
p99 of 129-466 ms."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.kube import Api
from tests.harness.webhook import registered, webhook_process
from tests.harness.workloads import gpu_pod

from benchmarks.common import percentile, progress
from benchmarks.controlplane.pods import JSON, NS, delete_all, predictor

__all__ = ["KYVERNO_P99_MS", "CreateResult", "measure_create"]

KYVERNO_P99_MS = (129, 466)


@dataclass
class CreateResult:
    series: str
    pods: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    mutated: int


def _time_creates(api: Api, pods: list[JSON]) -> tuple[list[float], int]:
    latencies = []
    mutated = 0
    for pod in pods:
        began = time.perf_counter()
        created = api.create(pod, strict=False)
        latencies.append((time.perf_counter() - began) * 1000)
        if "cudasched.io/requirement" in created["metadata"].get("annotations", {}):
            mutated += 1
    return latencies, mutated


def measure_create(plane: ControlPlane, work: Path, pods: int, rounds: int) -> list[CreateResult]:
    api = plane.api()
    api.ensure_namespace(NS)
    series: dict[str, list[float]] = {"gpu, webhook registered": [], "gpu, no webhook": []}
    series["cpu, webhook registered"] = []
    mutated = dict.fromkeys(series, 0)
    per_round = max(1, pods // rounds)
    counter = iter(range(10**9))

    def batch(kind: str, n: int) -> list[JSON]:
        if kind == "cpu":
            return [gpu_pod(f"c{next(counter)}", NS, "web", gpus=0) for _ in range(n)]
        return [predictor(f"g{next(counter)}") for _ in range(n)]

    with webhook_process(work / "webhook", plane.kubeconfig) as hook:
        config = hook.registration()
        for number in range(rounds):
            progress(f"create: round {number + 1}/{rounds} ({per_round} pods per series)")
            with registered(api, config):
                _time_creates(api, batch("gpu", 20))  # warm the webhook's connection
                for name, kind in (
                    ("gpu, webhook registered", "gpu"),
                    ("cpu, webhook registered", "cpu"),
                ):
                    lat, done = _time_creates(api, batch(kind, per_round))
                    series[name] += lat
                    mutated[name] += done
            _time_creates(api, batch("gpu", 20))
            lat, done = _time_creates(api, batch("gpu", per_round))
            series["gpu, no webhook"] += lat
            mutated["gpu, no webhook"] += done
    delete_all(api)
    return [
        CreateResult(
            name,
            len(values),
            percentile(values, 0.50),
            percentile(values, 0.90),
            percentile(values, 0.99),
            sum(values) / len(values),
            mutated[name],
        )
        for name, values in series.items()
    ]
