"""Who may reach the webhook and what it may do, as manifests:

* A **NetworkPolicy** admits traffic to the webhook port only from the API server's address
  ranges: by default the private IPv4 ranges (RFC 1918), shared address space (100.64.0.0/10)
  and IPv6 unique local addresses (fc00::/7), where pod and node networks, and the control
  planes of most managed clusters, live. Not admitted by default: public IPv4 addresses and
  global IPv6 addresses (an API server that reaches pods from one, as some managed control
  planes and every IPv6 cluster with global pod addresses do, needs ``--api-server-cidr`` with
  its own addresses, or the webhook is never called and pods go unconstrained under
  ``failurePolicy: Ignore``). ``--api-server-cidr`` replaces the defaults. Nothing else in the
  pod listens.
* **RBAC** grants what the code calls and nothing else: list and watch of the cached kinds,
  create of ``events.k8s.io`` Events.
* ``--pull-secrets`` adds ``get`` on Secrets and ServiceAccounts, in a ClusterRole of its own
  (:func:`pull_secret_objects`).
* ``--audit-interval`` adds ``list`` on every kind a live read lists and ``create``, ``patch``
  on PolicyReports, in a ClusterRole of its own (:func:`audit_objects`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any

from cudasched.install.naming import APP, PORT, object_meta
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

__all__ = [
    "DEFAULT_API_SERVER_CIDRS",
    "audit_objects",
    "checked_cidrs",
    "network_policy",
    "pull_secret_objects",
    "rbac_objects",
]

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
        "metadata": object_meta(APP, namespace, "webhook"),
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


def rbac_objects(namespace: str) -> list[dict[str, Any]]:
    """List and watch of what the cache mirrors, create of Events: nothing else (no GET: the
    cache never reads one object)."""
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": object_meta(APP, namespace, "webhook"),
    }
    rules = [
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
    ]
    return [account, *_cluster_grant(APP, namespace, rules)]


def pull_secret_objects(namespace: str) -> list[dict[str, Any]]:
    """``--pull-secrets``: ``get`` (never list or watch) on Secrets and ServiceAccounts, in
    a ClusterRole of its own so that it is plain to see and to leave out. The webhook reads a
    Secret only by the name a workload gives, in the workload's namespace
    (:mod:`cudasched.registry.pullsecrets`); RBAC cannot narrow ``get`` to Secret types or to
    names unknown in advance, so this is the whole grant (docs/security.md)."""
    rules = [
        {
            "apiGroups": [""],
            "resources": [SECRET.plural, SERVICE_ACCOUNT.plural],
            "verbs": ["get"],
        }
    ]
    return _cluster_grant(f"{APP}-pull-secrets", namespace, rules)


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
    rules = [
        *(
            {"apiGroups": [group], "resources": plurals, "verbs": ["list"]}
            for group, plurals in listed.items()
        ),
        {
            "apiGroups": sorted({k.group for k in reports}),
            "resources": [k.plural for k in reports],
            "verbs": ["create", "patch"],
        },
    ]
    return _cluster_grant(f"{APP}-audit", namespace, rules)


def _cluster_grant(name: str, namespace: str, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A ClusterRole ``name`` of ``rules`` and its binding to the webhook's ServiceAccount."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": object_meta(name, None, "webhook"),
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": object_meta(name, None, "webhook"),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": APP, "namespace": namespace}],
        },
    ]
