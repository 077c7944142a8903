"""The webhook's application assembled from its configuration: the production reviewer (the
:class:`~cudasched.webhook.admission.admitter.Admitter`), the image resolver when it is on, and the
:class:`~cudasched.webhook.server.app.WebhookApp` with the server's limits. What ``cudasched
webhook``, the demo, the benchmarks and the tests build."""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

from cudasched.webhook.metrics import WebhookMetrics
from cudasched.webhook.server.app import Reviewer, WebhookApp

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.settings.config import WebhookConfig
    from cudasched.webhook.state.source import StateSource

__all__ = ["build_app", "default_reviewer"]


def default_reviewer(config: WebhookConfig, kb: KnowledgeBase | None = None) -> Reviewer:
    """The production :class:`Admitter` for ``config``: the given knowledge base (else the
    bundled one) and the built-in image table with ``imageOverrides`` in front."""
    from cudasched.webhook.admission.admitter import Admitter

    return Admitter.from_config(config, kb)


def build_app(
    config: WebhookConfig,
    source: StateSource,
    *,
    reviewer: Reviewer | None = None,
    metrics: WebhookMetrics | None = None,
) -> WebhookApp:
    """The application for ``config``: limits, time budget and failure mode from
    ``config.server`` / ``config.failClosed``; the Admitter unless ``reviewer`` is given."""
    server = config.server
    instance = os.environ.get("POD_NAME") or socket.gethostname() or "cudasched-webhook"
    metrics = metrics if metrics is not None else WebhookMetrics()
    reviewer = reviewer if reviewer is not None else default_reviewer(config)
    resolver = None
    images = getattr(reviewer, "images", None)
    if config.image_resolver.enabled and images is not None and hasattr(images, "with_configs"):
        from cudasched.webhook.background.imageresolver import build_resolver

        # Admission's image table asks the resolver before its rules (never waiting longer
        # than the budget); the app warms it from each snapshot and closes it at shutdown.
        resolver = build_resolver(
            config.image_resolver,
            metrics,
            mirrors=getattr(images, "mirrors", ()),
            kube=config.kube,
        )
        reviewer.images = images.with_configs(resolver)  # type: ignore[attr-defined]
    app = WebhookApp(
        reviewer,
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
    )
    app.image_resolver = resolver
    return app
