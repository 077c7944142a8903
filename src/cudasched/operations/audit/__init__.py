"""The audit: findings about a cluster as it is now (``auditor``), their codes and severities
(``findings``) and the autoscalers' node groups it reads (``nodegroups``)."""

from cudasched.operations.audit.auditor import audit, object_ref
from cudasched.operations.audit.findings import CODES, AuditReport, Finding, Severity

__all__ = ["CODES", "AuditReport", "Finding", "Severity", "audit", "object_ref"]
