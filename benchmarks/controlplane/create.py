"""Pod-create latency through a real kube-apiserver, every way cudasched can place a pod, side
by side: GPU pods POSTed one at a time with no admission, with the webhook registered, and with
the policy mode bound (the MutatingAdmissionPolicy the API server runs itself, its tables filled
by the policy controller beforehand), in alternating rounds so drift hits all of them; plus GPU
pods that already carry the affinity and annotation the webhook writes, with no admission (what
the larger object alone costs: decoding, validating and storing it), and CPU pods with the
webhook registered (its ``matchConditions`` keep them away from it). The scheduler is not
running, so only admission and storage are timed. Beside the policy, a trivial
MutatingAdmissionPolicy (no parameters, no conditions, one constant JSON patch: a label) is
bound for a series of its own: what the API server's policy machinery costs a pod before any
of cudasched's work, the floor under the policy series. The policy series need an API server that
serves ``admissionregistration.k8s.io/v1`` MutatingAdmissionPolicies (Kubernetes >= 1.36; run
with ``--kubernetes 1.37``); on an older one it is left out. The anchor is Kyverno's published
pod-create p99 of 129-466 ms."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.kube import Api
from tests.harness.policy import controller_process, install_policy, wait_for_keys
from tests.harness.webhook import registered, webhook_process
from tests.harness.workloads import gpu_pod

from benchmarks.common import percentile, progress
from benchmarks.controlplane.pods import JSON, NS, delete_all, predictor
from cudasched.workloads.policykey import pod_key

__all__ = [
    "CPU",
    "KYVERNO_P99_MS",
    "NONE",
    "PLACED",
    "POLICY",
    "TRIVIAL",
    "WEBHOOK",
    "CreateResult",
    "measure_create",
    "trivial_policy",
]

KYVERNO_P99_MS = (129, 466)

NONE = "gpu, no admission"
PLACED = "gpu already placed, no admission"
WEBHOOK = "gpu, webhook registered"
POLICY = "gpu, policy bound"
TRIVIAL = "gpu, trivial policy bound"
CPU = "cpu, webhook registered"

_ADMISSION = "/apis/admissionregistration.k8s.io/v1"
_BINDINGS = {
    "MutatingAdmissionPolicyBinding": f"{_ADMISSION}/mutatingadmissionpolicybindings",
    "ValidatingAdmissionPolicyBinding": f"{_ADMISSION}/validatingadmissionpolicybindings",
}


@dataclass
class CreateResult:
    series: str
    pods: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    mutated: int
    #: The webhook series only: the API server's own mean time for its call to the webhook
    #: (``apiserver_admission_webhook_admission_duration_seconds``), and the webhook's mean
    #: time from reading a request to its answer (``cudasched_webhook_request_duration_seconds``).
    call_ms: float = 0.0
    handler_ms: float = 0.0
    #: The policy series: the API server's own time per pod in its MutatingAdmissionPolicy and
    #: ValidatingAdmissionPolicy plugins (``apiserver_admission_controller_admission_duration_
    #: seconds``): the policies' cost without the client, the network and storage around it.
    plugins_ms: float = 0.0


def _histogram(text: str, metric: str, label: str = "") -> tuple[float, float]:
    """(sum, count) of a Prometheus histogram's series whose labels contain ``label``."""
    total = count = 0.0
    for line in text.splitlines():
        if label not in line:
            continue
        if line.startswith(metric + "_sum"):
            total += float(line.split()[-1])
        elif line.startswith(metric + "_count"):
            count += float(line.split()[-1])
    return total, count


