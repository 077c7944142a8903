"""The webhook's image resolver: images' own configs, read from their registries in the
background and handed to admission through its image table (``imageResolver`` settings).

Never on the hot path: a review looks an image up in the cache, waits at most
``budgetSeconds`` for a resolution already in flight, and otherwise queues the image and is
answered per ``onUnknownRequirement`` at once; the next replica finds the config. An image
whose config names no CUDA has its SBOM and layers read on the layer workers, within
``imageResolver.layers``' budgets, once per digest; reviews never wait for them. With
``sharedFacts`` what is read is kept in the image digest's ImageFacts object, where the other
replicas (and a restart) find it, and a person's override reaches them all. Every
published cluster snapshot warms it with the images of its runtimes, InferenceServices and
LLMInferenceServices (off the event loop), each with its pods' pull scope where
``pullSecrets`` is on. Counted in the webhook's metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from cudasched.registry.auth import Keychain, load_docker_config
from cudasched.registry.client import Limits, Platform, RegistryClient
from cudasched.registry.configcache import ConfigCache
from cudasched.registry.factstore import SharedFacts
from cudasched.registry.layerreads import LayerReads
from cudasched.registry.layers import LayerBudget
from cudasched.registry.pullsecrets import PullSecretReader
from cudasched.registry.resolver import BackgroundResolver
from cudasched.vocab.objects import name_of
from cudasched.workloads.kserve import predictor_image, runtime_containers
from cudasched.workloads.kserve.llm import llmisvc_main_container, llmisvc_pod
from cudasched.workloads.pullscope import pull_scope

if TYPE_CHECKING:
    from cudasched.knowledge.imageconfig import PullScope
    from cudasched.knowledge.mirrors import Mirror
    from cudasched.settings.config import ClusterAccess, ImageResolverSettings
    from cudasched.webhook.metrics import WebhookMetrics
    from cudasched.webhook.state.clusterstate import ClusterState

__all__ = ["MetricsObserver", "build_resolver", "images_of"]

log = logging.getLogger(__name__)


class MetricsObserver:
    """Look-ups and resolutions, counted in the webhook's metrics."""

    def __init__(self, metrics: WebhookMetrics) -> None:
        self._lookups = metrics.image_config_lookups
        self._resolutions = metrics.image_config_resolutions
        self._seconds = metrics.image_config_seconds
        self._pull_secrets = metrics.pull_secret_reads
        self._layer_reads = metrics.image_layer_reads
        self._layer_seconds = metrics.image_layer_read_seconds
        self._layer_bytes = metrics.image_layer_bytes
        self._layer_in_flight = metrics.image_layer_reads_in_flight
        self._facts = metrics.image_facts

    def looked_up(self, result: str) -> None:
        self._lookups.labels(result=result).inc()

    def resolved(self, outcome: str, seconds: float) -> None:
        self._resolutions.labels(outcome=outcome).inc()
        self._seconds.observe(seconds)

    def pull_secrets(self, result: str) -> None:
        self._pull_secrets.labels(result=result).inc()

    def layer_read(self, outcome: str, seconds: float, fetched: int) -> None:
        self._layer_reads.labels(outcome=outcome).inc()
        if outcome != "dropped":
            self._layer_seconds.observe(seconds)
        self._layer_bytes.inc(fetched)

    def layer_reads_in_flight(self, count: int) -> None:
        self._layer_in_flight.set(count)

    def shared_facts(self, result: str) -> None:
        self._facts.labels(result=result).inc()


def build_resolver(
    settings: ImageResolverSettings,
    metrics: WebhookMetrics | None = None,
    *,
    mirrors: Iterable[Mirror] = (),
    kube: ClusterAccess | None = None,
) -> BackgroundResolver:
    """The resolver the settings describe (reads ``registryConfig`` now: a bad file stops the
    webhook at start-up, not at the first pod); look-ups go through ``mirrors`` (the
    admission image table's, i.e. ``imageMirrors``) that name a host. With ``pullSecrets``
    on, workloads' pull secrets are read through a client for ``kube`` (the ``kube:``
    section: in-cluster unless it names a kubeconfig)."""
    keychain = load_docker_config(settings.registry_config) if settings.registry_config else None
    verify: Any = True
    if settings.ca_file:
        import ssl

        verify = ssl.create_default_context(cafile=settings.ca_file)
    client = RegistryClient(
        keychain=keychain if keychain is not None else Keychain(),
        plain_http=settings.plain_http,
        verify=verify,
        mirrors=mirrors,
        limits=Limits(
            deadline_seconds=settings.deadline_seconds,
            request_seconds=min(5.0, settings.deadline_seconds),
            max_manifest_bytes=settings.max_manifest_bytes,
            max_config_bytes=settings.max_config_bytes,
        ),
    )
    cache = ConfigCache(
        settings.cache_bytes,
        tag_ttl=settings.tag_ttl_seconds,
        error_ttl=settings.error_ttl_seconds,
        # With shared facts a digest is looked up again, so that an override is seen.
        digest_ttl=settings.tag_ttl_seconds if settings.shared_facts else float("inf"),
    )
    observer = MetricsObserver(metrics) if metrics is not None else None
    reader = None
    if settings.pull_secrets:
        from cudasched.kube.client import make_client

        kubeconfig = kube.kubeconfig if kube is not None else None
        timeout = min(5.0, settings.deadline_seconds)
        reader = PullSecretReader(
            lambda: make_client(kubeconfig=kubeconfig, timeout=timeout),
            ttl_seconds=settings.pull_secret_ttl_seconds,
            timeout_seconds=timeout,
            observer=observer,
        )
    platform = Platform.parse(settings.platform)
    layers = None
    if settings.layers.enabled:
        layers = _layer_reads(settings, client, platform, observer, metrics)
    shared = _shared_facts(settings, kube, observer) if settings.shared_facts else None
    return BackgroundResolver(
        client,
        cache,
        platform=platform,
        budget_seconds=settings.budget_seconds,
        workers=settings.workers,
        max_queued=settings.max_queued,
        observer=observer,
        pull_secrets=reader,
        layers=layers,
        shared=shared,
    )


