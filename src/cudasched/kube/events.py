"""Recording a Kubernetes Event about an object, on behalf of a controller.

Events are written through the ``events.k8s.io/v1`` API: the Event is *regarding* an object,
has a ``type`` (``Normal`` or ``Warning``), a ``reason`` (CamelCase), an ``action`` (what the
controller did or tried), a ``note`` of at most 1 kB, and names the ``reportingController``
and ``reportingInstance`` that saw it. ``kubectl describe`` and ``kubectl get events`` show
them next to core ``v1`` Events (both APIs store the same objects). The object is named the way
kubelet names its events (``<object>.<hex nanoseconds>``) and lives in the namespace of the
object it is about (``default`` for cluster-scoped objects such as Nodes).

RBAC: ``create`` on ``events.k8s.io`` ``events``. Recording is a single create; callers treat
it as best effort.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

__all__ = [
    "FIELD_MAX_CHARS",
    "NOTE_MAX_CHARS",
    "EventRecorder",
    "ObjectReference",
    "OncePerInterval",
    "record_event",
]

#: The API server rejects a note longer than 1 kB.
NOTE_MAX_CHARS = 1024


@dataclass(frozen=True, slots=True)
class ObjectReference:
    """The object an Event is about. ``uid`` ties the Event to this incarnation of the object
    (``kubectl describe`` shows only Events whose uid matches); ``namespace`` is ``None`` for
    cluster-scoped objects."""

    api_version: str
    kind: str
    name: str
    uid: str | None = None
    namespace: str | None = None


K = TypeVar("K", bound=Hashable)


class OncePerInterval(Generic[K]):
    """At most one Event per subject (``key``) every ``interval`` seconds, remembering at most
    ``limit`` subjects (the longest unsent forgotten first): the spam filter every Event
    reporter of one process keeps, so that repeated admissions of one object do not flood
    ``kubectl describe``. ``due`` asks, ``sent`` remembers: a caller that cannot send after
    all (a full queue) leaves the subject due."""

    def __init__(
        self, interval: float, limit: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval = interval
        self.limit = limit
        self._clock = clock
        self._sent: dict[K, float] = {}  # oldest send first

    def due(self, key: K) -> bool:
        last = self._sent.get(key)
        return last is None or self._clock() - last >= self.interval

    def sent(self, key: K) -> None:
        self._sent.pop(key, None)
        self._sent[key] = self._clock()
        while len(self._sent) > self.limit:
            self._sent.pop(next(iter(self._sent)))


#: Longest ``reason``, ``action`` and ``reportingInstance`` the API server accepts.
FIELD_MAX_CHARS = 128


def _event_time() -> datetime:
    """Now, with a non-zero microsecond: the API server parses ``eventTime`` as RFC 3339 with
    exactly six fractional digits, and a serialiser drops a zero fraction."""
    now = datetime.now(UTC)
    return now if now.microsecond else now.replace(microsecond=1)


async def record_event(
    client: Any,
    *,
    regarding: ObjectReference,
    type: str,
    reason: str,
    note: str,
    reporting_controller: str,
    reporting_instance: str,
    action: str = "Observe",
    namespace: str | None = None,
    host: str | None = None,
) -> None:
    """Create one ``events.k8s.io/v1`` Event through the lightkube ``client``.

    The Event lives in ``regarding.namespace`` (an Event must share the namespace of a
    namespaced object), else in ``namespace``, else in ``default``. ``host`` is the node the
    reporting component runs on, when it runs on one (the agent). API errors propagate.
    """
    from lightkube.models import core_v1
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.events_v1 import Event

    where = regarding.namespace or namespace or "default"
    event = Event(
        metadata=ObjectMeta(name=f"{regarding.name}.{time.time_ns():x}", namespace=where),
        eventTime=_event_time(),
        regarding=core_v1.ObjectReference(
            apiVersion=regarding.api_version,
            kind=regarding.kind,
            name=regarding.name,
            namespace=regarding.namespace,
            uid=regarding.uid,
        ),
        reason=reason[:FIELD_MAX_CHARS],
        action=action[:FIELD_MAX_CHARS],
        note=note[:NOTE_MAX_CHARS],
        type=type,
        reportingController=reporting_controller,
        reportingInstance=reporting_instance[:FIELD_MAX_CHARS],
        deprecatedSource=(
            core_v1.EventSource(component=reporting_controller, host=host) if host else None
        ),
    )
    await client.create(event, namespace=where)


class EventRecorder:
    """Records Events for one controller instance: the client, the reporting names and the
    namespace are fixed, each call says what happened to which object."""

    def __init__(
        self,
        client: Any,
        *,
        reporting_controller: str,
        reporting_instance: str,
        namespace: str = "default",
        host: str | None = None,
        action: str = "Observe",
    ) -> None:
        self.client = client
        self.reporting_controller = reporting_controller
        self.reporting_instance = reporting_instance
        self.namespace = namespace
        self.host = host
        self.action = action

    async def record(
        self,
        regarding: ObjectReference,
        *,
        type: str,
        reason: str,
        note: str,
        action: str | None = None,
    ) -> None:
        """Create the Event; API errors propagate."""
        await record_event(
            self.client,
            regarding=regarding,
            type=type,
            reason=reason,
            note=note,
            action=action or self.action,
            reporting_controller=self.reporting_controller,
            reporting_instance=self.reporting_instance,
            namespace=self.namespace,
            host=self.host,
        )