class _CallTimes:
    """The API server's and the webhook's own view of the webhook calls in a span."""

    API = "apiserver_admission_webhook_admission_duration_seconds"
    HOOK = "cudasched_webhook_request_duration_seconds"

    def __init__(self) -> None:
        self.call = [0.0, 0.0]
        self.handler = [0.0, 0.0]

    @contextmanager
    def span(self, api: Api, hook: Any) -> Iterator[None]:
        before = (api.send("GET", "/metrics").text, hook.metrics())
        yield
        after = (api.send("GET", "/metrics").text, hook.metrics())
        for into, metric, label, index in (
            (self.call, self.API, 'name="pods.cudasched.io"', 0),
            (self.handler, self.HOOK, 'endpoint="/mutate/pods"', 1),
        ):
            (s0, c0), (s1, c1) = (_histogram(t[index], metric, label) for t in (before, after))
            into[0] += s1 - s0
            into[1] += c1 - c0

    def means_ms(self) -> tuple[float, float]:
        return tuple(  # type: ignore[return-value]
            1000 * total / count if count else 0.0 for total, count in (self.call, self.handler)
        )


class _PluginTimes:
    """The API server's time in its policy plugins, per series, per pod created."""

    METRIC = "apiserver_admission_controller_admission_duration_seconds"
    PLUGINS = ('name="MutatingAdmissionPolicy"', 'name="ValidatingAdmissionPolicy"')

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def _total(self, api: Api) -> float:
        text = api.send("GET", "/metrics").text
        return sum(_histogram(text, self.METRIC, plugin)[0] for plugin in self.PLUGINS)

    @contextmanager
    def span(self, api: Api, series: str) -> Iterator[None]:
        before = self._total(api)
        yield
        self.seconds[series] = self.seconds.get(series, 0.0) + self._total(api) - before


def _time_creates(api: Api, pods: list[JSON]) -> tuple[list[float], int]:
    latencies = []
    mutated = 0
    for pod in pods:
        began = time.perf_counter()
        created = api.create(pod, strict=False)
        latencies.append((time.perf_counter() - began) * 1000)
        if _placed_by_policy(created) or _placed_by_trivial(created):
            mutated += 1
    return latencies, mutated


_TRIVIAL_LABEL = "bench.cudasched.io/trivial-policy"


def trivial_policy() -> tuple[JSON, JSON]:
    """The trivial MutatingAdmissionPolicy and its binding (see the module docstring)."""
    name = "bench-trivial"
    label = _TRIVIAL_LABEL.replace("/", "~1")
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
            },
            "mutations": [
                {
                    "patchType": "JSONPatch",
                    "jsonPatch": {
                        "expression": f"[JSONPatch{{op: 'add', path: '/metadata/labels/{label}', "
                        "value: 'x'}]"
                    },
                }
            ],
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name},
    }
    return policy, binding


def _placed_by_policy(created: JSON) -> bool:
    return "cudasched.io/requirement" in created["metadata"].get("annotations", {})


def _placed_by_trivial(created: JSON) -> bool:
    return _TRIVIAL_LABEL in created["metadata"].get("labels", {})


class _Policy:
    """The policy mode installed, its tables taught the benchmark's pod, and the trivial
    policy beside it; every binding removed until :meth:`bound`."""

    def __init__(self, api: Api, bindings: list[JSON]) -> None:
        self.api = api
        trivial, trivial_binding = trivial_policy()
        api.create(trivial)
        self.bindings = {POLICY: bindings, TRIVIAL: [trivial_binding]}
        self.probes = iter(range(10**9))  # names of the probe pods, unique for the run
        for binding in bindings:
            api.delete(f"{_BINDINGS[binding['kind']]}/{binding['metadata']['name']}")

    @contextmanager
    def bound(self, series: str, probe: JSON) -> Iterator[None]:
        """The bindings of ``series`` (:data:`POLICY` or :data:`TRIVIAL`) in place."""
        bindings = self.bindings[series]
        check = _placed_by_policy if series == POLICY else _placed_by_trivial
        for binding in bindings:
            self.api.create(binding)

        def placed() -> bool:
            pod = copy.deepcopy(probe)
            pod["metadata"]["name"] = f"probe-{next(self.probes)}"
            return check(self.api.create(pod, strict=False))

        try:
            # The API server's policy informers take the bindings up within moments.
            self.api.wait_for(f"{series}: pods mutated", placed, timeout=60, interval=0.5)
            yield
        finally:
            for binding in bindings:
                self.api.delete(f"{_BINDINGS[binding['kind']]}/{binding['metadata']['name']}")


