"""Operations: what is wrong in a cluster right now (``audit``), its node pools, which serving
runtime can run on which pool (the compatibility matrix), the self-contained HTML report that
shows all of it, and driver planning (``recommend``, ``planning``: which driver each pool should
run, as GPU Operator objects and rollout waves). Pure: snapshots and fleets in, data (and HTML
text) out."""

from cudasched.operations.audit import audit, object_ref
from cudasched.operations.findings import CODES, AuditReport, Finding, Severity

__all__ = ["CODES", "AuditReport", "Finding", "Severity", "audit", "object_ref"]
