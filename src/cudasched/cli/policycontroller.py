"""``cudasched policy-controller``: the policy mode's controller (see
:mod:`cudasched.webhook.policy.controller`), run until SIGTERM. It reads the same configuration
file as the webhook (policy, label scheme, image table, image resolver, the knowledge bundle it
follows), so its tables hold the webhook's answers; replicas elect one writer through a Lease in
``--namespace``."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cudasched.cli.app import app, fail
from cudasched.vocab.errors import InputError

if TYPE_CHECKING:
    from cudasched.webhook.policy.controller import PolicyController

__all__ = ["policy_controller_cmd"]


@app.command("policy-controller")
def policy_controller_cmd(
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Configuration YAML (the webhook's, camelCase)."),
    ] = None,
    kubeconfig: Annotated[
        str | None,
        typer.Option(
            "--kubeconfig",
            help="Kubeconfig file; default: in-cluster service account, then $KUBECONFIG, "
            "then ~/.kube/config.",
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            help="Namespace of the leader-election Lease (default: $POD_NAMESPACE, else "
            "cudasched).",
        ),
    ] = None,
    identity: Annotated[
        str | None,
        typer.Option("--identity", help="This replica's name in the Lease (default: $POD_NAME)."),
    ] = None,
    refresh_seconds: Annotated[
        float,
        typer.Option(
            "--refresh-seconds",
            min=1.0,
            help="Decide every key again at least this often (images resolved in the "
            "background change no object).",
        ),
    ] = 15.0,
    http_port: Annotated[
        int,
        typer.Option(
            "--http-port",
            min=0,
            max=65535,
            help="Port of /metrics, /healthz and /readyz (plain HTTP, every address); 0: none.",
        ),
    ] = 8080,
    log_level: Annotated[
        str, typer.Option("--log-level", help="debug, info, warning or error.")
    ] = "info",
) -> None:
    """Keep the policy mode's PlacementTables equal to the webhook's decisions, until
    SIGTERM (leader-elected; no request path)."""
    level = logging.getLevelName(log_level.upper())
    if not isinstance(level, int):
        fail(f"invalid --log-level {log_level!r}: expected debug, info, warning or error")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for chatty in ("httpx", "httpx2"):  # a line per request (lease renewals) is noise
        logging.getLogger(chatty).setLevel(max(level, logging.WARNING))
    try:
        asyncio.run(_run(config, kubeconfig, namespace, identity, refresh_seconds, http_port))
    except InputError as exc:
        fail(str(exc))


async def _run(
    config: Path | None,
    kubeconfig: str | None,
    namespace: str | None,
    identity: str | None,
    refresh_seconds: float,
    http_port: int,
) -> None:
    from cudasched.cli.app import take_notes
    from cudasched.cli.inputs import follow_knowledge, load_settings
    from cudasched.kube.client import make_client
    from cudasched.placement.merge import AffinityMode
    from cudasched.webhook.background.following import FollowedKnowledge
    from cudasched.webhook.background.knowledgereport import KnowledgeReporter, own_pod
    from cudasched.webhook.background.watchcache import ClusterCache, StateFromObjects
    from cudasched.webhook.metrics import ControllerMetrics, WebhookMetrics
    from cudasched.webhook.policy.controller import PolicyController
    from cudasched.webhook.policy.health import health_app
    from cudasched.webhook.server.assembly import admission_builder, build_admission
    from cudasched.webhook.server.serving import bind_socket, plain_server

    cfg = load_settings(config)  # its knowledge section chooses the knowledge, as the webhook's
    if kubeconfig is not None:
        cfg = cfg.model_copy(
            update={"kube": cfg.kube.model_copy(update={"kubeconfig": kubeconfig})}
        )
    if cfg.mode is not AffinityMode.REQUIRED:
        raise InputError(
            f"the policy mode places pods with required node affinity only; the configuration "
            f"asks for mode {cfg.mode.value!r}"
        )
    started, plan = follow_knowledge()
    knowledge = FollowedKnowledge(cfg, started, plan, notes=take_notes())
    judging = knowledge.current
    metrics = WebhookMetrics()
    admitter, resolver = build_admission(cfg, metrics, judging.kb, judging.images)
    client = make_client(kubeconfig=cfg.kube.kubeconfig, field_manager="cudasched-policy")
    cache = ClusterCache(
        client=client,
        build_state=StateFromObjects(judging.kb),
        resync_seconds=float(cfg.kube.resync_seconds),
        metrics=metrics,
    )
    controller = PolicyController(
        admitter,
        cache,
        client,
        namespace=namespace or os.environ.get("POD_NAMESPACE") or "cudasched",
        identity=identity,
        refresh_seconds=refresh_seconds,
        metrics=ControllerMetrics(metrics.registry),
    )
    reporter = KnowledgeReporter(
        metrics,
        client_of=lambda: client,
        regarding=own_pod(),
        reporting_instance=controller.lease.identity,
    )
    controller.follow(knowledge, admission_builder(cfg, resolver), reporter)
    # Every address: the kubelet's probes come from the node.
    host = "0.0.0.0"  # noqa: S104
    server = plain_server(health_app(controller, metrics), host, http_port)
    try:
        named = f"--http-port {http_port}"
        listening = bind_socket(host, http_port, named=named) if http_port else None
        await _until_stopped(controller, server, listening)
    finally:
        await client.close()


async def _until_stopped(
    controller: PolicyController, server: Any, listening: socket.socket | None
) -> None:
    """Run ``controller`` (and ``server`` on ``listening``, if any) until SIGTERM or SIGINT."""
    serving = asyncio.create_task(server.serve(sockets=[listening])) if listening else None
    task = asyncio.create_task(controller.run())

    def stop() -> None:
        task.cancel()
        server.should_exit = True

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    try:
        await task
    except asyncio.CancelledError:
        pass
    finally:
        stop()
        if serving is not None:
            await serving
