"""The audit the webhook runs in the background (``audit.intervalMinutes``, off by default):
every interval it reads the cluster, audits it exactly as ``cudasched audit`` does, sets the
``cudasched_audit_findings{code,severity}`` gauge and, with ``audit.publishReports``, applies
the findings as PolicyReports (``wgpolicyk8s.io/v1alpha2``) so the cluster's own dashboards
show them.

It runs on its own daemon thread, never on the admission path: a slow or failed read delays
the next audit, not a review. A failed round is counted (``cudasched_audit_runs_total{result=
"failed"}``) and logged; the gauge keeps the last good answer. A namespace that had a report and
has no findings any more gets an empty one, so stale results do not linger.

It judges on the day it runs (as ``cudasched audit`` does by default: driver branches near
their end, knowledge older than ``knowledge.maxAgeDays``) with the knowledge admission uses:
when the webhook swaps in another bundle (:mod:`cudasched.webhook.background.following`) it
is told (:meth:`AuditLoop.use`) and runs at once, so the admitted pods whose placement the new
knowledge moves are reported (``placement-moved``) and logged without waiting an interval.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cudasched.cluster.fleet import Fleet
from cudasched.operations.audit import audit
from cudasched.operations.audit.findings import CODES, PLACEMENT_MOVED, AuditReport
from cudasched.operations.audit.knowledgerules import DEFAULT_MAX_AGE_DAYS
from cudasched.operations.audit.policyreport import policy_reports
from cudasched.vocab.errors import InputError

if TYPE_CHECKING:
    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.images import ImageTable
    from cudasched.vocab.requirements import Policy
    from cudasched.webhook.metrics import WebhookMetrics

__all__ = ["AuditLoop"]

log = logging.getLogger(__name__)

Publish = Callable[[Sequence[Mapping[str, Any]]], None]


class AuditLoop:
    """``read`` gives the cluster; ``publish`` (``None``: gauge only) writes the reports;
    ``clock`` says the day it judges on; knowledge dated more than ``max_knowledge_age_days``
    before it is reported."""

    def __init__(
        self,
        *,
        interval_seconds: float,
        read: Callable[[], ClusterSnapshot],
        kb: KnowledgeBase,
        images: ImageTable,
        policy: Policy,
        metrics: WebhookMetrics,
        publish: Publish | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        max_knowledge_age_days: int = DEFAULT_MAX_AGE_DAYS,
    ) -> None:
        if interval_seconds <= 0:
            raise ValueError("the background audit needs a positive interval")
        self.interval = interval_seconds
        self._read, self._publish, self._clock = read, publish, clock
        self._knowledge, self._policy = (kb, images), policy
        self._max_age = max_knowledge_age_days
        self._findings, self._runs = metrics.audit_metrics()
        self._published: set[str] = set()
        self._moved: set[tuple[str, str]] = set()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.last: AuditReport | None = None

    def use(self, kb: KnowledgeBase, images: ImageTable) -> None:
        """Audit with this knowledge from now on, the next round at once (any thread)."""
        self._knowledge = (kb, images)
        self._wake.set()

    def run_once(self) -> AuditReport | None:
        """One round; the report, or ``None`` when it failed (counted and logged)."""
        kb, images = self._knowledge
        try:
            snapshot = self._read()
            fleet = Fleet.from_snapshot(snapshot, kb)
            today = self._clock().date()
            report = audit(
                snapshot,
                fleet,
                images,
                self._policy,
                today=today,
                max_knowledge_age_days=self._max_age,
            )
            self._gauge(report)
            self._log_moved(report)
            if self._publish is not None:
                reports = policy_reports(
                    report, snapshot.objects(), self._clock(), namespaces=self._published
                )
                self._publish(reports)
                self._published = {
                    str(r["metadata"]["namespace"])
                    for r in reports
                    if r["kind"] == "PolicyReport" and r["results"]
                }
        except InputError as exc:
            self._runs.labels(result="failed").inc()
            log.warning("background audit failed: %s", exc)
            return None
        except Exception:  # a bug must not stop the loop (or the webhook)
            self._runs.labels(result="failed").inc()
            log.exception("background audit failed")
            return None
        self._runs.labels(result="ok").inc()
        self.last = report
        return report

    def _log_moved(self, report: AuditReport) -> None:
        """Log each pod whose placement the knowledge moved, once while it stays moved."""
        moved = {(f.object, f.message) for f in report.findings if f.code == PLACEMENT_MOVED}
        for ref, message in sorted(moved - self._moved):
            log.warning("placement-moved: %s %s", ref, message)
        self._moved = moved

    def _gauge(self, report: AuditReport) -> None:
        counts: dict[tuple[str, str], int] = {(c, s.value): 0 for c, s in CODES.items()}
        for finding in report.findings:
            key = (finding.code, finding.severity.value)
            counts[key] = counts.get(key, 0) + 1
        for (code, severity), count in counts.items():
            self._findings.labels(code=code, severity=severity).set(count)

    def start(self) -> AuditLoop:
        """Audit now and then every interval, on a daemon thread, until :meth:`stop`."""

        def loop() -> None:
            while not self._stop.is_set():
                self._wake.clear()
                self.run_once()
                self._wake.wait(self.interval)

        self._thread = threading.Thread(target=loop, name="cudasched-audit", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
