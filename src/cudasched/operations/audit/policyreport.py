"""An audit as the Policy WG's reports (``wgpolicyk8s.io/v1alpha2``), so the dashboards and
tools that read Kyverno's and other engines' findings (Policy Reporter, kubectl get polr) show
cudasched's too.

One ``PolicyReport`` per namespace (findings about its objects) and one
``ClusterPolicyReport`` (findings about nodes, node pools and other cluster-scoped objects),
each named :data:`REPORT_NAME` and labelled as managed by cudasched, with the version of
cudasched that wrote it. A finding becomes one result: policy ``cudasched``, rule = the
finding's code, ``fail`` for an error (severity high, scored), ``warn`` for a warning (medium);
an information is no failed check: ``pass`` with its note (``skip`` where cudasched could not
judge the object: ``requirement-unknown``), without a severity (the CRD has no ``info``; ``low``
would make it a finding of low severity) and ``properties.severity: info``. The message carries
the fix; the object is ``resources``, a node pool's findings name its Nodes there (a pool is no
Kubernetes object); ``properties`` keep the fix, the node and the pool apart for tools that read
them. The summary counts the results. Pure: the caller gives the time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from cudasched import __version__
from cudasched.operations.audit.findings import (
    REQUIREMENT_UNKNOWN,
    AuditReport,
    Finding,
    Severity,
)
from cudasched.operations.refs import object_ref
from cudasched.vocab.objects import metadata_of

__all__ = ["API_VERSION", "REPORT_NAME", "VERSION_LABEL", "policy_reports"]

API_VERSION = "wgpolicyk8s.io/v1alpha2"
REPORT_NAME = "cudasched-audit"
POLICY = "cudasched"
CATEGORY = "CUDA compatibility"
MANAGED_BY = {"app.kubernetes.io/managed-by": "cudasched"}
VERSION_LABEL = "app.kubernetes.io/version"

_RESULT = {
    Severity.ERROR: ("fail", "high", True),
    Severity.WARNING: ("warn", "medium", False),
    Severity.INFO: ("pass", None, False),
}
#: Information findings that say cudasched could not judge the object: the policy was skipped.
_SKIPPED = frozenset({REQUIREMENT_UNKNOWN})
_POOL = "Pool"


def _reference(ref: str, obj: Mapping[str, Any] | None) -> dict[str, str]:
    parts = ref.split("/")
    out: dict[str, str] = {"kind": parts[0], "name": parts[-1]}
    if len(parts) == 3:
        out["namespace"] = parts[1]
    if obj is not None:
        out["apiVersion"] = str(obj.get("apiVersion") or "")
        uid = metadata_of(obj).get("uid")
        if isinstance(uid, str) and uid:
            out["uid"] = uid
    return {k: v for k, v in out.items() if v}


def _resources(finding: Finding, index: Mapping[str, Mapping[str, Any]]) -> list[dict[str, str]]:
    """The objects a result is about: the finding's object, or a pool's Nodes."""
    if finding.kind == _POOL and finding.nodes:
        return [_reference(f"Node/{n}", index.get(f"Node/{n}")) for n in finding.nodes]
    return [_reference(finding.object, index.get(finding.object))]


def _result(
    finding: Finding, index: Mapping[str, Mapping[str, Any]], when: datetime
) -> dict[str, Any]:
    outcome, severity, scored = _RESULT[finding.severity]
    if finding.code in _SKIPPED:
        outcome = "skip"
    message = finding.message + (f"; fix: {finding.fix}" if finding.fix else "")
    properties = {"severity": finding.severity.value}
    if finding.fix:
        properties["fix"] = finding.fix
    if finding.node:
        properties["node"] = finding.node
    if finding.kind == _POOL:
        properties["pool"] = finding.name
    rated = {"severity": severity} if severity is not None else {}
    return {
        "policy": POLICY,
        "rule": finding.code,
        "category": CATEGORY,
        "result": outcome,
        **rated,
        "scored": scored,
        "source": POLICY,
        "message": message,
        "properties": properties,
        "resources": _resources(finding, index),
        "timestamp": {"seconds": int(when.timestamp()), "nanos": 0},
    }


def _report(kind: str, namespace: str | None, results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    summary = {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}
    for result in results:
        summary[result["result"]] += 1
    labels = {**MANAGED_BY, VERSION_LABEL: __version__}
    metadata: dict[str, Any] = {"name": REPORT_NAME, "labels": labels}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": metadata,
        "summary": summary,
        "results": list(results),
    }


def policy_reports(
    report: AuditReport,
    objects: Iterable[Mapping[str, Any]],
    when: datetime,
    *,
    namespaces: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """The ClusterPolicyReport, then one PolicyReport per namespace with findings (and per
    namespace of ``namespaces``, empty when it has none: a publisher's way to clear a report
    whose findings are gone), namespaces in order."""
    index = {object_ref(o): o for o in objects}
    cluster: list[dict[str, Any]] = []
    by_namespace: dict[str, list[dict[str, Any]]] = {ns: [] for ns in namespaces}
    for finding in report.findings:
        result = _result(finding, index, when)
        parts = finding.object.split("/")
        if len(parts) == 3:
            by_namespace.setdefault(parts[1], []).append(result)
        else:
            cluster.append(result)
    reports = [_report("ClusterPolicyReport", None, cluster)]
    reports += [_report("PolicyReport", ns, by_namespace[ns]) for ns in sorted(by_namespace)]
    return reports
