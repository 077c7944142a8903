"""Install manifests for the webhook (and the node agent): pure builders of Kubernetes objects.

Choices a reviewer should know about, each deliberate:

* ``failurePolicy: Ignore``. The webhook sits on every GPU pod creation; if it is down, pods are
  admitted without CUDA-aware affinity (the pre-cudasched behaviour) rather than blocking every
  deployment in the cluster. The cost is that a pod created during an outage may land on a node
  that cannot run it. Clusters that prefer the opposite pass ``--fail-closed`` (``Fail``).
* ``reinvocationPolicy: IfNeeded``: other mutating webhooks (KServe's own pod mutator, Istio,
  GPU sharing) may add containers or affinity after us; being re-invoked lets us AND the
  requirement into their final affinity. The mutation is idempotent, so re-invocation is safe.
* ``timeoutSeconds: 3``: the API server default is 10 s; admission answers from memory in
  milliseconds, so a short timeout bounds the damage of a stuck replica.
* ``sideEffects``: ``None`` for pods; ``NoneOnDryRun`` for InferenceServices and
  LLMInferenceServices, on which the webhook records a ``NoCompatibleNode`` Event when no node
  can run them (never for a dry run).
* LLMInferenceServices are matched at ``v1alpha1`` and ``v1alpha2`` (KServe 0.16 serves the
  first, 0.17 and later both, storing the second); ``matchPolicy: Equivalent`` sends requests
  for either.
* ``matchConditions`` skip pods that cannot need a GPU before the API server calls us at all:
  no ``nvidia.com/*`` resource, no resource claim, no ``cudasched.io/*`` annotation, no KServe
  InferenceService label and not part of an LLMInferenceService (whose model server may take
  its GPUs from a config the pod does not show until it is built). The webhook re-checks
  everything itself, so the conditions only save round trips.
* ``namespaceSelector`` excludes ``kube-system`` and cudasched's own namespace, so the webhook can
  never block its own recovery.
* A **NetworkPolicy** admits traffic to the webhook port only from the API server's address
  ranges: by default the private IPv4 ranges (RFC 1918), shared address space (100.64.0.0/10)
  and IPv6 unique local addresses (fc00::/7), where pod and node networks, and the control
  planes of most managed clusters, live. Not admitted by default: public IPv4 addresses and
  global IPv6 addresses (an API server that reaches pods from one, as some managed control
  planes and every IPv6 cluster with global pod addresses do, needs ``--api-server-cidr`` with
  its own addresses, or the webhook is never called and pods go unconstrained under
  ``failurePolicy: Ignore``). ``--api-server-cidr`` replaces the defaults. Nothing else in the
  pod listens.
* **Certificates** (cert-manager): a self-signed root, a CA Issuer and a serving certificate;
  the ``caBundle`` comes from the root, so renewing the serving certificate never changes it.
* **Priority.** The webhook runs as ``system-cluster-critical`` (``--priority-class``): it is
  on the path of every GPU pod creation, and an evicted webhook means pods without CUDA
  placement. Outside ``kube-system`` GKE (and any cluster whose quota admission limits the
  system classes) admits such pods only where a ResourceQuota scoped to the class exists, so
  one is shipped with it.
* **RBAC** grants what the code calls and nothing else: list and watch of the cached kinds,
  create of ``events.k8s.io`` Events.
"""

from __future__ import annotations

import base64
import ipaddress
import re
from collections.abc import Sequence
from typing import Any

import yaml

from cudasched import __version__
from cudasched.knowledge.images import parse_image_ref
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import (
    CLUSTER_POLICY_REPORT,
    CLUSTER_SERVING_RUNTIME,
    INFERENCE_SERVICE,
    KSERVE_GROUP,
    LLM_INFERENCE_SERVICE,
    POLICY_REPORT,
    SECRET,
    SERVICE_ACCOUNT,
    SERVING_RUNTIME,
)
from cudasched.workloads.kserve.llm import PART_OF_LABEL, PART_OF_VALUE
from cudasched.workloads.pods import SKIP_VALUES