def _shared_facts(
    settings: ImageResolverSettings, kube: ClusterAccess | None, observer: MetricsObserver | None
) -> SharedFacts:
    """The cluster's ImageFacts through a client for ``kube`` (in-cluster unless it names a
    kubeconfig), remembered for ``tagTtlSeconds``."""
    from cudasched.kube.client import make_client

    kubeconfig = kube.kubeconfig if kube is not None else None
    timeout = min(5.0, settings.deadline_seconds)
    return SharedFacts(
        lambda: make_client(kubeconfig=kubeconfig, timeout=timeout),
        timeout_seconds=timeout,
        ttl_seconds=settings.tag_ttl_seconds,
        retry_seconds=settings.layers.retry_seconds,
        observer=observer,
    )


def _layer_reads(
    settings: ImageResolverSettings,
    client: RegistryClient,
    platform: Platform,
    observer: MetricsObserver | None,
    metrics: WebhookMetrics | None,
) -> LayerReads:
    """The layer reads ``imageResolver.layers`` describes, its budgets shown as gauges."""
    chosen = settings.layers
    budget = LayerBudget(max_bytes=chosen.max_bytes, deadline_seconds=chosen.deadline_seconds)
    if metrics is not None:
        shown = metrics.image_layer_budget
        shown.labels(limit="bytes").set(chosen.max_bytes)
        shown.labels(limit="seconds").set(chosen.deadline_seconds)
        shown.labels(limit="concurrency").set(chosen.concurrency)
        shown.labels(limit="queued").set(chosen.max_queued)
    return LayerReads(
        client,
        platform,
        budget,
        concurrency=chosen.concurrency,
        max_queued=chosen.max_queued,
        retry_seconds=chosen.retry_seconds,
        observer=observer,
    )


def images_of(state: ClusterState) -> Iterator[tuple[str, PullScope | None]]:
    """The images of a snapshot's serving runtimes, InferenceServices (their predictor, as
    KServe builds it) and LLMInferenceServices that name one, each with the pull scope its
    pods would pull with (:func:`~cudasched.workloads.pullscope.pull_scope`): a
    ServingRuntime's own ``imagePullSecrets`` in its namespace, an InferenceService's
    predictor's merged with its runtime's, an LLMInferenceService's pod's. A
    ClusterServingRuntime has no namespace, so no Secret to read: its images come with no
    scope (the webhook's own credentials), and with each InferenceService's that runs it.
    Unreadable objects are skipped."""
    fleet = state.fleet
    for runtime in fleet.all_serving_runtimes():
        yield from _runtime_images(runtime, _scope_of(runtime))
    for runtime in fleet.cluster_serving_runtimes:
        yield from _runtime_images(runtime, None)
    for isvc in fleet.inference_services.values():
        try:
            choice = state.select_runtime_for(isvc)
            chosen = choice.obj if choice is not None else None
            image = predictor_image(isvc, chosen)
            scope = pull_scope(isvc, runtime=chosen)
        except Exception:
            continue
        if isinstance(image, str):
            yield image, scope
    for service in fleet.llm_inference_services.values():
        try:
            main = llmisvc_main_container(llmisvc_pod(service)["spec"])
            scope = pull_scope(service)
        except Exception:
            continue
        image = main.get("image") if main is not None else None
        if isinstance(image, str):
            yield image, scope


def _scope_of(obj: Mapping[str, Any]) -> PullScope | None:
    try:
        return pull_scope(obj)
    except Exception:  # a malformed object: its images are still worth a public look-up
        return None


def _runtime_images(
    runtime: Mapping[str, Any], scope: PullScope | None
) -> Iterator[tuple[str, PullScope | None]]:
    try:
        for container in runtime_containers(runtime):
            image = container.get("image")
            if isinstance(image, str):
                yield image, scope
    except Exception:  # a malformed object: the cache is tolerant, so are we
        log.debug("runtime %s skipped while warming", name_of(runtime))
