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
    network_policy,
    pull_secret_objects,
    rbac_objects,
)
from cudasched.install.certificates import tls_objects
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
    knowledge: str | None = None,
    knowledge_key: bool = False,
) -> dict[str, Any]:
    """The webhook's ``config.yaml`` in the ConfigMap: :data:`DEFAULT_CONFIG`; with
    ``pull_secrets`` the image resolver on, reading workloads' pull secrets; with
    ``audit_minutes`` the background audit every that many minutes, publishing reports; with
    ``knowledge`` the knowledge bundle that reference names, followed (a tag) or pinned (a
    digest), signed by the ConfigMap's :data:`KNOWLEDGE_KEY_FILE` with ``knowledge_key``."""
    settings: dict[str, Any] = dict(DEFAULT_CONFIG)
    if pull_secrets:
        settings["imageResolver"] = {"enabled": True, "pullSecrets": True}
    if audit_minutes:
        settings["audit"] = {"intervalMinutes": audit_minutes, "publishReports": True}
    if knowledge:
        settings["knowledge"] = {"reference": knowledge}
        if knowledge_key:
            settings["knowledge"]["publicKeys"] = [f"/config/{KNOWLEDGE_KEY_FILE}"]
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
    pull_secrets: bool,
    fail_closed: bool,
    deny_unplaced: bool,
) -> list[dict[str, Any]]:
    """The policy mode's objects: its controller (with the webhook's settings, less the
    server's and the background audit's) and the policies."""
    from cudasched.install.policy import policy_objects
    from cudasched.install.policycontroller import controller_objects

    controller_settings = {k: v for k, v in settings.items() if k not in ("server", "audit")}
    return [
        *controller_objects(namespace, image, controller_settings, pull_secrets=pull_secrets),
        *policy_objects(namespace, fail_closed=fail_closed, deny_unplaced=deny_unplaced),
    ]


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
    knowledge: str | None = None,
    knowledge_key_pem: str | None = None,
    mode: str = "webhook",
    deny_unplaced: bool = False,
) -> list[dict[str, Any]]:
    """Everything ``cudasched manifests`` prints, in apply order (``mode``: see
    :data:`MODES`; ``deny_unplaced``: the policy mode refuses GPU pods it cannot place).
    Without cert-manager the ``caBundle`` is ``ca_pem`` (the CA that signed ``cert_pem``), or
    ``cert_pem`` itself when the certificate is its own CA. ``api_server_cidrs`` of ``None``
    leaves the NetworkPolicy out; an empty ``priority_class`` leaves the priority (and its
    quota) out. ``pull_secrets`` adds the grant of :func:`pull_secret_objects` and turns the
    image resolver on with it; ``audit_minutes`` (0: off) the grant of :func:`audit_objects` and
    the background audit; ``knowledge`` the bundle reference the webhook follows
    (``knowledge_key_pem``: the public key its bundles must be signed by, shipped in the
    ConfigMap)."""
    _check_arguments(namespace, image, mode, audit_minutes, priority_class)
    if knowledge is not None:
        knowledge = checked_knowledge(knowledge)
    elif knowledge_key_pem is not None:
        raise InputError("--knowledge-key needs --knowledge: the reference whose bundles it signs")
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {"app.kubernetes.io/name": "cudasched"}},
        }
    ]
    settings = webhook_settings(pull_secrets=pull_secrets, audit_minutes=audit_minutes)
    if mode != "webhook":
        objects += _policy_part(
            namespace, image, settings, pull_secrets, fail_closed, deny_unplaced
        )
        if mode == "policy":
            return [*objects, *agent_objects]
    objects += rbac_objects(namespace)
    if pull_secrets:
        objects += pull_secret_objects(namespace)
    if audit_minutes:
        objects += audit_objects(namespace)
    objects += tls_objects(namespace, cert_manager=cert_manager, cert_pem=cert_pem, key_pem=key_pem)
    objects += priority_objects(namespace, priority_class)
    objects += workload_objects(
        namespace,
        image,
        priority_class=priority_class,
        settings=webhook_settings(
            pull_secrets=pull_secrets,
            audit_minutes=audit_minutes,
            knowledge=knowledge,
            knowledge_key=knowledge_key_pem is not None,
        ),
        config_files={KNOWLEDGE_KEY_FILE: knowledge_key_pem} if knowledge_key_pem else None,
    )
    if api_server_cidrs is not None:
        objects.append(network_policy(namespace, api_server_cidrs))
    objects.append(
        webhook_configuration(
            namespace,
            ca_bundle_pem=None if cert_manager else (ca_pem or cert_pem),
            cert_manager=cert_manager,
            fail_closed=fail_closed,
            beside_policy=mode == "both",
        )
    )
    objects += agent_objects
    return objects


def to_yaml(objects: Sequence[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(list(objects), sort_keys=False, explicit_start=True)
