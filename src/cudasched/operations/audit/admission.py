"""The audit's likeliest cause of pods on nodes that cannot run them: cudasched's webhook is not
there to place them. Either no MutatingWebhookConfiguration registers it (no webhook named
``*.cudasched.io``), or its Service has no ready endpoint, so, with ``failurePolicy: Ignore``,
every pod is admitted as it came.

Said only when the cluster read holds the registrations (:attr:`AuditContext.admission_read`:
a live read that may list them, or a dump that holds some) and some pod sits where it cannot
run: an audit of a cluster that runs no webhook on purpose is not told to install one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from cudasched.cluster.scope import Scope
from cudasched.operations.audit.findings import (
    POD_ON_INCOMPATIBLE_NODE,
    WEBHOOK_NOT_REGISTERED,
    WEBHOOK_UNREACHABLE,
    AuditReport,
    Finding,
)
from cudasched.operations.refs import names
from cudasched.vocab.objects import labels_of, name_of, namespace_of

__all__ = [
    "SERVICE_NAME_LABEL",
    "WEBHOOK_NAME_SUFFIX",
    "admission_findings",
    "registrations_held",
    "scoped",
]

#: A webhook of cudasched's registration is named ``<resource>.cudasched.io``
#: (``install/registration``; a test keeps them together).
WEBHOOK_NAME_SUFFIX = ".cudasched.io"
#: The label EndpointSlices carry of the Service they belong to.
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
_CONFIG_KIND = "MutatingWebhookConfiguration"
_SLICE_KIND = "EndpointSlice"


def registrations_held(objects: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``objects`` hold a MutatingWebhookConfiguration: a dump that holds one is taken
    to hold the cluster's (``cudasched snapshot --live`` writes them all)."""
    return any(o.get("kind") == _CONFIG_KIND for o in objects)


def admission_findings(
    objects: Sequence[Mapping[str, Any]], findings: Sequence[Finding]
) -> Iterator[Finding]:
    """The webhook's finding, if pods sit where they cannot run and the webhook is missing or
    unreachable; ``objects``: the cluster read's MutatingWebhookConfigurations and
    EndpointSlices (others are ignored)."""
    misplaced = [f.object for f in findings if f.code == POD_ON_INCOMPATIBLE_NODE]
    if not misplaced:
        return
    count = f"{len(misplaced)} workload(s) with pods on nodes that cannot run them"
    hooks = [
        (config, hook)
        for config in objects
        if config.get("kind") == _CONFIG_KIND
        for hook in config.get("webhooks") or ()
        if isinstance(hook, Mapping) and str(hook.get("name", "")).endswith(WEBHOOK_NAME_SUFFIX)
    ]
    if not hooks:
        yield Finding(
            WEBHOOK_NOT_REGISTERED,
            f"{_CONFIG_KIND}/cudasched-webhook",
            f"{count} ({names(misplaced)}), and no {_CONFIG_KIND} registers cudasched's "
            f"webhook (no webhook named *{WEBHOOK_NAME_SUFFIX}): nothing placed these pods by "
            "CUDA, the likeliest cause",
            fix="install the webhook: cudasched manifests --cert-manager | kubectl apply -f - "
            "(the README's Install section), then recreate the workloads named",
        )
        return
    for config, hook in hooks:
        service = (hook.get("clientConfig") or {}).get("service")
        if not isinstance(service, Mapping):
            continue  # registered by URL: its endpoints are not the cluster's to tell
        namespace, name = str(service.get("namespace")), str(service.get("name"))
        if _ready_endpoints(objects, namespace, name) > 0:
            continue
        refused = hook.get("failurePolicy") == "Fail"
        effect = (
            "GPU pods are refused" if refused else "every pod is admitted without CUDA placement"
        )
        yield Finding(
            WEBHOOK_UNREACHABLE,
            f"Service/{namespace}/{name}",
            f"{count} ({names(misplaced)}); cudasched's webhook is registered ({_CONFIG_KIND} "
            f"{name_of(config)}, {hook.get('name')}) but its Service {namespace}/{name} has no "
            f"ready endpoint, so {effect}: the likeliest cause",
            fix=f"bring the webhook back: kubectl -n {namespace} get pods,endpointslices -l "
            f"app.kubernetes.io/name=cudasched; kubectl -n {namespace} rollout status "
            f"deployment/{name}; then recreate the workloads named",
        )
        return


def scoped(
    report: AuditReport,
    scope: Scope,
    objects: Sequence[Mapping[str, Any]],
    namespaced: bool = False,
) -> AuditReport:
    """``report`` narrowed to ``scope`` (:meth:`AuditReport.within`; with ``namespaced``, to
    namespaced objects too: ``audit -n NS``), the webhook's finding said again for the
    misplaced pods left. The webhook is the cluster's (its Service in its own namespace, its
    registration in none), so narrowing by object alone dropped the likeliest cause of the
    namespace's own misplaced pods; said again, it names only the workloads in scope, and
    nothing where none is left. ``objects``: the cluster the audit read (the registrations
    and EndpointSlices among them)."""
    listed = list(objects)
    kept = report.within(scope, listed)
    if namespaced:
        kept = kept.namespaced()
    if not any(f.code in _WEBHOOK_CODES for f in report.findings):
        return kept  # registrations not read, or nothing misplaced anywhere
    rest = [f for f in kept.findings if f.code not in _WEBHOOK_CODES]
    return AuditReport.of([*rest, *admission_findings(listed, rest)])


_WEBHOOK_CODES = frozenset({WEBHOOK_NOT_REGISTERED, WEBHOOK_UNREACHABLE})


def _ready_endpoints(objects: Sequence[Mapping[str, Any]], namespace: str, service: str) -> int:
    """Endpoints of ``service`` that are ready (an unset ``ready`` counts as ready, as
    EndpointSlice consumers read it)."""
    ready = 0
    for piece in objects:
        if piece.get("kind") != _SLICE_KIND or namespace_of(piece) != namespace:
            continue
        if labels_of(piece).get(SERVICE_NAME_LABEL) != service:
            continue
        for endpoint in piece.get("endpoints") or ():
            conditions = endpoint.get("conditions") if isinstance(endpoint, Mapping) else None
            if not isinstance(conditions, Mapping) or conditions.get("ready") is not False:
                ready += 1
    return ready
