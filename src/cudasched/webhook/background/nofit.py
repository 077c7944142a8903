"""Objects admitted that no node can run: a Kubernetes Event on each, and a gauge of them.

A user who applies an InferenceService that no node of the cluster can run sees a warning at
``kubectl apply`` time; a controller, a GitOps tool or anyone reading the object later does not.
So the webhook also records an Event (``events.k8s.io/v1``, type ``Warning``, reason
``NoCompatibleNode``) regarding the object, and exports how many such objects there are.

The hook is generic over the kind: admission reports a
:class:`~cudasched.webhook.admission.review.Placement` for every object of a kind in
:data:`~cudasched.webhook.admission.reviewed.REPORTED_KINDS` it decides, and this module does the
rest:

* **never on the request path**: :meth:`NoFitReporter.observe` only hands the placement to the
  event loop; the Event is sent by a background task, with a timeout, and a failure is logged
  and counted, never seen by admission;
* **never for a dry run** (the webhook declares ``sideEffects: NoneOnDryRun``), and never for
  an object that is not stored: on CREATE the object has no uid yet at admission, so the Event
  waits until the object shows up in the watch cache (for kinds the cache holds) and is dropped
  if it never does (a request denied later, by another webhook or by validation);
* **rate-limited per object**: at most one Event per object per ``interval`` seconds;
* **bounded**: at most ``max_tracked`` objects are remembered and ``queue_size`` Events wait;
* **the pods too**: a controller's pod has no name at admission, so the placement reported for
  its controller also starts a sweep that records the Event on each of its pods once they are
  stored (:mod:`cudasched.webhook.background.podevents`).

The gauge counts objects whose last admission found no compatible node, re-checked against the
current cluster snapshot whenever it is read: an object that is gone from the cache, or that a
node can run now (a driver was upgraded, a node joined), no longer counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched.kube.events import EventRecorder, ObjectReference, OncePerInterval
from cudasched.webhook.admission.review import Placement
from cudasched.webhook.admission.reviewed import REPORTED_KINDS
from cudasched.webhook.background.podevents import PodEvents

if TYPE_CHECKING:
    from cudasched.webhook.metrics import WebhookMetrics

__all__ = ["REASON", "NoFitReporter"]

log = logging.getLogger(__name__)

#: The Event's reason.
REASON = "NoCompatibleNode"

_CONTROLLER = "cudasched-webhook"


@dataclass(slots=True)
class _Tracked:
    placement: Placement
    since: float


#: Looks an object up in the current snapshot: the object, ``None`` when it is not there, or
#: ``...`` (Ellipsis) when the snapshot does not hold that kind.
Lookup = Callable[[Placement], Any]


class NoFitReporter:
    """Events and the gauge for one server process.

    ``client_of`` returns the lightkube client to send with (``None``: Events are only
    logged); ``lookup`` finds an object in the current snapshot; ``state_of`` returns the
    current snapshot (for re-checks)."""

    def __init__(
        self,
        *,
        metrics: WebhookMetrics,
        client_of: Callable[[], Any],
        lookup: Lookup,
        state_of: Callable[[], Any],
        reporting_instance: str,
        interval: float = 600.0,
        max_tracked: int = 10_000,
        queue_size: int = 100,
        store_wait: float = 30.0,
        send_timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metrics = metrics
        self._client_of = client_of
        self._lookup = lookup
        self._state_of = state_of
        self.reporting_instance = reporting_instance
        self.max_tracked = max_tracked
        self.store_wait = store_wait
        self.send_timeout = send_timeout
        self._clock = clock
        self._tracked: dict[tuple[str, str, str, str], _Tracked] = {}
        self._sent: OncePerInterval[tuple[str, str, str, str]] = OncePerInterval(
            interval, max_tracked, clock
        )
        self._queue: asyncio.Queue[Placement] | None = None
        self._queue_size = queue_size
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self._results = {
            r: metrics.events.labels(reason=REASON, result=r)
            for r in ("sent", "failed", "rate_limited", "dropped", "not_stored", "no_client")
        }
        self.pods = PodEvents(
            reason=REASON,
            results=self._results,
            client_of=client_of,
            state_of=state_of,
            reporting_instance=reporting_instance,
            interval=interval,
            max_pods=max_tracked,
            send_timeout=send_timeout,
            clock=clock,
        )

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the sender on the running loop (the server's lifespan calls this)."""
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue(self._queue_size)
        self._task = asyncio.create_task(self._send_loop(), name="cudasched-events")

    async def stop(self) -> None:
        tasks = [*([self._task] if self._task else []), *self._sending]
        self._task = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._sending.clear()
        await self.pods.stop()

    # ------------------------------------------------------------------ intake

    def observe(self, placement: Placement) -> None:
        """Take an admission's placement; safe from any thread, never blocks, never raises."""
        loop = self._loop
        try:
            if loop is None or loop.is_closed():
                self._observe(placement)  # no server loop (tests, offline use): track only
            else:
                loop.call_soon_threadsafe(self._observe, placement)
        except Exception:  # a closing loop: the placement is simply not reported
            log.debug("placement of %s not reported", placement.key, exc_info=True)

    def _observe(self, placement: Placement) -> None:
        key = placement.key
        if placement.no_fit is None:
            self._tracked.pop(key, None)
            self._publish()
            return
        self._tracked.pop(key, None)
        self._tracked[key] = _Tracked(placement, self._clock())
        while len(self._tracked) > self.max_tracked:
            self._tracked.pop(next(iter(self._tracked)))
        self._publish()
        if placement.for_owner and self._loop is not None:
            self.pods.follow(placement)  # its pods get theirs once stored, named
        if not self._sent.due(key):
            self._results["rate_limited"].inc()
            return
        if self._queue is None or self._queue.full():
            self._results["dropped"].inc()
            return
        self._sent.sent(key)
        self._queue.put_nowait(placement)

    # ------------------------------------------------------------------ the gauge

    def refresh(self) -> None:
        """Re-check every tracked object against the current snapshot and publish the gauge:
        objects gone from the cache (after a grace period for ones just created) and objects
        a node can run now are dropped."""
        state = self._state_of()
        if not getattr(state, "synced", False):  # an empty or half-listed cache proves nothing
            self._publish()
            return
        now = self._clock()
        for key, tracked in list(self._tracked.items()):
            placement = tracked.placement
            found = self._lookup(placement)
            if found is None and now - tracked.since > self.store_wait:
                del self._tracked[key]
                continue
            check = placement.check
            if check is not None and state.fits(check[0], check[1]):
                del self._tracked[key]
        self._publish()

    def _publish(self) -> None:
        counts: dict[str, int] = {kind: 0 for _group, kind in REPORTED_KINDS}
        for _group, kind, _ns, _name in self._tracked:
            counts[kind] = counts.get(kind, 0) + 1
        for kind, count in counts.items():
            self.metrics.no_compatible_node.labels(kind=kind).set(count)

    @property
    def tracked(self) -> list[Placement]:
        return [t.placement for t in self._tracked.values()]

    # ------------------------------------------------------------------ sending

    async def _send_loop(self) -> None:
        assert self._queue is not None
        while True:
            placement = await self._queue.get()
            # One task per Event: waiting for a created object to be stored must not hold up
            # the others (the queue bounds how many there can be).
            task = asyncio.create_task(self._send(placement))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, placement: Placement) -> None:
        try:
            regarding = await self._reference(placement)
            if regarding is None:
                self._results["not_stored"].inc()
                return
            client = self._client_of()
            if client is None:
                self._results["no_client"].inc()
                log.info(
                    "%s %s/%s: %s", REASON, placement.namespace, placement.name, placement.no_fit
                )
                return
            recorder = EventRecorder(
                client,
                reporting_controller=_CONTROLLER,
                reporting_instance=self.reporting_instance,
                action="Admit",
            )
            async with asyncio.timeout(self.send_timeout):
                await recorder.record(
                    regarding, type="Warning", reason=REASON, note=placement.no_fit or ""
                )
            self._results["sent"].inc()
        except Exception as exc:
            self._results["failed"].inc()
            log.warning(
                "Event %s on %s %s/%s not recorded: %s",
                REASON,
                placement.kind,
                placement.namespace,
                placement.name,
                exc,
            )

    async def _reference(self, placement: Placement) -> ObjectReference | None:
        """The object as stored (with its uid), waiting for a created object to reach the
        cache; ``None`` when it never does. Kinds the cache does not hold are referenced as
        admitted."""
        uid = placement.uid
        deadline = self._clock() + self.store_wait
        while not uid:
            found = self._lookup(placement)
            if found is ...:
                break  # not a cached kind: refer to it by name
            if isinstance(found, Mapping):
                meta = found.get("metadata")
                uid = meta.get("uid") if isinstance(meta, Mapping) else None
                if isinstance(uid, str) and uid:
                    break
            if self._clock() >= deadline:
                return None
            await asyncio.sleep(1.0)
        return ObjectReference(
            api_version=placement.api_version,
            kind=placement.kind,
            name=placement.name,
            namespace=placement.namespace or None,
            uid=uid or None,
        )