DEFAULT_NAMESPACE = "cudasched"
DEFAULT_IMAGE = f"cudasched/cudasched:{__version__}"
APP = "cudasched-webhook"
#: The cert-manager CA certificate (and its Issuer and Secret) that signs the serving one.
CA_CERTIFICATE = f"{APP}-ca"
PORT = 8443
REPLICAS = 2
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SHA256_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")

#: Where the API server's requests come from unless ``--api-server-cidr`` says: the private
#: IPv4 ranges, shared address space (CGNAT, used by some clouds for pods) and IPv6 unique
#: local addresses, which hold the pod and node networks of nearly every cluster.
DEFAULT_API_SERVER_CIDRS = (
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "fc00::/7",
)

#: The priority class of the webhook pods unless ``--priority-class`` says otherwise.
DEFAULT_PRIORITY_CLASS = "system-cluster-critical"

# CEL: true when the pod could need a GPU or declares a requirement. Kept on one condition so a
# pod is sent when ANY of these hold (matchConditions are ANDed with each other).
_POD_MAY_NEED_GPU = " || ".join(
    [
        "(has(object.metadata.annotations) && "
        "object.metadata.annotations.exists(k, k.startsWith('cudasched.io/')))",
        "(has(object.metadata.labels) && "
        "'serving.kserve.io/inferenceservice' in object.metadata.labels)",
        f"(has(object.metadata.labels) && '{PART_OF_LABEL}' in object.metadata.labels && "
        f"object.metadata.labels['{PART_OF_LABEL}'] == '{PART_OF_VALUE}')",
        "(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)",
        "object.spec.containers.exists(c, has(c.resources) && has(c.resources.limits) && "
        "c.resources.limits.exists(r, r.startsWith('nvidia.com/')))",
    ]
)


def _any_case(word: str) -> str:
    """An RE2 pattern for ``word`` in any ASCII letter case (``[Tt][Rr][Uu][Ee]``): ``(?i)``
    would also fold non-ASCII letters, which the webhook's own reading does not."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in word)


# The skip switch as the webhook reads it (workloads.SKIP_VALUES, any case, surrounding
# whitespace ignored), so a pod the webhook would skip is not even sent to it.
_SKIP_PATTERN = r"^\\s*(" + "|".join(_any_case(v) for v in sorted(SKIP_VALUES)) + r")\\s*$"
_NOT_SKIPPED = (
    "!has(object.metadata.annotations) || "
    f"!('{L.ANN_SKIP}' in object.metadata.annotations) || "
    f"!object.metadata.annotations['{L.ANN_SKIP}'].matches('{_SKIP_PATTERN}')"
)

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


def _labels(component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "cudasched",
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/version": __version__,
    }


def _meta(name: str, namespace: str | None, component: str, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": _labels(component)}
    if namespace is not None:
        meta["namespace"] = namespace
    meta.update(extra)
    return meta


_MAX_NAME = 255


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


def checked_cidrs(cidrs: Sequence[str]) -> tuple[str, ...]:
    """``cidrs`` as network addresses (``10.0.0.10/32``), each validated."""
    out = []
    for cidr in cidrs:
        try:
            network = ipaddress.ip_network(cidr, strict=True)
        except ValueError:
            raise InputError(
                f"invalid API server CIDR {cidr!r}: expected a network such as 10.0.0.10/32 "
                "or 192.168.0.0/16 (host bits zero)"
            ) from None
        out.append(str(network))
    return tuple(out)


def network_policy(namespace: str, cidrs: Sequence[str]) -> dict[str, Any]:
    """Ingress to the webhook pods only on the webhook port and only from ``cidrs``."""
    selector = {"app.kubernetes.io/name": "cudasched", "app.kubernetes.io/component": "webhook"}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(APP, namespace, "webhook"),
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "ports": [{"port": PORT, "protocol": "TCP"}],
                    "from": [{"ipBlock": {"cidr": cidr}} for cidr in checked_cidrs(cidrs)],
                }
            ],
        },
    }


def priority_objects(namespace: str, priority_class: str) -> list[dict[str, Any]]:
    """The ResourceQuota a ``system-*`` priority class needs outside ``kube-system`` (room for
    the replicas and one surge pod of a rolling update), or nothing."""
    if not priority_class.startswith("system-") or namespace == "kube-system":
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": _meta(f"{APP}-{priority_class}", namespace, "webhook"),
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


def rbac_objects(namespace: str) -> list[dict[str, Any]]:
    """List and watch of what the cache mirrors, create of Events: nothing else (no GET: the
    cache never reads one object)."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(APP, namespace, "webhook"),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(APP, None, "webhook"),
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
                {
                    "apiGroups": [KSERVE_GROUP],
                    "resources": [
                        INFERENCE_SERVICE.plural,
                        SERVING_RUNTIME.plural,
                        CLUSTER_SERVING_RUNTIME.plural,
                        LLM_INFERENCE_SERVICE.plural,
                    ],
                    "verbs": ["list", "watch"],
                },
                {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(APP, None, "webhook"),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": APP,
            },
            "subjects": [{"kind": "ServiceAccount", "name": APP, "namespace": namespace}],
        },
    ]


