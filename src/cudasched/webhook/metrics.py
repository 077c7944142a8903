"""Prometheus metrics of the webhook process, and of the policy controller (its own families,
:class:`ControllerMetrics`, beside the webhook's that its watch cache and knowledge follower
count).

Every server owns its metrics in its own :class:`~prometheus_client.CollectorRegistry` rather
than the library's global default registry: tests, the ``demo`` command and e2e runs start
several servers in one interpreter, and the global registry would make the second one fail
with "duplicated timeseries" (and mix the numbers of unrelated servers).

Label values are closed vocabularies (endpoint paths, outcomes, kinds) so the series count is
fixed and small no matter what the cluster sends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from cudasched.workloads.resolution import (
    NO_IMAGE,
    REGISTRY_FAILED,
    REGISTRY_NO_CUDA,
    TAG_NOT_RECORDED,
    UNKNOWN_IMAGE,
)

__all__ = [
    "CHECK_OUTCOMES",
    "CONTENT_TYPE",
    "FACT_RESULTS",
    "KINDS",
    "LAYER_BUDGETS",
    "LAYER_READ_OUTCOMES",
    "OUTCOMES",
    "REFUSAL_REASONS",
    "ROUND_OUTCOMES",
    "UNKNOWN_KINDS",
    "UNKNOWN_REASONS",
    "ControllerMetrics",
    "KnowledgeMetrics",
    "WebhookMetrics",
    "kept_children",
]

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST


def kept_children(metric: Any) -> Callable[..., Any]:
    """``metric.labels`` (label values in the metric's order) with each child kept: ``labels()``
    costs microseconds on every request, a lookup does not. Only for label values from closed
    vocabularies (endpoints, outcomes, reasons), which bound what is kept."""
    kept: dict[tuple[str, ...], Any] = {}

    def child(*values: str) -> Any:
        found = kept.get(values)
        if found is None:
            found = kept[values] = metric.labels(*values)
        return found

    return child


#: What happened to one admission request. ``error`` covers every answer that did not come
#: from a normal admission decision: malformed request, oversized body, time budget exceeded,
#: cluster state not synced, internal error (the ``fallbacks`` counter says which).
OUTCOMES: Final = ("patched", "unchanged", "denied", "error")

#: Why the server refused a connection or a request head before the application saw it
#: (:mod:`cudasched.webhook.server.protocol` says each): the ``reason`` label.
REFUSAL_REASONS: Final = ("connections", "header_timeout", "header_too_large")

#: The object kinds the cache mirrors, as they appear in the ``kind`` label.
KINDS: Final = (
    "nodes",
    "inferenceservices",
    "servingruntimes",
    "clusterservingruntimes",
    "llminferenceservices",
)

#: Objects admitted whose CUDA requirement is unknown: the ``kind`` label.
UNKNOWN_KINDS: Final = ("Pod", "InferenceService", "LLMInferenceService")

#: Why the requirement is unknown: the ``reason`` label (see
#: :class:`cudasched.workloads.resolution.UnknownRequirement`).
UNKNOWN_REASONS: Final = (
    UNKNOWN_IMAGE,
    TAG_NOT_RECORDED,
    NO_IMAGE,
    REGISTRY_NO_CUDA,
    REGISTRY_FAILED,
)

#: How a review's look-up of an image config went (the image resolver): ``hit`` (cached),
#: ``waited`` (in flight, done within the budget), ``in_flight`` (not done within it),
#: ``queued`` (new: resolution started), ``dropped`` (the queue was full).
LOOKUP_RESULTS: Final = ("hit", "waited", "in_flight", "queued", "dropped")

#: How a workload's pull credentials were found (``imageResolver.pullSecrets``): ``read``
#: from the API server, ``cached`` (read less than the TTL ago), ``failed`` (not readable:
#: none used).
PULL_SECRET_RESULTS: Final = ("read", "cached", "failed")

#: How one resolution ended: ``ok`` or the registry client's error kind.
RESOLUTION_OUTCOMES: Final = (
    "ok",
    "not-found",
    "unauthorized",
    "timeout",
    "too-large",
    "unreachable",
    "bad-response",
    "no-platform",
    "invalid",
    "internal",
)

#: What one check of a followed knowledge bundle did (``knowledge/following.FollowResult``).
CHECK_OUTCOMES: Final = ("updated", "unchanged", "refused", "unreachable")

#: How one layer read ended (:class:`cudasched.registry.layerreads.LayerObserver`).
LAYER_READ_OUTCOMES: Final = ("answered", "unknown", "failed", "dropped")

#: How a look-up or write of the cluster's image facts went
#: (:class:`cudasched.registry.factstore.FactObserver`).
FACT_RESULTS: Final = ("found", "absent", "written", "failed")

#: The budgets of layer reads (``imageResolver.layers``), shown as a gauge.
LAYER_BUDGETS: Final = ("bytes", "seconds", "concurrency", "queued")

#: How a read of a namespace's serving runtimes went (an InferenceService whose runtime the
#: cache has not seen yet): ``read``, ``failed`` (an error), ``timeout`` (not within
#: ``kube.runtimeReadSeconds``).
RUNTIME_READ_RESULTS: Final = ("read", "failed", "timeout")

# Webhook answers are expected in milliseconds; the API server gives up after a few seconds.
_LATENCY_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)


class WebhookMetrics:
    """The webhook's metric families, registered on one private registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "cudasched_webhook_requests",
            "Admission requests answered, by endpoint and outcome.",
            ("endpoint", "outcome"),
            registry=r,
        )
        self.latency = Histogram(
            "cudasched_webhook_request_duration_seconds",
            "Time from receiving an admission request to sending the answer.",
            ("endpoint",),
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.fallbacks = Counter(
            "cudasched_webhook_fallbacks",
            "Admission answers given by the failure mode instead of an admission decision.",
            ("endpoint", "reason"),
            registry=r,
        )
        self.remembered_answers = Counter(
            "cudasched_webhook_remembered_answers",
            "Admission requests answered from the decision memo (a repeat of an object already "
            "decided under the current cluster snapshot), by endpoint.",
            ("endpoint",),
            registry=r,
        )
        self.connections_refused = Counter(
            "cudasched_webhook_connections_refused",
            "Connections closed by a limit before a request was answered: too many open "
            "connections, request head not complete in time, request head too large.",
            ("reason",),
            registry=r,
        )
        self.no_compatible_node = Gauge(
            "cudasched_webhook_no_compatible_node_objects",
            "Objects (InferenceServices, LLMInferenceServices, workload controllers) whose last "
            "admission found no node able to run them (their pods) and that no node of the "
            "current snapshot can run, by kind.",
            ("kind",),
            registry=r,
        )
        self.unknown_requirement = Counter(
            "cudasched_webhook_unknown_requirement",
            "GPU workloads admitted without CUDA placement because their requirement is "
            "unknown (no annotation, no runtime label, an image the table does not know), by "
            "kind and reason; every admission counts, remembered answers and dry runs included.",
            ("kind", "reason"),
            registry=r,
        )
        self.events = Counter(
            "cudasched_webhook_events",
            "Kubernetes Events the webhook tried to record, by reason and result (sent, failed, "
            "rate_limited, dropped, not_stored, no_client).",
            ("reason", "result"),
            registry=r,
        )
        self.cache_objects = Gauge(
            "cudasched_cache_objects",
            "Objects held in the watch cache, by kind.",
            ("kind",),
            registry=r,
        )
        self.cache_synced = Gauge(
            "cudasched_cache_synced",
            "1 once every watched kind was listed successfully, else 0.",
            registry=r,
        )
        self._image_resolver_families(r)
        self.runtime_reads = Counter(
            "cudasched_webhook_runtime_reads",
            "Serving runtimes read from the API server for an InferenceService whose runtime "
            "the watch cache had not seen yet, by result: read, failed, timeout.",
            ("result",),
            registry=r,
        )
        self.watch_restarts = Counter(
            "cudasched_cache_watch_restarts",
            "Watch streams restarted after an error, by kind and reason.",
            ("kind", "reason"),
            registry=r,
        )
        self.state_publishes = Counter(
            "cudasched_cache_state_publishes",
            "Cluster-state snapshots published to the request path.",
            registry=r,
        )
        self._zeros()

    def _zeros(self) -> None:
        """Pre-create the children so dashboards see zeros instead of missing series."""
        for kind in KINDS:
            self.cache_objects.labels(kind=kind).set(0)
        for reason in REFUSAL_REASONS:
            self.connections_refused.labels(reason=reason).inc(0)
        for kind in UNKNOWN_KINDS:
            for reason in UNKNOWN_REASONS:
                self.unknown_requirement.labels(kind=kind, reason=reason).inc(0)
        for result in RUNTIME_READ_RESULTS:
            self.runtime_reads.labels(result=result).inc(0)
        self.cache_synced.set(0)

    def _image_resolver_families(self, r: CollectorRegistry) -> None:
        """The image resolver's families: config look-ups and resolutions, pull secrets,
        layer reads and their budgets (zeros for every closed label value)."""
        self.image_config_lookups = Counter(
            "cudasched_webhook_image_config_lookups",
            "Image-config look-ups by admission (the image resolver), by result: hit, waited "
            "(in flight, ready within the budget), in_flight, queued, dropped.",
            ("result",),
            registry=r,
        )
        self.image_config_resolutions = Counter(
            "cudasched_webhook_image_config_resolutions",
            "Image configs read from registries in the background, by outcome (ok or the "
            "error kind).",
            ("outcome",),
            registry=r,
        )
        self.image_config_seconds = Histogram(
            "cudasched_webhook_image_config_resolution_seconds",
            "Time to read one image config from its registry (background, never a review's).",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
            registry=r,
        )
        self.pull_secret_reads = Counter(
            "cudasched_webhook_image_pull_secret_reads",
            "Pull credentials of a workload's namespace looked up for the image resolver, by "
            "result: read (from the API server), cached, failed.",
            ("result",),
            registry=r,
        )
        self.image_layer_reads = Counter(
            "cudasched_webhook_image_layer_reads",
            "Images whose SBOM and layers were read in the background (their config names no "
            "CUDA), by outcome: answered (a CUDA found), unknown (read, no answer), failed, "
            "dropped (the queue was full).",
            ("outcome",),
            registry=r,
        )
        self.image_layer_read_seconds = Histogram(
            "cudasched_webhook_image_layer_read_seconds",
            "Time to read one image's SBOM and layers (background, never a review's).",
            buckets=(0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0),
            registry=r,
        )
        self.image_layer_bytes = Counter(
            "cudasched_webhook_image_layer_bytes",
            "Compressed bytes of SBOMs and layers fetched from registries.",
            registry=r,
        )
        self.image_layer_reads_in_flight = Gauge(
            "cudasched_webhook_image_layer_reads_in_flight",
            "Layer reads waiting or running.",
            registry=r,
        )
        self.image_facts = Counter(
            "cudasched_webhook_image_facts",
            "Look-ups and writes of the image facts the cluster keeps (ImageFacts objects), by "
            "result: found, absent, written, failed.",
            ("result",),
            registry=r,
        )
        self.image_layer_budget = Gauge(
            "cudasched_webhook_image_layer_budget",
            "The budgets of layer reads (imageResolver.layers): bytes fetched and seconds per "
            "image, images read at once, reads queued.",
            ("limit",),
            registry=r,
        )
        for result in LOOKUP_RESULTS:
            self.image_config_lookups.labels(result=result).inc(0)
        for outcome in RESOLUTION_OUTCOMES:
            self.image_config_resolutions.labels(outcome=outcome).inc(0)
        for result in PULL_SECRET_RESULTS:
            self.pull_secret_reads.labels(result=result).inc(0)
        for outcome in LAYER_READ_OUTCOMES:
            self.image_layer_reads.labels(outcome=outcome).inc(0)
        for result in FACT_RESULTS:
            self.image_facts.labels(result=result).inc(0)

    def audit_metrics(self) -> tuple[Gauge, Counter]:
        """The background audit's families, registered on first use (off by default, so a
        webhook without it exposes neither)."""
        if not hasattr(self, "_audit"):
            findings = Gauge(
                "cudasched_audit_findings",
                "Findings of the last background audit, by finding code and severity.",
                ["code", "severity"],
                registry=self.registry,
            )
            runs = Counter(
                "cudasched_audit_runs_total",
                "Background audits run, by result (ok: findings updated; failed: the cluster "
                "could not be read or the reports written).",
                ["result"],
                registry=self.registry,
            )
            self._audit = (findings, runs)
        return self._audit

    def knowledge_metrics(self) -> KnowledgeMetrics:
        """The knowledge's families (its version and age, the follower's checks), registered
        on first use: by the webhook's :mod:`~cudasched.webhook.background.following`."""
        if not hasattr(self, "_knowledge"):
            self._knowledge = KnowledgeMetrics(self.registry)
        return self._knowledge

    def render(self) -> bytes:
        """The text exposition of every metric in this registry."""
        return generate_latest(self.registry)


class KnowledgeMetrics:
    """The knowledge the webhook judges with, and the checks of the bundle it follows.

    * ``cudasched_knowledge_info{version,digest,origin}``: 1 for the knowledge in use (one
      series: replaced at a swap);
    * ``cudasched_knowledge_bundle_age_seconds``: since the day its newest fact was read
      (what the audit's ``knowledge.maxAgeDays`` is about), evaluated when scraped;
    * ``cudasched_knowledge_checks_total{outcome}``: each check of the reference;
    * ``cudasched_knowledge_check_failures_total{reason}``: failed checks by the refusal's
      or the registry's closed word (``digest``, ``schema``, ``timeout``, ...);
    * ``cudasched_knowledge_consecutive_failures``: failed checks since the last good one (0:
      healthy), what to alert on."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.info = Gauge(
            "cudasched_knowledge_info",
            "The knowledge bundle admission judges with: its version, digest and origin.",
            ("version", "digest", "origin"),
            registry=registry,
        )
        self.age = Gauge(
            "cudasched_knowledge_bundle_age_seconds",
            "Seconds since the day the knowledge's newest fact was read (its bundle's date).",
            registry=registry,
        )
        self.checks = Counter(
            "cudasched_knowledge_checks",
            "Checks of the followed knowledge reference, by outcome (updated, unchanged, "
            "refused, unreachable).",
            ("outcome",),
            registry=registry,
        )
        self.failures = Counter(
            "cudasched_knowledge_check_failures",
            "Failed checks of the followed knowledge reference, by reason (the refusal's: "
            "digest, signature, format, schema, sources, overlay, content; or the registry "
            "error's: timeout, unreachable, not-found, ...).",
            ("reason",),
            registry=registry,
        )
        self.consecutive_failures = Gauge(
            "cudasched_knowledge_consecutive_failures",
            "Failed checks of the followed knowledge reference since the last good one.",
            registry=registry,
        )
        for outcome in CHECK_OUTCOMES:
            self.checks.labels(outcome=outcome).inc(0)


#: What a round did: not the leader, waiting for the first full listing, nothing due, tables
#: written, decided with nothing to write, a stale view (listing again), failed.
ROUND_OUTCOMES: Final = (
    "standby",
    "unsynced",
    "idle",
    "written",
    "unchanged",
    "stale",
    "failed",
)


class ControllerMetrics:
    """The policy controller's families, on ``registry`` (the webhook metrics' registry, so
    one ``/metrics`` renders both)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.rounds = Counter(
            "cudasched_policy_controller_rounds",
            "Rounds of the policy controller, by what they did.",
            ("outcome",),
            registry=registry,
        )
        self.writes = Counter(
            "cudasched_policy_controller_table_writes",
            "PlacementTable objects created, replaced or deleted.",
            registry=registry,
        )
        self.leader = Gauge(
            "cudasched_policy_controller_leader",
            "1 while this replica holds the lease (and may write), else 0.",
            registry=registry,
        )
        self.keys = Gauge(
            "cudasched_policy_controller_keys",
            "Pod keys the tables hold after this replica's last write.",
            registry=registry,
        )
        self.tables = Gauge(
            "cudasched_policy_controller_tables",
            "PlacementTable objects after this replica's last write.",
            registry=registry,
        )
        self.closed_namespaces = Gauge(
            "cudasched_policy_controller_closed_namespaces",
            "Namespaces whose table the last write skipped (being deleted, or gone).",
            registry=registry,
        )
        self.last_written = Gauge(
            "cudasched_policy_controller_last_converged_timestamp_seconds",
            "When this replica last brought the tables to its decisions (Unix time).",
            registry=registry,
        )
        for outcome in ROUND_OUTCOMES:
            self.rounds.labels(outcome=outcome)
