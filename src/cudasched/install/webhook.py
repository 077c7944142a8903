"""Install manifests for the webhook (and the node agent): pure builders of Kubernetes objects,
everything ``cudasched manifests`` prints, in apply order (:func:`all_objects`). The parts, each
with the choices a reviewer should know about: the registration with the API server
(:mod:`cudasched.install.registration`: failure policy, reinvocation, timeout, side effects,
match conditions, namespace selector), the serving certificate
(:mod:`cudasched.install.certificates`), RBAC and the NetworkPolicy
(:mod:`cudasched.install.access`). Here, the webhook's own workload:

* **Priority.** The webhook runs as ``system-cluster-critical`` (``--priority-class``): it is
  on the path of every GPU pod creation, and an evicted webhook means pods without CUDA
  placement. Outside ``kube-system`` GKE (and any cluster whose quota admission limits the
  system classes) admits such pods only where a ResourceQuota scoped to the class exists, so
  one is shipped with it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import yaml

from cudasched.install.access import (
    DEFAULT_API_SERVER_CIDRS,
    audit_objects,
    claim_pod_objects,
    egress_network_policy,
    image_resolver_objects,
    network_policy,
    pull_secret_objects,
    rbac_objects,
)
from cudasched.install.certificates import tls_objects
from cudasched.install.imagefacts import image_facts_crd, image_facts_policy
from cudasched.install.naming import (
    APP,
    DEFAULT_IMAGE,
    DEFAULT_NAMESPACE,
    PORT,
    REPLICAS,
    object_labels,
    object_meta,
)
from cudasched.install.registration import webhook_configuration
from cudasched.knowledge.imageref import parse_image_ref
from cudasched.vocab.errors import InputError
from cudasched.vocab.labelsyntax import dns_label_ok, dns_subdomain_ok

__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_PRIORITY_CLASS",
    "KNOWLEDGE_KEY_FILE",
    "MAX_AUDIT_MINUTES",
    "MODES",
    "all_objects",
    "checked_image",
    "checked_knowledge",
    "priority_objects",
    "to_yaml",
    "webhook_settings",
    "workload_objects",
]

_SHA256_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_REGISTRY_HOST = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?", re.IGNORECASE)

#: The priority class of the webhook pods unless ``--priority-class`` says otherwise.
DEFAULT_PRIORITY_CLASS = "system-cluster-critical"

DEFAULT_CONFIG = {
    "mode": "required",
    "policy": "strict",
    "labelScheme": "auto",
    "onNoFit": "warn",
    "onUnknownRequirement": "warn",
    "server": {
        "port": PORT,
        "certFile": "/tls/tls.crt",
        "keyFile": "/tls/tls.key",
    },
}


_MAX_NAME = 255

#: ``cudasched manifests --mode``: the webhook alone, the MutatingAdmissionPolicy and its
#: controller alone (no webhook on the request path), or both (the webhook only for what the
#: policy's tables do not know yet).
MODES = ("webhook", "policy", "both")


def _shown(text: str, most: int = 60) -> str:
    """``text`` quoted, cut to its first ``most`` characters for an error line."""
    return repr(text) if len(text) <= most else f"{text[:most]!r}... ({len(text):,} characters)"


def checked_image(image: str, digest: str | None = None) -> str:
    """The image reference the manifests use: ``image`` validated, or with ``digest`` the
    image's repository pinned to that digest (``repo@sha256:...``, the tag dropped)."""
    try:
        ref = parse_image_ref(image)
    except InputError:
        raise InputError(
            f"invalid image {image!r}: expected an image reference such as "
            "registry.example.com/cudasched:0.1.0"
        ) from None
    if image != image.strip():
        raise InputError(f"invalid image {image!r}: surrounding whitespace")
    # The distribution spec's limit (distribution/reference, reference.go NameTotalLengthMax):
    # a repository name, registry host included, of at most 255 characters (a tag's 128 is
    # parse_image_ref's).
    name = f"{ref.host}/{ref.path}" if ref.host else ref.path
    if len(name) > _MAX_NAME:
        raise InputError(
            f"invalid image {_shown(image)}: its repository name is {len(name):,} characters "
            f"(at most {_MAX_NAME}, registry host included)"
        )
    if digest is None:
        return image
    if not _SHA256_DIGEST.fullmatch(digest):
        raise InputError(
            f"invalid image digest {digest!r}: expected sha256: followed by 64 lowercase hex digits"
        )
    repository = f"{ref.host}/{ref.path}" if ref.host else ref.path
    return f"{repository}@{digest}"