def pull_secret_objects(namespace: str) -> list[dict[str, Any]]:
    """``--pull-secrets``: ``get`` (never list or watch) on Secrets and ServiceAccounts, in
    a ClusterRole of its own so that it is plain to see and to leave out. The webhook reads a
    Secret only by the name a workload gives, in the workload's namespace
    (:mod:`cudasched.registry.pullsecrets`); RBAC cannot narrow ``get`` to Secret types or to
    names unknown in advance, so this is the whole grant (docs/security.md)."""
    name = f"{APP}-pull-secrets"
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(name, None, "webhook"),
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": [SECRET.plural, SERVICE_ACCOUNT.plural],
                    "verbs": ["get"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(name, None, "webhook"),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": APP, "namespace": namespace}],
        },
    ]


#: The longest background audit interval the webhook's configuration accepts, in minutes.
MAX_AUDIT_MINUTES = 1440


def audit_objects(namespace: str) -> list[dict[str, Any]]:
    """``--audit-interval``: what the webhook's background audit needs besides the webhook's
    own grant, in a ClusterRole of its own: ``list`` on every kind a live read lists (the
    audit reads the cluster as ``cudasched audit --live`` does), and ``create`` and ``patch``
    on PolicyReports and ClusterPolicyReports (server-side apply)."""
    from cudasched.kube.live import LIVE_KINDS

    listed: dict[str, list[str]] = {}
    for kind in LIVE_KINDS:
        listed.setdefault(kind.group, []).append(kind.plural)
    reports = [POLICY_REPORT, CLUSTER_POLICY_REPORT]
    name = f"{APP}-audit"
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(name, None, "webhook"),
            "rules": [
                *(
                    {"apiGroups": [group], "resources": plurals, "verbs": ["list"]}
                    for group, plurals in listed.items()
                ),
                {
                    "apiGroups": sorted({k.group for k in reports}),
                    "resources": [k.plural for k in reports],
                    "verbs": ["create", "patch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(name, None, "webhook"),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": APP, "namespace": namespace}],
        },
    ]


def webhook_settings(*, pull_secrets: bool = False, audit_minutes: int = 0) -> dict[str, Any]:
    """The webhook's ``config.yaml`` in the ConfigMap: :data:`DEFAULT_CONFIG`; with
    ``pull_secrets`` the image resolver on, reading workloads' pull secrets; with
    ``audit_minutes`` the background audit every that many minutes, publishing reports."""
    settings: dict[str, Any] = dict(DEFAULT_CONFIG)
    if pull_secrets:
        settings["imageResolver"] = {"enabled": True, "pullSecrets": True}
    if audit_minutes:
        settings["audit"] = {"intervalMinutes": audit_minutes, "publishReports": True}
    return settings


def workload_objects(
    namespace: str,
    image: str,
    replicas: int = REPLICAS,
    priority_class: str = DEFAULT_PRIORITY_CLASS,
    settings: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """ConfigMap (``settings``, :func:`webhook_settings` by default), Deployment,
    PodDisruptionBudget and Service of the webhook."""
    settings = settings if settings is not None else webhook_settings()
    selector = {"app.kubernetes.io/name": "cudasched", "app.kubernetes.io/component": "webhook"}
    probe_common = {"periodSeconds": 10, "timeoutSeconds": 2, "failureThreshold": 3}
    container = {
        "name": "webhook",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["webhook", "--config", "/config/config.yaml"],
        # Names this replica as the reportingInstance of its Events.
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
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
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(f"{APP}-config", namespace, "webhook"),
            "data": {"config.yaml": yaml.safe_dump(settings, sort_keys=False)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(APP, namespace, "webhook"),
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": selector},
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
                },
                "template": {
                    "metadata": {"labels": {**_labels("webhook"), **selector}},
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
            "metadata": _meta(APP, namespace, "webhook"),
            "spec": {"minAvailable": 1, "selector": {"matchLabels": selector}},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(APP, namespace, "webhook"),
            "spec": {
                "selector": selector,
                "ports": [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}],
            },
        },
    ]


