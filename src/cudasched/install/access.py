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
* ``--image-resolver`` (and ``--pull-secrets``, which needs it) adds the ImageFacts grant
  (:func:`image_resolver_objects`) and an **egress NetworkPolicy**
  (:func:`egress_network_policy`): the resolver makes the webhook a client of the registries
  pod authors name, so what it may reach is bounded to DNS, the API server's ranges (the
  ``--api-server-cidr`` ones, on 443 and 6443) and public addresses on 443, with private,
  shared, loopback, link-local (cloud metadata) and IPv6 unique-local ranges excepted; the
  internal registries' ranges are named with ``--registry-cidr``.
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
    "NOT_PUBLIC_V4",
    "NOT_PUBLIC_V6",
    "audit_objects",
    "checked_cidrs",
    "egress_network_policy",
    "image_resolver_objects",
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


#: Where the resolver's egress to registries never goes unless named (``--registry-cidr``):
#: "this network" (RFC 1122), private (RFC 1918), shared (RFC 6598, where some clouds put
#: their metadata: Alibaba's 100.100.100.200), loopback, link-local (RFC 3927: the cloud
#: metadata endpoint 169.254.169.254), the IETF and documentation blocks, benchmarking
#: (RFC 2544) and multicast and reserved space.
NOT_PUBLIC_V4 = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
)
#: The same for IPv6: the unspecified and loopback addresses, NAT64's well-known prefix (which
#: would reach IPv4 addresses through a translator), unique local (RFC 4193: AWS's metadata
#: endpoint fd00:ec2::254), link-local, documentation and multicast. IPv4-mapped addresses
#: (``::ffff:0:0/96``) are not listed: the API server reads them as IPv4, and a socket sends
#: them as IPv4 packets, which the IPv4 rule judges.
NOT_PUBLIC_V6 = (
    "::/127",
    "64:ff9b::/96",
    "fc00::/7",
    "fe80::/10",
    "2001:db8::/32",
    "ff00::/8",
)


def checked_cidrs(cidrs: Sequence[str], what: str = "API server CIDR") -> tuple[str, ...]:
    """``cidrs`` as network addresses (``10.0.0.10/32``), each validated."""
    out = []
    for cidr in cidrs:
        try:
            network = ipaddress.ip_network(cidr, strict=True)
        except ValueError:
            raise InputError(
                f"invalid {what} {cidr!r}: expected a network such as 10.0.0.10/32 "
                "or 192.168.0.0/16 (host bits zero)"
            ) from None
        out.append(str(network))
    return tuple(out)


def network_policy(namespace: str, cidrs: Sequence[str]) -> dict[str, Any]:
    """Ingress to the webhook pods only on the webhook port and only from ``cidrs``."""
    selector = _selector()
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


def _selector() -> dict[str, str]:
    return {"app.kubernetes.io/name": "cudasched", "app.kubernetes.io/component": "webhook"}


def egress_network_policy(
    namespace: str, api_server_cidrs: Sequence[str], registry_cidrs: Sequence[str] = ()
) -> dict[str, Any]:
    """Egress of the webhook pods (with the image resolver on): DNS (53, anywhere: a node-local
    cache listens on a link-local address), the API server (``api_server_cidrs`` on 443 and
    6443), registries on public addresses (443, every range of :data:`NOT_PUBLIC_V4` and
    :data:`NOT_PUBLIC_V6` excepted) and the internal registries' ``registry_cidrs`` (any
    port: a registry may listen on 5000)."""
    public = [
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": list(NOT_PUBLIC_V4)}},
        {"ipBlock": {"cidr": "::/0", "except": list(NOT_PUBLIC_V6)}},
    ]
    rules: list[dict[str, Any]] = [
        {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
        {
            "to": [{"ipBlock": {"cidr": c}} for c in checked_cidrs(api_server_cidrs)],
            "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}],
        },
        {"to": public, "ports": [{"port": 443, "protocol": "TCP"}]},
    ]
    internal = checked_cidrs(registry_cidrs, "registry CIDR")
    if internal:
        rules.append({"to": [{"ipBlock": {"cidr": c}} for c in internal]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(f"{APP}-egress", namespace, "webhook"),
        "spec": {
            "podSelector": {"matchLabels": _selector()},
            "policyTypes": ["Egress"],
            "egress": rules,
        },
    }


def image_resolver_objects(namespace: str) -> list[dict[str, Any]]:
    """``--image-resolver``: the ImageFacts grant (:mod:`cudasched.install.imagefacts`), in
    a ClusterRole of its own."""
    from cudasched.install.imagefacts import image_facts_grant

    return _cluster_grant(f"{APP}-image-facts", namespace, image_facts_grant())


def rbac_objects(namespace: str) -> list[dict[str, Any]]:
    """List and watch of what the cache mirrors, list of pods (the unbound pods of a
    controller no node can run, for their Events), create of Events: nothing else (no GET:
    the cache never reads one object)."""
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": object_meta(APP, namespace, "webhook"),
    }
    rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
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


def claim_pod_objects(namespace: str) -> list[dict[str, Any]]:
    """``--dra`` (not ``off``): ``get`` on pods, in a ClusterRole of its own. The webhook reads
    one pod by name, the one a ResourceClaim under review was made for (its ownerReference),
    to narrow the claim to what the pod runs (:mod:`cudasched.kube.ownerpod`); it never lists
    or watches pods for it."""
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    return _cluster_grant(f"{APP}-claim-pods", namespace, rules)


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