def _serves_policies(api: Api) -> bool:
    return api.exists(f"{_ADMISSION}/mutatingadmissionpolicies")


@contextmanager
def _policy(plane: ControlPlane, api: Api, work: Path, sample: JSON) -> Iterator[_Policy | None]:
    if not _serves_policies(api):
        progress("create: this API server serves no MutatingAdmissionPolicy v1: no policy series")
        yield None
        return
    objects = install_policy(plane, work / "policy")
    with controller_process(work / "policy", plane.kubeconfig, "bench"):
        api.create(sample, strict=False)  # a running pod of the shape: the tables learn it
        key = pod_key(sample, NS)
        assert key is not None
        wait_for_keys(api, {key})
        yield _Policy(api, [o for o in objects if o["kind"] in _BINDINGS])


def _placed_copy(api: Api, pod: JSON) -> JSON:
    """``pod`` as the webhook leaves it (a dry run through it), to be created with no
    admission: the same object, without the call."""
    done = api.create(pod, strict=False, dry_run=True)
    placed = copy.deepcopy(pod)
    placed["metadata"]["annotations"] = done["metadata"]["annotations"]
    placed["spec"]["affinity"] = done["spec"]["affinity"]
    return placed


def measure_create(plane: ControlPlane, work: Path, pods: int, rounds: int) -> list[CreateResult]:
    api = plane.api()
    api.ensure_namespace(NS)
    series: dict[str, list[float]] = {
        NONE: [],
        PLACED: [],
        WEBHOOK: [],
        TRIVIAL: [],
        POLICY: [],
        CPU: [],
    }
    mutated = dict.fromkeys(series, 0)
    per_round = max(1, pods // rounds)
    counter = iter(range(10**9))

    def batch(kind: str, n: int, template: JSON | None = None) -> list[JSON]:
        if kind == "cpu":
            return [gpu_pod(f"c{next(counter)}", NS, "web", gpus=0) for _ in range(n)]
        if template is not None:
            out = []
            for _ in range(n):
                pod = copy.deepcopy(template)
                pod["metadata"]["name"] = f"p{next(counter)}"
                out.append(pod)
            return out
        return [predictor(f"g{next(counter)}") for _ in range(n)]

    def timed(name: str, pods_: list[JSON]) -> None:
        lat, done = _time_creates(api, pods_)
        series[name] += lat
        mutated[name] += done

    calls, plugins = _CallTimes(), _PluginTimes()
    with (
        webhook_process(work / "webhook", plane.kubeconfig) as hook,
        _policy(plane, api, work, predictor("teach")) as policy,
    ):
        config = hook.registration()
        with registered(api, config):
            placed = _placed_copy(api, predictor("dry-run"))
        for number in range(rounds):
            progress(f"create: round {number + 1}/{rounds} ({per_round} pods per series)")
            with registered(api, config):
                _time_creates(api, batch("gpu", 20))  # warm the webhook's connection
                with calls.span(api, hook):
                    timed(WEBHOOK, batch("gpu", per_round))
                timed(CPU, batch("cpu", per_round))
            _time_creates(api, batch("gpu", 20))
            timed(NONE, batch("gpu", per_round))
            timed(PLACED, batch("gpu", per_round, placed))
            for name in (TRIVIAL, POLICY):
                if policy is not None:
                    with policy.bound(name, predictor("probe")):
                        _time_creates(api, batch("gpu", 20))
                        with plugins.span(api, name):
                            timed(name, batch("gpu", per_round))
            delete_all(api)
    call_ms, handler_ms = calls.means_ms()
    return [
        CreateResult(
            name,
            len(values),
            percentile(values, 0.50),
            percentile(values, 0.90),
            percentile(values, 0.99),
            sum(values) / len(values),
            mutated[name],
            *((call_ms, handler_ms) if name == WEBHOOK else (0.0, 0.0)),
            1000 * plugins.seconds.get(name, 0.0) / len(values),
        )
        for name, values in series.items()
        if values
    ]
