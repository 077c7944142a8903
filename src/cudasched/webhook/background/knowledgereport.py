"""What the webhook's knowledge follower did, said where an operator looks: metrics, an Event,
and the lines ``/readyz`` adds.

* **Metrics** (:class:`~cudasched.webhook.metrics.KnowledgeMetrics`): the knowledge in use
  (version, digest, origin, age), every check by outcome, failures by reason and how many in a
  row.
* **Events** (``events.k8s.io/v1``), regarding the webhook's own Pod (``POD_NAME``,
  ``POD_NAMESPACE`` and ``POD_UID`` from the downward API): each follower replica checks on
  its own, so the replica that saw a refusal is the object that says so, ``kubectl describe
  pod`` shows it, and no permission beyond creating Events is needed. ``KnowledgeUpdated``
  (Normal) at each swap; ``KnowledgeRefused`` or ``KnowledgeUnreachable`` (Warning) when a
  failure starts, changes reason, or has lasted another hour; ``KnowledgeRecovered`` (Normal)
  at the first good check after failures. An unchanged reference is no Event.
* **Never on the request path**: :meth:`KnowledgeReporter.observe` runs in the follower's
  thread and hands an Event to the server's event loop, where it is sent with a timeout; a
  failure to send is logged and counted, never seen by a review.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudasched.knowledge.following import FollowOutcome, FollowResult
from cudasched.kube.events import NOTE_MAX_CHARS, EventRecorder, ObjectReference

if TYPE_CHECKING:
    from cudasched.knowledge.provenance import Provenance
    from cudasched.webhook.metrics import WebhookMetrics

__all__ = ["EVENT_REASONS", "KnowledgeReporter", "own_pod"]

log = logging.getLogger(__name__)

_CONTROLLER = "cudasched-webhook"
_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

#: The Event's type and reason for each outcome that is said (unchanged after failures:
#: ``KnowledgeRecovered``).
EVENT_REASONS: dict[FollowResult, tuple[str, str]] = {
    FollowResult.UPDATED: ("Normal", "KnowledgeUpdated"),
    FollowResult.REFUSED: ("Warning", "KnowledgeRefused"),
    FollowResult.UNREACHABLE: ("Warning", "KnowledgeUnreachable"),
    FollowResult.UNCHANGED: ("Normal", "KnowledgeRecovered"),
}


def own_pod(
    environ: Mapping[str, str] | None = None, namespace_file: Path = _NAMESPACE_FILE
) -> ObjectReference | None:
    """The webhook's own Pod as the downward API names it (``None`` outside a Pod): its
    namespace from ``POD_NAMESPACE``, else the service account's namespace file."""
    env = os.environ if environ is None else environ
    name = env.get("POD_NAME", "").strip()
    namespace = env.get("POD_NAMESPACE", "").strip()
    if not namespace:
        try:
            namespace = namespace_file.read_text("utf-8").strip()
        except OSError:
            namespace = ""
    if not name or not namespace:
        return None
    uid = env.get("POD_UID", "").strip() or None
    return ObjectReference("v1", "Pod", name, uid=uid, namespace=namespace)


class KnowledgeReporter:
    """Metrics, Events and readiness lines for one server process.

    ``client_of`` returns the lightkube client to send Events with (``None``: they are only
    logged); ``regarding`` is the object they are about (``None``: logged only);
    ``repeat_seconds`` is how long a failure that goes on waits for its next Event."""

    def __init__(
        self,
        metrics: WebhookMetrics,
        *,
        client_of: Callable[[], Any] = lambda: None,
        regarding: ObjectReference | None = None,
        reporting_instance: str = _CONTROLLER,
        repeat_seconds: float = 3600.0,
        send_timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.metrics = metrics.knowledge_metrics()
        self._events = metrics.events
        self._client_of = client_of
        self.regarding = regarding
        self.reporting_instance = reporting_instance
        self.repeat_seconds = repeat_seconds
        self.send_timeout = send_timeout
        self._clock = clock
        self._wall = wall
        self._loop: asyncio.AbstractEventLoop | None = None
        self._failing: tuple[FollowResult, str] | None = None
        self._said_at = 0.0
        self._date: datetime.date | None = None
        self.metrics.age.set_function(self._age_seconds)

    # ------------------------------------------------------------------ lifecycle

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send Events on ``loop`` (the server's) from now on."""
        self._loop = loop

    def stop(self) -> None:
        self._loop = None

    # ------------------------------------------------------------------ what is in use

    def in_use(self, provenance: Provenance) -> None:
        """The knowledge admission judges with now (at start and at each swap)."""
        self.metrics.info.clear()
        self.metrics.info.labels(
            version=provenance.version, digest=provenance.digest, origin=provenance.origin
        ).set(1)
        self._date = provenance.date

    def _age_seconds(self) -> float:
        if self._date is None:
            return float("nan")
        start = datetime.datetime.combine(self._date, datetime.time(), datetime.UTC)
        return self._wall() - start.timestamp()

    # ------------------------------------------------------------------ outcomes

    def observe(self, outcome: FollowOutcome) -> None:
        """Count one check's outcome and say it in an Event when it is news; any thread."""
        m = self.metrics
        m.checks.labels(outcome=outcome.result.value).inc()
        m.consecutive_failures.set(outcome.followed.failures)
        if outcome.result in (FollowResult.REFUSED, FollowResult.UNREACHABLE):
            m.failures.labels(reason=outcome.reason or "error").inc()
            log.warning("knowledge: %s", outcome.message)
        said = self._news(outcome)
        if said is not None:
            self._say(outcome, *said)

    def _news(self, outcome: FollowOutcome) -> tuple[str, str] | None:
        """The Event's type and reason when ``outcome`` is worth one, else ``None``."""
        result = outcome.result
        now = self._clock()
        if result is FollowResult.UPDATED or result is FollowResult.UNCHANGED:
            recovered = self._failing is not None
            self._failing = None
            if result is FollowResult.UNCHANGED and not recovered:
                return None
            return EVENT_REASONS[result]
        key = (result, outcome.reason)
        if key == self._failing and now - self._said_at < self.repeat_seconds:
            return None
        self._failing, self._said_at = key, now
        return EVENT_REASONS[result]

    def _say(self, outcome: FollowOutcome, type_: str, reason: str) -> None:
        loop = self._loop
        note = outcome.message[:NOTE_MAX_CHARS]
        if loop is None or loop.is_closed() or self.regarding is None:
            self._events.labels(reason=reason, result="no_client").inc()
            log.info("%s: %s", reason, note)
            return
        try:
            asyncio.run_coroutine_threadsafe(self._send(type_, reason, note), loop)
        except RuntimeError:  # the loop closed meanwhile: the Event is not sent
            self._events.labels(reason=reason, result="dropped").inc()

    async def _send(self, type_: str, reason: str, note: str) -> None:
        client = self._client_of()
        regarding = self.regarding
        if client is None or regarding is None:
            self._events.labels(reason=reason, result="no_client").inc()
            log.info("%s: %s", reason, note)
            return
        try:
            recorder = EventRecorder(
                client,
                reporting_controller=_CONTROLLER,
                reporting_instance=self.reporting_instance,
                action="FollowKnowledge",
            )
            async with asyncio.timeout(self.send_timeout):
                await recorder.record(regarding, type=type_, reason=reason, note=note)
            self._events.labels(reason=reason, result="sent").inc()
        except Exception as exc:
            self._events.labels(reason=reason, result="failed").inc()
            log.warning("Event %s on the webhook's Pod not recorded: %s", reason, exc)
