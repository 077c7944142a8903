"""``cudasched manifests``: everything needed to install the webhook and the node agent."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cudasched.cli.app import app, fail
from cudasched.errors import InputError
from cudasched.install.agent import daemonset_objects
from cudasched.install.webhook import DEFAULT_IMAGE, DEFAULT_NAMESPACE, all_objects, to_yaml
from cudasched.webhook.tls import generate_self_signed


@app.command("manifests")
def manifests_command(
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Namespace to install into.")
    ] = DEFAULT_NAMESPACE,
    cert_manager: Annotated[
        bool,
        typer.Option(
            "--cert-manager/--self-signed",
            help="Serving certificate from cert-manager (an Issuer + Certificate, caBundle "
            "injected by cainjector), or a self-signed CA generated now and embedded in a Secret "
            "and the webhook's caBundle (valid one year; re-run to rotate).",
        ),
    ] = True,
    image: Annotated[
        str, typer.Option(help="Container image of cudasched (webhook and agent).")
    ] = DEFAULT_IMAGE,
    fail_closed: Annotated[
        bool,
        typer.Option(
            "--fail-closed",
            help="failurePolicy Fail: refuse pods while the webhook is unreachable instead of "
            "admitting them without CUDA-aware affinity (the default, Ignore).",
        ),
    ] = False,
    agent: Annotated[
        bool, typer.Option("--agent/--no-agent", help="Include the node agent DaemonSet.")
    ] = True,
) -> None:
    """Print the install manifests as multi-document YAML (pipe to ``kubectl apply -f -``).

    ServiceAccount and least-privilege RBAC (read nodes and KServe objects), the webhook
    Deployment (2 replicas, probes, resources, PodDisruptionBudget), Service,
    MutatingWebhookConfiguration, TLS objects and, unless ``--no-agent``, the node agent DaemonSet.
    """
    try:
        cert_pem = key_pem = None
        if not cert_manager:
            bundle = generate_self_signed(namespace=namespace, ip_addresses=())
            cert_pem, key_pem = bundle.cert_pem, bundle.key_pem
            ca_pem = bundle.ca_pem
        objects = all_objects(
            namespace,
            image,
            cert_manager=cert_manager,
            cert_pem=cert_pem,
            key_pem=key_pem,
            ca_pem=None if cert_manager else ca_pem,
            fail_closed=fail_closed,
            agent_objects=daemonset_objects(namespace, image) if agent else (),
        )
    except InputError as exc:
        fail(str(exc))
    sys.stdout.write(to_yaml(objects))
