"""The webhook's application assembled from its configuration: the production admission (the
:class:`~cudasched.webhook.admission.admitter.Admitter`, with the image resolver in its image
table when that is on) and the :class:`~cudasched.webhook.server.app.WebhookApp` with the
server's limits. What ``cudasched webhook``, the demo, the benchmarks and the tests build."""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Any

from cudasched.webhook.metrics import WebhookMetrics
from cudasched.webhook.server.app import StagedAdmission, WebhookApp

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.images import ImageTable
    from cudasched.registry.resolver import BackgroundResolver
    from cudasched.settings.config import WebhookConfig
    from cudasched.webhook.admission.admitter import Admitter
    from cudasched.webhook.background.runtimereader import RuntimeReader
    from cudasched.webhook.state.source import StateSource

__all__ = ["build_admission", "build_app"]


def build_admission(
    config: WebhookConfig,
    metrics: WebhookMetrics,
    kb: KnowledgeBase | None = None,
    images: ImageTable | None = None,
    runtimes: RuntimeReader | None = None,
) -> tuple[Admitter, BackgroundResolver | None]:
    """The production :class:`Admitter` for ``config`` and its image resolver (``None`` unless
    ``imageResolver.enabled``): the given knowledge base (else the bundled one) and image table
    (else the built-in one with ``imageOverrides`` in front), asking the resolver (counted in
    ``metrics``) before its rules, never waiting longer than its budget; ``runtimes`` is where
    it reads serving runtimes its snapshot lacks. Reads package data: once per server process,
    never per request."""
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.images import ImageTable
    from cudasched.webhook.admission.admitter import Admitter

    kb = kb if kb is not None else KnowledgeBase.load()
    images = images if images is not None else ImageTable.from_config(config, kb=kb)
    resolver = None
    if config.image_resolver.enabled:
        from cudasched.webhook.background.imageresolver import build_resolver

        resolver = build_resolver(
            config.image_resolver, metrics, mirrors=images.mirrors, kube=config.kube
        )
        images = images.with_configs(resolver)
    return Admitter(config, kb, images, runtimes), resolver


def build_app(
    config: WebhookConfig,
    source: StateSource,
    *,
    admission: StagedAdmission[Any] | None = None,
    kb: KnowledgeBase | None = None,
    images: ImageTable | None = None,
    metrics: WebhookMetrics | None = None,
) -> WebhookApp:
    """The application for ``config``: limits, time budget and failure mode from
    ``config.server`` / ``config.failClosed``; the production admission
    (:func:`build_admission`, over ``kb`` and ``images`` when given) unless ``admission`` is
    given, which is then used as it is (no image resolver is added to it). The production
    admission reads serving runtimes the source's snapshot lacks through the source's client
    (a watch cache's), within ``kube.runtimeReadSeconds``; over a fixed snapshot it reads
    none."""
    server = config.server
    instance = os.environ.get("POD_NAME") or socket.gethostname() or "cudasched-webhook"
    metrics = metrics if metrics is not None else WebhookMetrics()
    resolver = None
    runtimes = None
    if admission is None:
        # Only a source that reads the API server (the watch cache) has runtimes to read; a
        # fixed snapshot is all there is, and admission says so (as `cudasched mutate` does).
        if hasattr(source, "client"):
            from cudasched.webhook.background.runtimereader import RuntimeReader

            # Never more than half the review's own budget: the decision still has to be made.
            budget = min(config.kube.runtime_read_seconds, server.request_timeout_seconds / 2)
            runtimes = RuntimeReader(lambda: getattr(source, "client", None), budget, metrics)
        admission, resolver = build_admission(config, metrics, kb, images, runtimes)
    return WebhookApp(
        admission,
        source,
        max_body_bytes=server.max_body_bytes,
        request_timeout=server.request_timeout_seconds,
        fail_closed=config.fail_closed,
        metrics=metrics,
        review_threads=server.review_threads,
        large_review_threads=server.large_review_threads,
        large_bodies_in_flight_bytes=server.large_bodies_in_flight_bytes,
        max_headers=server.max_headers,
        max_header_bytes=server.max_header_bytes,
        events=config.events,
        reporting_instance=instance,
        image_resolver=resolver,
        runtime_reader=runtimes,
    )