def priority_objects(namespace: str, priority_class: str) -> list[dict[str, Any]]:
    """The ResourceQuota a ``system-*`` priority class needs outside ``kube-system`` (room for
    the replicas and one surge pod of a rolling update), or nothing."""
    if not priority_class.startswith("system-") or namespace == "kube-system":
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": object_meta(f"{APP}-{priority_class}", namespace, "webhook"),
            "spec": {
                "hard": {"pods": str(REPLICAS + 2)},
                "scopeSelector": {
                    "matchExpressions": [
                        {"scopeName": "PriorityClass", "operator": "In", "values": [priority_class]}
                    ]
                },
            },
        }
    ]


#: The longest background audit interval the webhook's configuration accepts, in minutes.
MAX_AUDIT_MINUTES = 1440


#: Where the public key a followed knowledge bundle must be signed by is mounted (a file of
#: the webhook's ConfigMap: a public key is no secret).
KNOWLEDGE_KEY_FILE = "knowledge.pub"


def webhook_settings(
    *,
    pull_secrets: bool = False,
    audit_minutes: int = 0,
    image_resolver: bool = False,
    toolkit_mode: str | None = None,
    dra_mode: str = "off",
) -> dict[str, Any]:
    """The webhook's ``config.yaml`` in the ConfigMap: :data:`DEFAULT_CONFIG`; with
    ``image_resolver`` the image resolver on (configs, layers, shared facts), with
    ``pull_secrets`` too and reading workloads' pull secrets; with ``audit_minutes`` the
    background audit every that many minutes, publishing reports; ``toolkit_mode`` the
    container toolkit's mode the nodes run (``legacy``, ``cdi``); ``dra_mode`` (not ``off``)
    the ``dra:`` section."""
    settings: dict[str, Any] = dict(DEFAULT_CONFIG)
    if dra_mode != "off":
        settings["dra"] = {"mode": dra_mode}
    if toolkit_mode is not None:
        settings["toolkitMode"] = toolkit_mode
    if pull_secrets:
        settings["imageResolver"] = {"enabled": True, "pullSecrets": True}
    elif image_resolver:
        settings["imageResolver"] = {"enabled": True}
    if audit_minutes:
        settings["audit"] = {"intervalMinutes": audit_minutes, "publishReports": True}
    return settings


def checked_knowledge(reference: str) -> str:
    """``--knowledge``: a registry reference the webhook can follow (``host/repo:tag``) or
    pin (``host/repo@sha256:...``), never a path (nothing of the installer's disk is in the
    Pod)."""
    try:
        ref = parse_image_ref(reference)
    except InputError:
        ref = None
    host_ok = ref is not None and ref.host and _REGISTRY_HOST.fullmatch(ref.host) is not None
    if ref is None or not host_ok or (ref.digest and not _SHA256_DIGEST.fullmatch(ref.digest)):
        raise InputError(
            f"invalid --knowledge {_shown(reference)}: expected the registry reference of a "
            "knowledge bundle, host/repository:tag to follow or host/repository@sha256:... "
            "to pin"
        )
    return reference.strip()