def webhook_configuration(
    namespace: str,
    *,
    ca_bundle_pem: bytes | None = None,
    cert_manager: bool = False,
    fail_closed: bool = False,
) -> dict[str, Any]:
    """The MutatingWebhookConfiguration: one webhook for pods, one for InferenceServices, one
    for LLMInferenceServices."""
    annotations: dict[str, str] = {}
    if cert_manager:
        annotations["cert-manager.io/inject-ca-from"] = f"{namespace}/{CA_CERTIFICATE}"
    client_config_extra: dict[str, Any] = {}
    if ca_bundle_pem is not None:
        client_config_extra["caBundle"] = base64.b64encode(ca_bundle_pem).decode()
    namespace_selector = {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": sorted({"kube-system", namespace}),
            }
        ]
    }
    common: dict[str, Any] = {
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "timeoutSeconds": 3,
        "failurePolicy": "Fail" if fail_closed else "Ignore",
        "reinvocationPolicy": "IfNeeded",
        "matchPolicy": "Equivalent",
        "namespaceSelector": namespace_selector,
    }

    def client_config(path: str) -> dict[str, Any]:
        return {
            "service": {"name": APP, "namespace": namespace, "path": path, "port": 443},
            **client_config_extra,
        }

    meta = _meta(APP, None, "webhook")
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": meta,
        "webhooks": [
            {
                "name": "pods.cudasched.io",
                "clientConfig": client_config("/mutate/pods"),
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "matchConditions": [
                    {"name": "may-need-gpu", "expression": _POD_MAY_NEED_GPU},
                    {"name": "not-skipped", "expression": _NOT_SKIPPED},
                ],
                **common,
            },
            {
                "name": "inferenceservices.cudasched.io",
                "clientConfig": client_config("/mutate/inferenceservices"),
                "rules": [
                    {
                        "apiGroups": [INFERENCE_SERVICE.group],
                        "apiVersions": [INFERENCE_SERVICE.version],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [INFERENCE_SERVICE.plural],
                        "scope": "Namespaced",
                    }
                ],
                "matchConditions": [{"name": "not-skipped", "expression": _NOT_SKIPPED}],
                **common,
                # Records a NoCompatibleNode Event on the service, never for a dry run.
                "sideEffects": "NoneOnDryRun",
            },
            {
                "name": "llminferenceservices.cudasched.io",
                "clientConfig": client_config("/mutate/llminferenceservices"),
                "rules": [
                    {
                        "apiGroups": [LLM_INFERENCE_SERVICE.group],
                        "apiVersions": ["v1alpha1", "v1alpha2"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [LLM_INFERENCE_SERVICE.plural],
                        "scope": "Namespaced",
                    }
                ],
                "matchConditions": [{"name": "not-skipped", "expression": _NOT_SKIPPED}],
                **common,
                "sideEffects": "NoneOnDryRun",
            },
        ],
    }


