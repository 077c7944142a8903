"""The webhook's application assembled from its configuration: the production admission (the
:class:`~cudasched.webhook.admission.admitter.Admitter`, with the image resolver in its image
table when that is on) and the :class:`~cudasched.webhook.server.app.WebhookApp` with the
server's limits, wired to the knowledge it follows (a new admission built for each new bundle,
the cluster snapshot rebuilt with it). What ``cudasched webhook``, the demo, the benchmarks and
the tests build."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cudasched.webhook.metrics import WebhookMetrics
from cudasched.webhook.server.app import StagedAdmission, WebhookApp

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.images import ImageTable
    from cudasched.registry.resolver import BackgroundResolver
    from cudasched.settings.config import WebhookConfig
    from cudasched.webhook.admission.admitter import Admitter
    from cudasched.webhook.background.following import FollowedKnowledge, Judging
    from cudasched.webhook.background.runtimereader import RuntimeReader
    from cudasched.webhook.state.source import StateSource

__all__ = ["admission_builder", "build_admission", "build_app"]


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
    it reads serving runtimes its snapshot lacks, and the pod a claim was made for. Reads
    package data: once per server process, never per request."""
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
    return Admitter(config, kb, images, runtimes, pods=runtimes), resolver


def build_app(
    config: WebhookConfig,
    source: StateSource,
    *,
    admission: StagedAdmission[Any] | None = None,
    kb: KnowledgeBase | None = None,
    images: ImageTable | None = None,
    metrics: WebhookMetrics | None = None,
    knowledge: FollowedKnowledge | None = None,
) -> WebhookApp:
    """The application for ``config``: limits, time budget and failure mode from
    ``config.server`` / ``config.failClosed``; the production admission
    (:func:`build_admission`, over ``kb`` and ``images`` when given, else over ``knowledge``'s
    current knowledge) unless ``admission`` is given, which is then used as it is (no image
    resolver is added to it, and a knowledge swap does not replace it). The production
    admission reads serving runtimes the source's snapshot lacks through the source's client
    (a watch cache's), within ``kube.runtimeReadSeconds``; over a fixed snapshot it reads
    none. ``knowledge``: the knowledge this process follows (:func:`follow`)."""
    server = config.server
    instance = os.environ.get("POD_NAME") or socket.gethostname() or "cudasched-webhook"
    metrics = metrics if metrics is not None else WebhookMetrics()
    resolver = None
    ours = admission is None
    runtimes = None
    if admission is None:
        # Only a source that reads the API server (the watch cache) has runtimes to read; a
        # fixed snapshot is all there is, and admission says so (as `cudasched mutate` does).
        if hasattr(source, "client"):
            from cudasched.webhook.background.runtimereader import RuntimeReader

            # Never more than half the review's own budget: the decision still has to be made.
            budget = min(config.kube.runtime_read_seconds, server.request_timeout_seconds / 2)
            runtimes = RuntimeReader(lambda: getattr(source, "client", None), budget, metrics)
        if knowledge is not None and kb is None:
            kb, images = knowledge.current.kb, knowledge.current.images
        admission, resolver = build_admission(config, metrics, kb, images, runtimes)
    app = WebhookApp(
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
    if knowledge is not None:
        follow(app, knowledge, source, resolver if ours else None, runtimes, rebuild=ours)
    return app


def follow(
    app: WebhookApp,
    knowledge: FollowedKnowledge,
    source: StateSource,
    resolver: BackgroundResolver | None,
    runtimes: RuntimeReader | None = None,
    *,
    rebuild: bool = True,
) -> None:
    """Wire ``knowledge`` into ``app``: with ``rebuild``, a new admission is built for each
    new bundle before it is swapped in (over the same image resolver and runtime reader) and
    put in place of
    the app's; a state source that builds snapshots with the knowledge rebuilds its snapshot;
    the outcomes are counted in the app's metrics and said in Events on the webhook's Pod;
    the app starts and stops the following with the server."""
    from cudasched.webhook.background.knowledgereport import KnowledgeReporter, own_pod
    from cudasched.webhook.state.source import KnowledgeUser

    if rebuild:
        knowledge.build = admission_builder(knowledge.config, resolver, runtimes)
        knowledge.on_swap(lambda _judging, built: app.use_admission(built))
    if isinstance(source, KnowledgeUser):
        knowledge.on_swap(lambda judging, _built: source.use_knowledge(judging.kb))
    knowledge.reporter = KnowledgeReporter(
        app.metrics,
        client_of=lambda: getattr(source, "client", None),
        regarding=own_pod(),
        reporting_instance=os.environ.get("POD_NAME") or socket.gethostname() or "webhook",
    )
    app.knowledge = knowledge


def admission_builder(
    config: WebhookConfig,
    resolver: BackgroundResolver | None,
    runtimes: RuntimeReader | None = None,
) -> Callable[[Judging], Admitter]:
    """What builds the admission for each new bundle before it is swapped in: an
    :class:`Admitter` over the bundle's knowledge and image table, with the same image
    resolver and runtime reader as the one it replaces (what the resolver learnt stays)."""
    from cudasched.webhook.admission.admitter import Admitter

    def build(judging: Judging) -> Admitter:
        images = judging.images
        if resolver is not None:
            images = images.with_configs(resolver)
        return Admitter(config, judging.kb, images, runtimes, pods=runtimes)

    return build