def _container(image: str) -> dict[str, Any]:
    """The webhook's container: probes, resources, a read-only root and the settings and
    serving certificate mounted."""
    probe_common = {"periodSeconds": 10, "timeoutSeconds": 2, "failureThreshold": 3}
    return {
        "name": "webhook",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["webhook", "--config", "/config/config.yaml"],
        # Names this replica as the reportingInstance of its Events, and as the object its
        # Events about the knowledge it follows regard (background/knowledgereport.py).
        "env": [
            {"name": env, "valueFrom": {"fieldRef": {"fieldPath": field}}}
            for env, field in (
                ("POD_NAME", "metadata.name"),
                ("POD_NAMESPACE", "metadata.namespace"),
                ("POD_UID", "metadata.uid"),
            )
        ],
        "ports": [{"name": "https", "containerPort": PORT, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "https", "scheme": "HTTPS"},
            "initialDelaySeconds": 2,
            **probe_common,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "https", "scheme": "HTTPS"},
            "initialDelaySeconds": 5,
            **probe_common,
        },
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"memory": "256Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "tls", "mountPath": "/tls", "readOnly": True},
            {"name": "config", "mountPath": "/config", "readOnly": True},
        ],
    }


def workload_objects(
    namespace: str,
    image: str,
    replicas: int = REPLICAS,
    priority_class: str = DEFAULT_PRIORITY_CLASS,
    settings: dict[str, Any] | None = None,
    config_files: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """ConfigMap (``settings``, :func:`webhook_settings` by default, and ``config_files``
    beside it in ``/config``), Deployment, PodDisruptionBudget and Service of the webhook."""
    settings = settings if settings is not None else webhook_settings()
    selector = {"app.kubernetes.io/name": "cudasched", "app.kubernetes.io/component": "webhook"}
    container = _container(image)
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": object_meta(f"{APP}-config", namespace, "webhook"),
            "data": {
                "config.yaml": yaml.safe_dump(settings, sort_keys=False),
                **(config_files or {}),
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": object_meta(APP, namespace, "webhook"),
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": selector},
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
                },
                "template": {
                    "metadata": {"labels": {**object_labels("webhook"), **selector}},
                    "spec": {
                        "serviceAccountName": APP,
                        **({"priorityClassName": priority_class} if priority_class else {}),
                        "terminationGracePeriodSeconds": 30,
                        "topologySpreadConstraints": [
                            {
                                "maxSkew": 1,
                                "topologyKey": "kubernetes.io/hostname",
                                "whenUnsatisfiable": "ScheduleAnyway",
                                "labelSelector": {"matchLabels": selector},
                            }
                        ],
                        "containers": [container],
                        "volumes": [
                            {"name": "tls", "secret": {"secretName": f"{APP}-tls"}},
                            {"name": "config", "configMap": {"name": f"{APP}-config"}},
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": object_meta(APP, namespace, "webhook"),
            "spec": {"minAvailable": 1, "selector": {"matchLabels": selector}},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": object_meta(APP, namespace, "webhook"),
            "spec": {
                "selector": selector,
                "ports": [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}],
            },
        },
    ]


def _check_arguments(
    namespace: str, image: str, mode: str, audit_minutes: int, priority_class: str
) -> None:
    """One-line errors for a namespace, image, mode, audit interval or priority class that is
    not one."""
    if not dns_label_ok(namespace):
        raise InputError(f"invalid namespace {namespace!r}: expected a DNS label (e.g. cudasched)")
    if mode not in MODES:
        raise InputError(f"invalid --mode {mode!r}: expected one of {', '.join(MODES)}")
    checked_image(image)
    if not 0 <= audit_minutes <= MAX_AUDIT_MINUTES:
        raise InputError(
            f"invalid --audit-interval {audit_minutes}: expected minutes from 1 to "
            f"{MAX_AUDIT_MINUTES} (a day), or 0 for no background audit"
        )
    if priority_class and not dns_subdomain_ok(priority_class):
        raise InputError(
            f"invalid priority class {priority_class!r}: expected a PriorityClass name such as "
            "system-cluster-critical, or '' for none"
        )


def _policy_part(
    namespace: str,
    image: str,
    settings: dict[str, Any],
    key_files: dict[str, str],
    pull_secrets: bool,
    fail_closed: bool,
    deny_unplaced: bool,
) -> list[dict[str, Any]]:
    """The policy mode's objects: its controller (with the webhook's settings, less the
    server's and the background audit's: ``dra`` included, as the policy asks GPUs through the
    classes in either ``dra.mode``, and ``knowledge`` with its key files, as the controller
    follows the same bundle) and the policies."""
    from cudasched.install.policy import policy_objects
    from cudasched.install.policycontroller import controller_objects

    controller_settings = {k: v for k, v in settings.items() if k not in ("server", "audit")}
    resolver = bool((settings.get("imageResolver") or {}).get("enabled"))
    controller = controller_objects(
        namespace,
        image,
        controller_settings,
        config_files=key_files,
        pull_secrets=pull_secrets,
        image_resolver=resolver,
    )
    return [
        *controller,
        *policy_objects(namespace, fail_closed=fail_closed, deny_unplaced=deny_unplaced),
    ]


def _check_registry_cidrs(registry_cidrs: Sequence[str], resolver: bool, policies: bool) -> None:
    """Internal registries name where the resolver's egress may go: only with the resolver
    and its NetworkPolicies."""
    if registry_cidrs and not (resolver and policies):
        raise InputError(
            "--registry-cidr names where the image resolver's egress may go: give it with "
            "--image-resolver (and without --no-network-policy)"
        )


def _namespace_object(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": namespace, "labels": {"app.kubernetes.io/name": "cudasched"}},
    }


def _access_objects(
    namespace: str, resolver: bool, pull_secrets: bool, audit_minutes: int, dra_mode: str = "off"
) -> list[dict[str, Any]]:
    """The webhook's identity and grants: the RBAC, and the grants the resolver, pull
    secrets, background audit and DRA (``get`` on the pods claims are made for) add."""
    objects = rbac_objects(namespace)
    if resolver:
        objects += image_resolver_objects(namespace)
    if pull_secrets:
        objects += pull_secret_objects(namespace)
    if audit_minutes:
        objects += audit_objects(namespace)
    if dra_mode != "off":
        objects += claim_pod_objects(namespace)
    return objects


def _knowledge_part(
    knowledge: str | None, key_pem: str | None
) -> tuple[dict[str, Any], dict[str, str]]:
    """The webhook's ``knowledge`` settings for ``--knowledge`` (none without it) and the
    files beside them in its ConfigMap (the public key of ``--knowledge-key``)."""
    if knowledge is None:
        if key_pem is not None:
            raise InputError(
                "--knowledge-key needs --knowledge: the reference whose bundles it signs"
            )
        return {}, {}
    section: dict[str, Any] = {"reference": checked_knowledge(knowledge)}
    if key_pem is None:
        return {"knowledge": section}, {}
    section["publicKeys"] = [f"/config/{KNOWLEDGE_KEY_FILE}"]
    return {"knowledge": section}, {KNOWLEDGE_KEY_FILE: key_pem}


def all_objects(
    namespace: str = DEFAULT_NAMESPACE,
    image: str = DEFAULT_IMAGE,
    *,
    cert_manager: bool = True,
    cert_pem: bytes | None = None,
    key_pem: bytes | None = None,
    ca_pem: bytes | None = None,
    fail_closed: bool = False,
    agent_objects: Sequence[dict[str, Any]] = (),
    api_server_cidrs: Sequence[str] | None = DEFAULT_API_SERVER_CIDRS,
    priority_class: str = DEFAULT_PRIORITY_CLASS,
    pull_secrets: bool = False,
    audit_minutes: int = 0,
    image_resolver: bool = False,
    registry_cidrs: Sequence[str] = (),
    toolkit_mode: str | None = None,
    knowledge: str | None = None,
    knowledge_key_pem: str | None = None,
    mode: str = "webhook",
    deny_unplaced: bool = False,
    dra_mode: str = "off",
) -> list[dict[str, Any]]:
    """Everything ``cudasched manifests`` prints, in apply order (``mode``: :data:`MODES`;
    ``deny_unplaced``: the policy refuses GPU pods it cannot place). Without cert-manager the
    ``caBundle`` is ``ca_pem`` (the CA that signed ``cert_pem``), or ``cert_pem`` if its own CA.
    ``api_server_cidrs`` of ``None`` leaves the NetworkPolicies out; an empty ``priority_class``
    the priority (and its quota). ``image_resolver`` turns the resolver on, with the ImageFacts
    grant and the egress NetworkPolicy (``registry_cidrs``: internal registries);
    ``pull_secrets`` too, with :func:`pull_secret_objects`; ``audit_minutes`` (0: off)
    :func:`audit_objects` and the background audit; ``toolkit_mode`` goes into the settings;
    ``knowledge`` (``knowledge_key_pem``: its signer's key) the bundle the webhook and the
    policy controller follow;
    ``dra_mode`` the ``dra:`` settings (and the claims' webhook and grant). The ImageFacts CRD
    and its status policy come in every mode (:mod:`.imagefacts`)."""
    _check_arguments(namespace, image, mode, audit_minutes, priority_class)
    resolver = image_resolver or pull_secrets
    _check_registry_cidrs(registry_cidrs, resolver, api_server_cidrs is not None)
    followed, key_files = _knowledge_part(knowledge, knowledge_key_pem)
    # The ImageFacts CRD and the policy guarding its status, in every mode: people read and
    # correct facts whether or not a resolver writes them, and either mode's resolver may.
    objects = [_namespace_object(namespace), image_facts_crd(), *image_facts_policy(namespace)]
    settings = webhook_settings(
        pull_secrets=pull_secrets,
        audit_minutes=audit_minutes,
        image_resolver=image_resolver,
        toolkit_mode=toolkit_mode,
        dra_mode=dra_mode,
    )
    settings |= followed
    if mode != "webhook":
        objects += _policy_part(
            namespace, image, settings, key_files, pull_secrets, fail_closed, deny_unplaced
        )
        if mode == "policy":
            return [*objects, *agent_objects]
    objects += _access_objects(namespace, resolver, pull_secrets, audit_minutes, dra_mode)
    objects += tls_objects(namespace, cert_manager=cert_manager, cert_pem=cert_pem, key_pem=key_pem)
    objects += priority_objects(namespace, priority_class)
    objects += workload_objects(
        namespace,
        image,
        priority_class=priority_class,
        settings=settings,
        config_files=key_files,
    )
    objects += _network_policies(namespace, api_server_cidrs, resolver, registry_cidrs)
    objects.append(
        webhook_configuration(
            namespace,
            ca_bundle_pem=None if cert_manager else (ca_pem or cert_pem),
            cert_manager=cert_manager,
            fail_closed=fail_closed,
            beside_policy=mode == "both",
            dra_claims=dra_mode != "off",
        )
    )
    objects += agent_objects
    return objects


def _network_policies(
    namespace: str,
    api_server_cidrs: Sequence[str] | None,
    resolver: bool,
    registry_cidrs: Sequence[str],
) -> list[dict[str, Any]]:
    """The webhook's ingress NetworkPolicy, and its egress one with the resolver (none without
    ``api_server_cidrs``)."""
    if api_server_cidrs is None:
        return []
    policies = [network_policy(namespace, api_server_cidrs)]
    if resolver:
        policies.append(egress_network_policy(namespace, api_server_cidrs, registry_cidrs))
    return policies


def to_yaml(objects: Sequence[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(list(objects), sort_keys=False, explicit_start=True)