def tls_objects(
    namespace: str,
    *,
    cert_manager: bool,
    cert_pem: bytes | None = None,
    key_pem: bytes | None = None,
) -> list[dict[str, Any]]:
    """Serving certificate: with cert-manager, a chain whose root never changes: a self-signed
    Issuer makes a CA certificate (ten years), a CA Issuer signs the serving certificate with it
    (90 days, renewed 15 days before, a new key each time), and the webhook's ``caBundle`` is
    injected from the CA's Secret, so a renewal of the serving certificate never changes the
    trust root the API server holds. Without cert-manager, a Secret holding the given
    self-signed pair (whose certificate is also the webhook's ``caBundle``)."""
    dns = [f"{APP}.{namespace}.svc", f"{APP}.{namespace}.svc.cluster.local"]
    if cert_manager:
        ecdsa = {"algorithm": "ECDSA", "size": 256}
        return [
            {
                "apiVersion": "cert-manager.io/v1",
                "kind": "Issuer",
                "metadata": _meta(f"{APP}-selfsigned", namespace, "webhook"),
                "spec": {"selfSigned": {}},
            },
            {
                "apiVersion": "cert-manager.io/v1",
                "kind": "Certificate",
                "metadata": _meta(CA_CERTIFICATE, namespace, "webhook"),
                "spec": {
                    "isCA": True,
                    "commonName": f"{APP} CA",
                    "secretName": CA_CERTIFICATE,
                    "issuerRef": {"name": f"{APP}-selfsigned", "kind": "Issuer"},
                    "privateKey": {**ecdsa, "rotationPolicy": "Never"},
                    "duration": "87600h",
                    "renewBefore": "720h",
                },
            },
            {
                "apiVersion": "cert-manager.io/v1",
                "kind": "Issuer",
                "metadata": _meta(CA_CERTIFICATE, namespace, "webhook"),
                "spec": {"ca": {"secretName": CA_CERTIFICATE}},
            },
            {
                "apiVersion": "cert-manager.io/v1",
                "kind": "Certificate",
                "metadata": _meta(APP, namespace, "webhook"),
                "spec": {
                    "secretName": f"{APP}-tls",
                    "dnsNames": dns,
                    "issuerRef": {"name": CA_CERTIFICATE, "kind": "Issuer"},
                    "privateKey": {**ecdsa, "rotationPolicy": "Always"},
                    "duration": "2160h",
                    "renewBefore": "360h",
                },
            },
        ]
    if cert_pem is None or key_pem is None:
        raise ValueError("self-signed TLS objects need the certificate and key PEM")
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": _meta(f"{APP}-tls", namespace, "webhook"),
            "type": "kubernetes.io/tls",
            "data": {
                "tls.crt": base64.b64encode(cert_pem).decode(),
                "tls.key": base64.b64encode(key_pem).decode(),
            },
        }
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
) -> list[dict[str, Any]]:
    """Everything ``cudasched manifests`` prints, in apply order. Without cert-manager the
    ``caBundle`` is ``ca_pem`` (the CA that signed ``cert_pem``), or ``cert_pem`` itself when
    the certificate is its own CA. ``api_server_cidrs`` of ``None`` leaves the NetworkPolicy
    out; an empty ``priority_class`` leaves the priority (and its quota) out. ``pull_secrets``
    adds the grant of :func:`pull_secret_objects` and turns the image resolver on with it;
    ``audit_minutes`` (0: off) the grant of :func:`audit_objects` and the background audit."""
    if not isinstance(namespace, str) or not _DNS_LABEL.fullmatch(namespace):
        raise InputError(f"invalid namespace {namespace!r}: expected a DNS label (e.g. cudasched)")
    checked_image(image)
    if not 0 <= audit_minutes <= MAX_AUDIT_MINUTES:
        raise InputError(
            f"invalid --audit-interval {audit_minutes}: expected minutes from 1 to "
            f"{MAX_AUDIT_MINUTES} (a day), or 0 for no background audit"
        )
    if priority_class and (
        len(priority_class) > 253 or not _DNS_SUBDOMAIN.fullmatch(priority_class)
    ):
        raise InputError(
            f"invalid priority class {priority_class!r}: expected a PriorityClass name such as "
            "system-cluster-critical, or '' for none"
        )
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {"app.kubernetes.io/name": "cudasched"}},
        }
    ]
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
        settings=webhook_settings(pull_secrets=pull_secrets, audit_minutes=audit_minutes),
    )
    if api_server_cidrs is not None:
        objects.append(network_policy(namespace, api_server_cidrs))
    objects.append(
        webhook_configuration(
            namespace,
            ca_bundle_pem=None if cert_manager else (ca_pem or cert_pem),
            cert_manager=cert_manager,
            fail_closed=fail_closed,
        )
    )
    objects += agent_objects
    return objects


def to_yaml(objects: Sequence[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(list(objects), sort_keys=False, explicit_start=True)
