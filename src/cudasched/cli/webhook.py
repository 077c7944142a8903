"""``cudasched webhook``: run the admission webhook (HTTPS server + watch cache).

The command only assembles what :mod:`cudasched.webhook.server.serving` and
:mod:`cudasched.webhook.background.watchcache` provide; flags override the matching configuration
fields so a quick local run needs no file (``cudasched webhook --self-signed --kubeconfig
~/.kube/config``).

With ``--cluster FILE`` the decisions come from a fixed snapshot (the same List the other
commands read) instead of the API server: admission behaviour can be tested offline and in CI,
and load and attack tests run against the real server process.

The knowledge is the configuration's ``knowledge`` section (``cudasched --knowledge`` wins over
it): read once before the server starts, as every command reads it, and then, for a registry
reference, followed by each server process every ``knowledge.intervalSeconds``
(:mod:`cudasched.webhook.background.following`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cudasched.cli.app import app, fail
from cudasched.vocab.errors import InputError

if TYPE_CHECKING:
    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.settings.config import WebhookConfig
    from cudasched.webhook.background.following import FollowedKnowledge
    from cudasched.webhook.metrics import WebhookMetrics

__all__ = ["webhook_cmd"]


@app.command("webhook")
def webhook_cmd(
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Webhook configuration YAML (camelCase keys)."),
    ] = None,
    self_signed: Annotated[
        bool,
        typer.Option(
            "--self-signed",
            help="Serve a freshly generated self-signed certificate (development only).",
        ),
    ] = False,
    tls_dir: Annotated[
        Path | None,
        typer.Option(
            "--tls-dir",
            help="Where --self-signed writes tls.crt, tls.key and ca.crt (default: a "
            "temporary directory removed at exit).",
        ),
    ] = None,
    cluster: Annotated[
        Path | None,
        typer.Option(
            "--cluster",
            help="Serve decisions from this cluster dump (kubectl get ... -o yaml/json) instead "
            "of watching the API server.",
        ),
    ] = None,
    kubeconfig: Annotated[
        str | None,
        typer.Option(
            "--kubeconfig",
            help="Kubeconfig file; default: in-cluster service account, then $KUBECONFIG, "
            "then ~/.kube/config.",
        ),
    ] = None,
    host: Annotated[str | None, typer.Option("--host", help="Listen address.")] = None,
    port: Annotated[int | None, typer.Option("--port", help="Listen port.", min=1, max=65535)] = (
        None
    ),
    log_level: Annotated[
        str, typer.Option("--log-level", help="debug, info, warning or error.")
    ] = "info",
) -> None:
    """Run the CUDA-aware admission webhook until SIGTERM (in-flight requests finish)."""
    level = logging.getLevelName(log_level.upper())
    if not isinstance(level, int):
        fail(f"invalid --log-level {log_level!r}: expected debug, info, warning or error")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if cluster is not None and kubeconfig is not None:
        fail("--cluster serves a fixed snapshot and --kubeconfig watches a cluster: give one")
    try:
        from cudasched.cli.inputs import load_settings
        from cudasched.webhook.background.watchcache import ClusterCache, StateFromObjects
        from cudasched.webhook.server.serving import run_server
        from cudasched.webhook.state.source import StateSource, StaticStateSource

        cfg = _overridden(load_settings(config), self_signed, host, port, kubeconfig)

        # One knowledge for admission, the cluster state and the audit, and admission's image
        # table (its imageOverrides checked), loaded before the server (and any worker
        # processes) start; each server process follows the reference from then on.
        knowledge = _knowledge(cfg)
        kb = knowledge.current.kb
        if cluster is not None:
            from cudasched.cluster.snapshot import load_snapshot
            from cudasched.webhook.state.clusterstate import ClusterState

            dump = load_snapshot(cluster)
            static = StaticStateSource(
                ClusterState.from_snapshot(dump, kb=kb),
                rebuild=lambda new: ClusterState.from_snapshot(dump, kb=new),
            )

            def make_source(metrics: WebhookMetrics) -> StateSource:
                _start_audit(cfg, knowledge, metrics, read=lambda: dump, publish=False)
                return static

        else:

            def make_source(metrics: WebhookMetrics) -> StateSource:
                cache = ClusterCache(
                    kubeconfig=cfg.kube.kubeconfig,
                    build_state=StateFromObjects(kb),
                    resync_seconds=float(cfg.kube.resync_seconds),
                    metrics=metrics,
                )
                cache.prepare()
                publish = cfg.audit.publish_reports
                _start_audit(cfg, knowledge, metrics, read=None, publish=publish)
                return cache

        run_server(cfg, make_source, knowledge=knowledge, self_signed_dir=tls_dir)
    except InputError as exc:
        fail(str(exc))


def _overridden(
    cfg: WebhookConfig,
    self_signed: bool,
    host: str | None,
    port: int | None,
    kubeconfig: str | None,
) -> WebhookConfig:
    """``cfg`` with what the command line says over it."""
    server_update: dict[str, Any] = {}
    if self_signed:
        server_update["self_signed"] = True
    if host is not None:
        server_update["host"] = host
    if port is not None:
        server_update["port"] = port
    if server_update:
        cfg = cfg.model_copy(update={"server": cfg.server.model_copy(update=server_update)})
    if kubeconfig is not None:
        cfg = cfg.model_copy(
            update={"kube": cfg.kube.model_copy(update={"kubeconfig": kubeconfig})}
        )
    return cfg


def _knowledge(cfg: WebhookConfig) -> FollowedKnowledge:
    """The knowledge to start with and, for a registry reference, how each server process
    follows it. What a failure to read it left is logged when the server starts, not on
    stderr at exit (and not before a bad ``--cluster`` file's one error line)."""
    from cudasched.cli.app import take_notes
    from cudasched.cli.inputs import follow_knowledge
    from cudasched.webhook.background.following import FollowedKnowledge

    knowledge, plan = follow_knowledge()
    return FollowedKnowledge(cfg, knowledge, plan, notes=take_notes())


def _start_audit(
    cfg: WebhookConfig,
    knowledge: FollowedKnowledge,
    metrics: WebhookMetrics,
    *,
    read: Callable[[], ClusterSnapshot] | None,
    publish: bool,
) -> None:
    """The background audit (``audit.intervalMinutes``, off when 0): of the live cluster,
    publishing PolicyReports when asked, or of the ``--cluster`` dump, gauge only; with the
    knowledge in use, run again at once when another is swapped in."""
    if cfg.audit.interval_minutes <= 0:
        return
    from cudasched.kube.live import read_live_cluster
    from cudasched.kube.reports import apply_reports
    from cudasched.webhook.background.periodic import AuditLoop

    def live() -> ClusterSnapshot:
        return read_live_cluster(kubeconfig=cfg.kube.kubeconfig).snapshot

    def write(reports: Sequence[Mapping[str, Any]]) -> None:
        apply_reports(reports, kubeconfig=cfg.kube.kubeconfig)

    judging = knowledge.current
    loop = AuditLoop(
        interval_seconds=cfg.audit.interval_minutes * 60,
        read=read or live,
        kb=judging.kb,
        images=judging.images,
        policy=cfg.policy,
        metrics=metrics,
        publish=write if publish else None,
        max_knowledge_age_days=cfg.knowledge.max_age_days,
    )
    knowledge.on_swap(lambda new, _built: loop.use(new.kb, new.images))
    loop.start()
