"""The policy controller's install objects (``cudasched manifests --mode policy|both``): its
ServiceAccount, what it may read and write, its settings and its Deployment.

* **Its own Deployment, two replicas, one writer.** The replicas elect a leader through a Lease
  in cudasched's namespace (``kube/leases``); the other waits, with its caches warm, to take
  over within the lease's 15 s. It serves no request: the API server never calls it, so a
  controller that is down leaves the tables as they were (stale at worst), never the pods
  unplaced.
* **Probes and metrics** on plain HTTP port 8080 (``/readyz``, ``/healthz``, ``/metrics``): a
  replica whose round hangs is restarted rather than holding the lease without writing.
* **Least privilege.** ``list``/``watch`` of what its decisions read (nodes, KServe's objects)
  and of what creates pods (Pods and the workload controllers: their templates are the keys);
  full rights on ``PlacementTable`` objects only; Leases in its own namespace only. With
  ``--pull-secrets``, ``get`` on Secrets and ServiceAccounts, as the webhook's image resolver.
* **The same settings as the webhook**, in its own ConfigMap, so its tables hold the answers the
  webhook would give: with ``--knowledge`` it follows the same bundle (and may create Events on
  its own Pod, where a refused bundle is said).
"""

from __future__ import annotations

from typing import Any

import yaml

from cudasched.install.imagefacts import image_facts_grant
from cudasched.install.naming import POLICY_CONTROLLER, object_labels, object_meta
from cudasched.vocab.kinds import (
    CLUSTER_SERVING_RUNTIME,
    CONTROLLERS,
    EVENT,
    INFERENCE_SERVICE,
    LEASE,
    LLM_INFERENCE_SERVICE,
    PLACEMENT_TABLE,
    SECRET,
    SERVICE_ACCOUNT,
    SERVING_RUNTIME,
)

__all__ = ["CONTROLLER", "HTTP_PORT", "controller_objects"]

CONTROLLER = POLICY_CONTROLLER
#: Its /metrics, /healthz and /readyz (``--http-port``).
HTTP_PORT = 8080
_COMPONENT = "policy-controller"


def _cluster_rules(*, pull_secrets: bool, image_resolver: bool) -> list[dict[str, Any]]:
    """What it reads everywhere (its sources and decisions' inputs), its tables in every
    namespace, and what the resolver's options add."""
    watched: dict[str, list[str]] = {"": ["nodes", "pods"]}
    for kind in CONTROLLERS:
        watched.setdefault(kind.group, []).append(kind.plural)
    kserve = (INFERENCE_SERVICE, SERVING_RUNTIME, CLUSTER_SERVING_RUNTIME, LLM_INFERENCE_SERVICE)
    watched[INFERENCE_SERVICE.group] = [k.plural for k in kserve]
    rules: list[dict[str, Any]] = [
        {"apiGroups": [group], "resources": plurals, "verbs": ["list", "watch"]}
        for group, plurals in watched.items()
    ]
    # The tables live in every pod namespace (one table per namespace): cluster-wide, through
    # the ClusterRole below, as the sources are read.
    rules.append(
        {
            "apiGroups": [PLACEMENT_TABLE.group],
            "resources": [PLACEMENT_TABLE.plural],
            "verbs": ["get", "list", "watch", "create", "update", "delete"],
        }
    )
    if image_resolver:  # it shares what it read of an image, and reads people's overrides
        rules += image_facts_grant()
    if pull_secrets:
        rules.append(
            {
                "apiGroups": [""],
                "resources": [SECRET.plural, SERVICE_ACCOUNT.plural],
                "verbs": ["get"],
            }
        )
    return rules


def _rbac(
    namespace: str, *, pull_secrets: bool, follows: bool, image_resolver: bool
) -> list[dict[str, Any]]:
    rules = _cluster_rules(pull_secrets=pull_secrets, image_resolver=image_resolver)
    subject = [{"kind": "ServiceAccount", "name": CONTROLLER, "namespace": namespace}]

    def ref(kind: str) -> dict[str, str]:
        return {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": CONTROLLER}

    rbac = "rbac.authorization.k8s.io/v1"
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": object_meta(CONTROLLER, namespace, _COMPONENT),
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": object_meta(CONTROLLER, None, _COMPONENT),
            "rules": rules,
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": object_meta(CONTROLLER, None, _COMPONENT),
            "roleRef": ref("ClusterRole"),
            "subjects": subject,
        },
        {
            "apiVersion": rbac,
            "kind": "Role",
            "metadata": object_meta(CONTROLLER, namespace, _COMPONENT),
            "rules": [
                {
                    "apiGroups": [LEASE.group],
                    "resources": [LEASE.plural],
                    "verbs": ["get", "create", "update"],
                },
                # Following a bundle: a refused one is said in an Event on the replica's Pod.
                *(
                    [{"apiGroups": [EVENT.group], "resources": [EVENT.plural], "verbs": ["create"]}]
                    if follows
                    else []
                ),
            ],
        },
        {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": object_meta(CONTROLLER, namespace, _COMPONENT),
            "roleRef": ref("Role"),
            "subjects": subject,
        },
    ]


def _deployment(namespace: str, image: str, replicas: int) -> dict[str, Any]:
    selector = {"app.kubernetes.io/name": "cudasched", "app.kubernetes.io/component": _COMPONENT}
    field = [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
        ("POD_UID", "metadata.uid"),  # the knowledge's Events are about the replica's Pod
    ]
    container = {
        "name": "controller",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": [
            "policy-controller",
            "--config",
            "/config/config.yaml",
            "--http-port",
            str(HTTP_PORT),
        ],
        "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}],
        # Ready once its caches are listed; alive while its rounds go on (webhook/policy/health).
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "http"},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "http"},
            "initialDelaySeconds": 15,
            "periodSeconds": 20,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "env": [{"name": n, "valueFrom": {"fieldRef": {"fieldPath": p}}} for n, p in field],
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"memory": "512Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [{"name": "config", "mountPath": "/config", "readOnly": True}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(CONTROLLER, namespace, _COMPONENT),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": {**object_labels(_COMPONENT), **selector}},
                "spec": {
                    "serviceAccountName": CONTROLLER,
                    "terminationGracePeriodSeconds": 30,
                    "containers": [container],
                    "volumes": [{"name": "config", "configMap": {"name": f"{CONTROLLER}-config"}}],
                },
            },
        },
    }


def controller_objects(
    namespace: str,
    image: str,
    settings: dict[str, Any],
    *,
    config_files: dict[str, str] | None = None,
    replicas: int = 2,
    pull_secrets: bool = False,
    image_resolver: bool = False,
) -> list[dict[str, Any]]:
    """ServiceAccount and grants, the settings ConfigMap (``config_files`` beside the settings,
    as the webhook's: a bundle signer's public key) and the Deployment."""
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(f"{CONTROLLER}-config", namespace, _COMPONENT),
        "data": {
            "config.yaml": yaml.safe_dump(settings, sort_keys=False),
            **(config_files or {}),
        },
    }
    follows = bool((settings.get("knowledge") or {}).get("reference"))
    return [
        *_rbac(
            namespace, pull_secrets=pull_secrets, follows=follows, image_resolver=image_resolver
        ),
        config,
        _deployment(namespace, image, replicas),
    ]
