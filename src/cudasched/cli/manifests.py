"""``cudasched manifests``: everything needed to install the webhook and the node agent."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from cudasched.cli.app import app, fail
from cudasched.install.access import DEFAULT_API_SERVER_CIDRS
from cudasched.install.agent import daemonset_objects
from cudasched.install.naming import DEFAULT_IMAGE, DEFAULT_NAMESPACE
from cudasched.install.webhook import DEFAULT_PRIORITY_CLASS, all_objects, checked_image, to_yaml
from cudasched.settings.config import DraMode
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import ToolkitMode
from cudasched.webhook.server.tls import generate_self_signed

ApiServerCidrOption = Annotated[
    list[str] | None,
    typer.Option(
        "--api-server-cidr",
        help="Address range the API server calls the webhook from (repeatable); the "
        "NetworkPolicy admits only these to the webhook port, and with --image-resolver the "
        "webhook's egress to the API server goes only there. Default: the private ranges "
        f"{', '.join(DEFAULT_API_SERVER_CIDRS)}.",
    ),
]
NetworkPolicyOption = Annotated[
    bool,
    typer.Option(
        "--network-policy/--no-network-policy",
        help="Include the NetworkPolicies: of the webhook port, and with --image-resolver of "
        "the webhook's egress.",
    ),
]
ImageResolverOption = Annotated[
    bool,
    typer.Option(
        "--image-resolver",
        help="Turn the webhook's image resolver on: images' configs, and their layers where "
        "a config names no CUDA, read from their registries in the background and kept in "
        "ImageFacts objects; grants get, create on imagefacts and patch on their status, "
        "and adds an egress NetworkPolicy (DNS, the API server, public registries on 443). "
        "Off by default; see docs/security.md.",
    ),
]
RegistryCidrOption = Annotated[
    list[str] | None,
    typer.Option(
        "--registry-cidr",
        help="Address range of internal registries the resolver may reach (repeatable; "
        "private ranges are otherwise excepted from its egress).",
    ),
]
ToolkitModeSetting = Annotated[
    ToolkitMode | None,
    typer.Option(
        "--toolkit-mode",
        help="How NVIDIA's container toolkit starts GPU containers on the nodes (cdi: the GPU "
        "Operator's default from v25.10; legacy): written as toolkitMode in the settings. "
        "Default: not written (legacy).",
    ),
]
ModeOption = Annotated[
    str,
    typer.Option(
        "--mode",
        help="webhook: the admission webhook; policy: a MutatingAdmissionPolicy the API "
        "server runs itself, with the controller that keeps its PlacementTables (Kubernetes "
        ">= 1.36, no webhook on the request path); both: the policy, and the webhook only "
        "for pods the tables do not know yet.",
    ),
]
DenyUnplacedOption = Annotated[
    bool,
    typer.Option(
        "--deny-unplaced",
        help="With --mode policy or both: refuse GPU pods no requirement is known for, "
        "instead of warning (a controller creating them retries until the tables know them).",
    ),
]
FailClosedOption = Annotated[
    bool,
    typer.Option(
        "--fail-closed",
        help="failurePolicy Fail: refuse pods while the webhook is unreachable instead of "
        "admitting them without CUDA-aware affinity (the default, Ignore).",
    ),
]
DraOption = Annotated[
    DraMode,
    typer.Option(
        "--dra",
        help="dra.mode in the webhook's settings (off, extended-resource, claim): GPU pods "
        "ask through the CUDA-aware DeviceClasses 'cudasched device-classes' prints, and "
        "the ResourceClaims made from a pod's templates are narrowed to its class (registers "
        "the resourceclaims webhook and grants get on pods, a ClusterRole of its own).",
    ),
]
PullSecretsOption = Annotated[
    bool,
    typer.Option(
        "--pull-secrets",
        help="Let the webhook's image resolver read the pull secrets a workload (or its "
        "ServiceAccount) names, in the workload's namespace: turns imageResolver on with "
        "pullSecrets and grants get on secrets and serviceaccounts (a ClusterRole of its "
        "own). Off by default; see docs/security.md.",
    ),
]
AuditIntervalOption = Annotated[
    int,
    typer.Option(
        "--audit-interval",
        metavar="MINUTES",
        help="Run the audit in the webhook every MINUTES (1 to 1440) and publish its "
        "findings as PolicyReports and the cudasched_audit_findings gauge: sets "
        "audit.intervalMinutes and grants list on what the audit reads and create, patch "
        "on PolicyReports (a ClusterRole of its own). 0, the default: off.",
    ),
]
#: ``--knowledge`` and ``--knowledge-key``: the bundle the webhook follows, and its signer.
KnowledgeOption = Annotated[
    str | None,
    typer.Option(
        "--knowledge",
        metavar="REF",
        help="Have the webhook follow the knowledge bundle REF names (registry/repo:tag, "
        "checked every knowledge.intervalSeconds; registry/repo@sha256:... pins one): "
        "sets knowledge.reference. Default: the knowledge built into the image.",
    ),
]
KnowledgeKeyOption = Annotated[
    Path | None,
    typer.Option(
        "--knowledge-key",
        metavar="PEM",
        help="Public key (PEM) the followed bundles must be signed by: shipped in the "
        "ConfigMap and set as knowledge.publicKeys.",
    ),
]


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
    fail_closed: FailClosedOption = False,
    agent: Annotated[
        bool, typer.Option("--agent/--no-agent", help="Include the node agent DaemonSet.")
    ] = True,
    agent_nodes: Annotated[
        str,
        typer.Option(
            "--agent-nodes",
            help="gpu: nodes NFD (pci-10de) or the GPU Operator mark as NVIDIA GPU nodes; all: "
            "every node (for clusters with neither: the agent idles where there is no GPU).",
        ),
    ] = "gpu",
    agent_runtime_class: Annotated[
        str | None,
        typer.Option(
            "--agent-runtime-class",
            help="RuntimeClass of the agent pods (e.g. nvidia) where the NVIDIA container runtime "
            "is not the default.",
        ),
    ] = None,
    image_digest: Annotated[
        str | None,
        typer.Option(
            "--image-digest",
            help="Reference the image by this digest (sha256:...) instead of its tag.",
        ),
    ] = None,
    api_server_cidr: ApiServerCidrOption = None,
    network_policy: NetworkPolicyOption = True,
    priority_class: Annotated[
        str,
        typer.Option(
            "--priority-class",
            help="PriorityClass of the webhook pods ('' for none); a system-* class comes with "
            "the ResourceQuota it needs outside kube-system.",
        ),
    ] = DEFAULT_PRIORITY_CLASS,
    pull_secrets: PullSecretsOption = False,
    image_resolver: ImageResolverOption = False,
    registry_cidr: RegistryCidrOption = None,
    toolkit_mode: ToolkitModeSetting = None,
    audit_interval: AuditIntervalOption = 0,
    mode: ModeOption = "webhook",
    deny_unplaced: DenyUnplacedOption = False,
    dra: DraOption = DraMode.OFF,
    knowledge: KnowledgeOption = None,
    knowledge_key: KnowledgeKeyOption = None,
) -> None:
    """Print the install manifests as multi-document YAML (pipe to 'kubectl apply -f -').

    ServiceAccount and least-privilege RBAC (read nodes and KServe objects), the webhook
    Deployment (2 replicas, probes, resources, PodDisruptionBudget), Service,
    MutatingWebhookConfiguration, TLS objects and, unless '--no-agent', the node agent DaemonSet.
    """
    try:
        image = checked_image(image, image_digest)
        objects = all_objects(
            namespace,
            image,
            **_tls(namespace, cert_manager),
            fail_closed=fail_closed,
            agent_objects=daemonset_objects(
                namespace, image, nodes=agent_nodes, runtime_class=agent_runtime_class
            )
            if agent
            else (),
            api_server_cidrs=(api_server_cidr or DEFAULT_API_SERVER_CIDRS)
            if network_policy
            else None,
            priority_class=priority_class,
            pull_secrets=pull_secrets,
            audit_minutes=audit_interval,
            image_resolver=image_resolver,
            registry_cidrs=registry_cidr or (),
            toolkit_mode=toolkit_mode.value if toolkit_mode is not None else None,
            mode=mode,
            deny_unplaced=deny_unplaced,
            dra_mode=dra.value,
            knowledge=knowledge,
            knowledge_key_pem=_knowledge_key(knowledge_key) if knowledge_key else None,
        )
    except InputError as exc:
        fail(str(exc))
    sys.stdout.write(to_yaml(objects))


def _knowledge_key(path: Path) -> str:
    """The PEM of ``--knowledge-key``, read as the webhook will read it (a file that is no
    public key is refused now, not in the Pod)."""
    from cudasched.cli.knowledgesource import read_trusted
    from cudasched.vocab import inputfiles

    read_trusted([path])
    return inputfiles.read_bytes(path, str(path), inputfiles.SETTINGS).decode("ascii")


def _tls(namespace: str, cert_manager: bool) -> dict[str, Any]:
    """The serving certificate's arguments of ``all_objects``: none with cert-manager, else a
    self-signed CA and certificate generated now."""
    if cert_manager:
        return {"cert_manager": True}
    bundle = generate_self_signed(namespace=namespace, ip_addresses=())
    return {
        "cert_manager": False,
        "cert_pem": bundle.cert_pem,
        "key_pem": bundle.key_pem,
        "ca_pem": bundle.ca_pem,
    }
