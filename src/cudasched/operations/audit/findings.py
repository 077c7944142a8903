"""What an audit says: findings with a severity, a stable code, the object they are about and
how to fix them, and the report that orders and counts them.

The codes and the JSON shape (``AuditReport.to_dict``) are a contract for CI gates and
dashboards: codes are never renamed, keys are only ever added.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cudasched.cluster.scope import Scope
from cudasched.operations.refs import object_ref

__all__ = [
    "CODES",
    "AuditReport",
    "Finding",
    "Severity",
]


class Severity(StrEnum):
    """How bad a finding is. ``error`` makes ``cudasched audit`` exit 1 (a CI gate)."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}

# Stable finding codes and their severities.
POD_ON_INCOMPATIBLE_NODE = "pod-on-incompatible-node"
NO_COMPATIBLE_NODE = "no-compatible-node"
RUNTIME_WITHOUT_NODE = "runtime-without-node"
LABELS_MISSING = "labels-missing"
LABELS_DEPRECATED_ONLY = "labels-deprecated-only"
LABELS_CONFLICT = "labels-conflict"
DRIVER_UPGRADE_IN_PROGRESS = "driver-upgrade-in-progress"
DRIVER_UPGRADE_FAILED = "driver-upgrade-failed"
STALE_REQUIREMENT = "stale-requirement"
REQUIREMENT_UNKNOWN = "requirement-unknown"
REQUIREMENT_INVALID = "requirement-invalid"
DRIVER_BRANCH_ENDED = "driver-branch-ended"
DRIVER_BRANCH_LEGACY = "driver-branch-legacy"
DRIVER_BRANCH_ENDING = "driver-branch-ending"
KNOWLEDGE_STALE = "knowledge-stale"
DRIVER_RELEASE_UNKNOWN = "driver-release-unknown"
GPU_UNKNOWN = "gpu-unknown"
PLACEMENT_MOVED = "placement-moved"
DRA_EXTENDED_RESOURCE_SHARED = "dra-extended-resource-shared"
DRA_DEVICE_WITHOUT_CUDA = "dra-device-without-cuda-attributes"
DRA_EXTENDED_RESOURCE_BOTH_SOURCES = "dra-extended-resource-both-sources"
KUEUE_FLAVOR_WITHOUT_CUDA_KEY = "kueue-flavor-without-cuda-key"
KUEUE_FLAVOR_SPANS_CUDA = "kueue-flavor-spans-cuda-classes"

#: Every code an audit can report, with the severity it always has.
CODES: dict[str, Severity] = {
    POD_ON_INCOMPATIBLE_NODE: Severity.ERROR,
    NO_COMPATIBLE_NODE: Severity.ERROR,
    DRIVER_UPGRADE_FAILED: Severity.ERROR,
    RUNTIME_WITHOUT_NODE: Severity.WARNING,
    LABELS_MISSING: Severity.WARNING,
    LABELS_CONFLICT: Severity.WARNING,
    DRIVER_UPGRADE_IN_PROGRESS: Severity.WARNING,
    STALE_REQUIREMENT: Severity.WARNING,
    REQUIREMENT_INVALID: Severity.WARNING,
    DRIVER_BRANCH_ENDED: Severity.WARNING,
    DRIVER_BRANCH_LEGACY: Severity.WARNING,
    KNOWLEDGE_STALE: Severity.WARNING,
    GPU_UNKNOWN: Severity.WARNING,
    PLACEMENT_MOVED: Severity.WARNING,
    DRA_EXTENDED_RESOURCE_SHARED: Severity.WARNING,
    DRA_DEVICE_WITHOUT_CUDA: Severity.WARNING,
    DRA_EXTENDED_RESOURCE_BOTH_SOURCES: Severity.WARNING,
    KUEUE_FLAVOR_WITHOUT_CUDA_KEY: Severity.WARNING,
    KUEUE_FLAVOR_SPANS_CUDA: Severity.WARNING,
    DRIVER_RELEASE_UNKNOWN: Severity.INFO,
    DRIVER_BRANCH_ENDING: Severity.INFO,
    LABELS_DEPRECATED_ONLY: Severity.INFO,
    REQUIREMENT_UNKNOWN: Severity.INFO,
}


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing wrong (or worth knowing) about one object.

    ``object`` is ``Kind/namespace/name`` for namespaced objects, ``Kind/name`` for
    cluster-scoped ones (``Node/name``, ``ClusterServingRuntime/name``); ``node`` names the
    node involved, if any.
    """

    code: str
    object: str
    message: str
    node: str | None = None
    fix: str | None = None

    @property
    def severity(self) -> Severity:
        return CODES[self.code]

    def sort_key(self) -> tuple[int, str, str, str]:
        return (self.severity.rank, self.code, self.object, self.node or "")

    def to_dict(self) -> dict[str, str | None]:
        return {
            "severity": self.severity.value,
            "code": self.code,
            "object": self.object,
            "node": self.node,
            "message": self.message,
            "fix": self.fix,
        }


@dataclass(frozen=True, slots=True)
class AuditReport:
    """Findings ordered by severity, code and object (the same input gives the same order)."""

    findings: tuple[Finding, ...]

    @classmethod
    def of(cls, findings: Iterable[Finding]) -> AuditReport:
        unique = dict.fromkeys(findings)  # one finding once, first occurrence kept
        return cls(tuple(sorted(unique, key=Finding.sort_key)))

    def summary(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Severity}
        for finding in self.findings:
            counts[finding.severity.value] += 1
        return counts

    @property
    def has_errors(self) -> bool:
        return any(f.severity is Severity.ERROR for f in self.findings)

    def to_dict(self) -> dict[str, object]:
        return {
            "findings": [f.to_dict() for f in self.findings],
            "summary": self.summary(),
        }

    def within(self, scope: Scope, objects: Iterable[Mapping[str, Any]]) -> AuditReport:
        """The findings about objects in ``scope`` (``objects``: the cluster the audit read,
        whose labels a selector is matched against). A finding whose object is not among them
        is kept only by a scope without a selector, by its namespace."""
        if scope.is_everything:
            return self
        index = {object_ref(o): o for o in objects}

        def keep(finding: Finding) -> bool:
            obj = index.get(finding.object)
            if obj is not None:
                return scope.admits(obj)
            parts = finding.object.split("/")
            namespace = parts[1] if len(parts) == 3 else None
            return scope.selector.is_empty and scope.admits_namespace(namespace)

        return AuditReport(tuple(f for f in self.findings if keep(f)))
