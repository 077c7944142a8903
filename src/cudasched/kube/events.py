"""Recording a Kubernetes Event about an object, on behalf of a controller.

The vocabulary is that of ``events.k8s.io/v1``: the Event is *regarding* an object, has a
``type`` (``Normal`` or ``Warning``), a ``reason`` (CamelCase) and a ``note``, and names the
``reportingController`` and ``reportingInstance`` that saw it. It is written through the core
``v1`` Events API, which stores the same object (``involvedObject`` is ``regarding``,
``message`` is ``note``, ``reportingComponent`` is ``reportingController``) and is the API the
agent's ClusterRole grants; the object is named the way kubelet names its events
(``<object>.<hex nanoseconds>``).

Recording is a single create; callers treat it as best effort.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = ["NOTE_MAX_CHARS", "EventRecorder", "ObjectReference", "record_event"]

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


async def record_event(
    client: Any,
    *,
    regarding: ObjectReference,
    type: str,
    reason: str,
    note: str,
    reporting_controller: str,
    reporting_instance: str,
    namespace: str = "default",
    host: str | None = None,
) -> None:
    """Create one Event in ``namespace`` through the lightkube ``client``.

    ``host`` is the node the reporting component runs on, when it runs on one (the agent).
    API errors propagate.
    """
    from lightkube.models import core_v1
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Event

    now = datetime.now(UTC)
    event = Event(
        metadata=ObjectMeta(name=f"{regarding.name}.{time.time_ns():x}", namespace=namespace),
        involvedObject=core_v1.ObjectReference(
            apiVersion=regarding.api_version,
            kind=regarding.kind,
            name=regarding.name,
            namespace=regarding.namespace,
            uid=regarding.uid,
        ),
        reason=reason,
        message=note[:NOTE_MAX_CHARS],
        type=type,
        source=core_v1.EventSource(component=reporting_controller, host=host),
        reportingComponent=reporting_controller,
        reportingInstance=reporting_instance,
        firstTimestamp=now,
        lastTimestamp=now,
        count=1,
    )
    await client.create(event, namespace=namespace)


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
    ) -> None:
        self.client = client
        self.reporting_controller = reporting_controller
        self.reporting_instance = reporting_instance
        self.namespace = namespace
        self.host = host

    async def record(
        self, regarding: ObjectReference, *, type: str, reason: str, note: str
    ) -> None:
        """Create the Event; API errors propagate."""
        await record_event(
            self.client,
            regarding=regarding,
            type=type,
            reason=reason,
            note=note,
            reporting_controller=self.reporting_controller,
            reporting_instance=self.reporting_instance,
            namespace=self.namespace,
            host=self.host,
        )
