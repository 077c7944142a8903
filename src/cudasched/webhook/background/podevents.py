"""The NoCompatibleNode Event on each pod of a controller that no node can run.

``kubectl describe pod`` lists the Events regarding that pod, and a pod a controller creates
(a ReplicaSet's, a Job's) has no name and no uid when the webhook admits it: the API server
generates both after mutating admission (``registry/generic/registry/store.go`` in
k8s.io/apiserver 1.35 and 1.37). So admission can only name the pod's controller
(:func:`~cudasched.webhook.admission.reviewed.owner_placement`), and the pod's own Event is
recorded here, once the pod is stored:

* an admission that found no node for a controller's pod hands its placement here (through
  :class:`~cudasched.webhook.background.nofit.NoFitReporter`, never for a dry run);
* a **sweep** of that controller then lists the namespace's pods that no node is bound to
  (:func:`~cudasched.kube.pending.list_unbound_pods`, field selector ``spec.nodeName=``) a few
  times (:data:`SWEEP_DELAYS`: the controller makes its replicas in a burst, and the webhook
  remembers the first replica's answer for the others, so their admissions are not reported
  one by one), and records the Event on each pod the controller made that carries
  ``cudasched.io/requirement`` (the webhook judged it);
* each time, the placement's own check is asked of the current snapshot first (the check the
  gauge re-asks): when a node that can run the pods has joined, no Event is recorded;
* **once per pod** (by uid) per ``interval``; **bounded**: at most ``max_owners`` sweeps run
  at once (more are dropped and counted) and ``max_pods`` pods are remembered.

Every outcome is counted in ``cudasched_webhook_events_total{reason="NoCompatibleNode"}`` like
the controller's Event (``sent``, ``failed``: a list or a create, ``dropped``, ``no_client``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from cudasched.kube.events import EventRecorder, ObjectReference, OncePerInterval
from cudasched.kube.pending import list_unbound_pods
from cudasched.vocab import labels as L
from cudasched.vocab.objects import annotations_of, metadata_of
from cudasched.webhook.admission.review import Placement

__all__ = ["SWEEP_DELAYS", "PodEvents", "pod_reference"]

log = logging.getLogger(__name__)

#: Seconds from a report to each sweep of the controller's pods (the second and third catch
#: replicas made after the first was stored).
SWEEP_DELAYS = (2.0, 10.0, 30.0)


class _Counter(Protocol):
    def inc(self) -> None: ...


def pod_reference(placement: Placement, pod: Mapping[str, Any]) -> ObjectReference | None:
    """The pod as an Event's subject when it is one the placement's controller made, that the
    webhook judged (it carries ``cudasched.io/requirement``), that no node is bound to (the
    list's field selector says so; asked again here, as the answer is read) and that is not
    being deleted; else ``None``."""
    meta = metadata_of(pod)
    spec = pod.get("spec")
    if isinstance(spec, Mapping) and spec.get("nodeName"):
        return None
    name, uid = meta.get("name"), meta.get("uid")
    if not (isinstance(name, str) and name and isinstance(uid, str) and uid):
        return None
    if meta.get("deletionTimestamp") or L.ANN_REQUIREMENT not in annotations_of(pod):
        return None
    if not any(_made_by(placement, ref) for ref in meta.get("ownerReferences") or ()):
        return None
    return ObjectReference(
        api_version="v1",
        kind="Pod",
        name=name,
        namespace=str(meta.get("namespace") or placement.namespace),
        uid=uid,
    )


def _made_by(placement: Placement, ref: Any) -> bool:
    """Whether an ``ownerReferences`` entry is the placement's controller (by uid when both
    say one: a controller deleted and made again under its name is another object)."""
    if not (isinstance(ref, Mapping) and ref.get("controller") is True):
        return False
    if ref.get("kind") != placement.kind or ref.get("name") != placement.name:
        return False
    return placement.uid is None or ref.get("uid") == placement.uid


class PodEvents:
    """Sweeps of the pods of controllers no node can run, for one server process.

    ``client_of`` returns the lightkube client (``None``: nothing is listed), ``state_of``
    the current snapshot; ``results`` are the counters by outcome."""

    def __init__(
        self,
        *,
        reason: str,
        results: Mapping[str, _Counter],
        client_of: Callable[[], Any],
        state_of: Callable[[], Any],
        reporting_instance: str,
        interval: float = 600.0,
        max_owners: int = 100,
        max_pods: int = 10_000,
        delays: tuple[float, ...] = SWEEP_DELAYS,
        send_timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reason = reason
        self._results = results
        self._client_of = client_of
        self._state_of = state_of
        self.reporting_instance = reporting_instance
        self.max_owners = max_owners
        self.delays = delays
        self.send_timeout = send_timeout
        self._sweeps: dict[tuple[str, str, str, str], asyncio.Task[None]] = {}
        self._latest: dict[tuple[str, str, str, str], Placement] = {}
        self._again: set[tuple[str, str, str, str]] = set()
        self._sent: OncePerInterval[str] = OncePerInterval(interval, max_pods, clock)  # by uid

    def follow(self, placement: Placement) -> None:
        """Sweep the pods of ``placement``'s controller (on the event loop; never raises).
        A sweep already running for it runs its rounds once more with the newer placement."""
        key = placement.key
        self._latest[key] = placement
        if key in self._sweeps:
            self._again.add(key)
            return
        if len(self._sweeps) >= self.max_owners:
            self._latest.pop(key, None)
            self._results["dropped"].inc()
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop running (a closing server): nothing is swept
            self._latest.pop(key, None)
            return
        task = loop.create_task(self._rounds(key))
        self._sweeps[key] = task
        task.add_done_callback(functools.partial(self._done, key))

    def _done(self, key: tuple[str, str, str, str], _task: object = None) -> None:
        self._sweeps.pop(key, None)
        self._latest.pop(key, None)
        self._again.discard(key)

    async def stop(self) -> None:
        tasks = list(self._sweeps.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._sweeps.clear()

    async def _rounds(self, key: tuple[str, str, str, str]) -> None:
        told: set[str] = set()  # one Event per pod per sweep, however short the interval
        again = True
        while again:
            self._again.discard(key)
            waited = 0.0
            for delay in self.delays:
                await asyncio.sleep(max(0.0, delay - waited))
                waited = delay
                await self.sweep(self._latest[key], told)
            again = key in self._again

    async def sweep(self, placement: Placement, told: set[str] | None = None) -> int:
        """One sweep: the Event on each unbound pod of the controller not told within the
        interval (nor in ``told``, the uids this sweep's earlier rounds told, which it adds
        to). Returns how many were sent; failures are logged and counted, never raised."""
        client = self._client_of()
        if client is None:
            self._results["no_client"].inc()
            return 0
        try:
            async with asyncio.timeout(self.send_timeout):
                pods = await list_unbound_pods(client, placement.namespace)
        except Exception as exc:
            self._results["failed"].inc()
            log.warning("pods of %s %s not listed: %s", placement.kind, placement.name, exc)
            return 0
        if not self._still_no_fit(placement):
            return 0
        sent = 0
        for pod in pods:
            regarding = pod_reference(placement, pod)
            if regarding is None or (told is not None and regarding.uid in told):
                continue
            if told is not None:
                told.add(regarding.uid or "")
            if self._due(regarding):
                sent += await self._send(client, regarding, placement.no_fit or "")
        return sent

    def _still_no_fit(self, placement: Placement) -> bool:
        """Whether the current snapshot still has no node for the pods (the gauge's check; a
        snapshot not synced yet proves nothing, so the admission's answer stands)."""
        state = self._state_of()
        check = placement.check
        if check is None or not getattr(state, "synced", False):
            return True
        return not state.fits(check[0], check[1])

    def _due(self, regarding: ObjectReference) -> bool:
        uid = regarding.uid or ""
        if not self._sent.due(uid):
            return False
        self._sent.sent(uid)
        return True

    async def _send(self, client: Any, regarding: ObjectReference, note: str) -> int:
        recorder = EventRecorder(
            client,
            reporting_controller="cudasched-webhook",
            reporting_instance=self.reporting_instance,
            action="Admit",
        )
        try:
            async with asyncio.timeout(self.send_timeout):
                await recorder.record(regarding, type="Warning", reason=self.reason, note=note)
        except Exception as exc:
            self._results["failed"].inc()
            log.warning("Event %s on pod %s not recorded: %s", self.reason, regarding.name, exc)
            return 0
        self._results["sent"].inc()
        return 1
