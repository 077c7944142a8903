"""The policy controller: keeps the MutatingAdmissionPolicy's ``PlacementTable`` objects equal
to the webhook's decisions for every pod key the cluster creates. No request path: it watches,
decides, writes.

What it runs: the webhook's watch cache (nodes, InferenceServices, runtimes,
LLMInferenceServices: the snapshot decisions read), reflectors over Pods and workload
controllers (:mod:`.sources`), the webhook's :class:`~cudasched.webhook.admission.admitter.Admitter`
with its image resolver (``imageResolver``), the knowledge bundle it follows as the webhook
does (``knowledge.reference``; each swap a new admitter and every key decided again), and a
Lease. Every ``interval`` it renews the
lease; when it holds it, the snapshot and the sources have been listed once, and something
changed (the key set, the snapshot) or ``refresh_seconds`` passed (an image resolved in the
background changes no object), it decides each key (off the event loop) and brings the tables
to the result (:mod:`.table`, :class:`~cudasched.kube.owned.OwnedObjects`).

Why it never writes wrong parameters:

* **Nothing before the first full list.** A replica that starts (or restarts) writes only once
  its watch cache has published a synced snapshot and every source kind is listed: an empty
  view would otherwise delete every table.
* **Only the leader writes, and only while its lease is fresh.** Each write asks
  :meth:`~cudasched.kube.leases.LeaseLock.held`, which turns false ``renewDeadline`` after the
  last renewal (before the lease can expire and another replica take it), and at once when a
  renewal finds another holder. A replica deposed in the middle of a write stops there.
* **Writes carry the resourceVersion last seen.** A replica whose view of the tables is stale
  (another leader wrote since) gets a conflict and lists again; it never overwrites newer
  contents with older ones.
* **A namespace being deleted holds up no other.** Its pods and controllers are still
  listed (their keys kept ``keep_seconds`` once they go) but no table can be created there;
  that table is skipped and logged, every other is written (:mod:`~cudasched.kube.owned`).
* **A new leader keeps what the old one kept.** A key stays in the tables ``keep_seconds``
  after its last object went (:mod:`.sources`), but when that was is known only to the replica
  that saw it go. So a replica that lists the tables keeps every key they hold that its own
  sources do not know, with the placement written, for ``keep_seconds`` from that listing (at
  most twice the window in all); a key whose object comes back is decided afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from cudasched.kube.leases import LeaseLock
from cudasched.kube.owned import OwnedObjects, StaleView
from cudasched.kube.reflector import Reflector
from cudasched.vocab.kinds import PLACEMENT_TABLE
from cudasched.vocab.placementtable import TABLE_LABEL, TABLE_VALUE
from cudasched.webhook.admission.review import creation_review
from cudasched.webhook.policy.sources import SOURCE_KINDS, SourceIndex
from cudasched.webhook.policy.table import (
    Placement,
    held_placements,
    placement_of,
    probe_pod,
    storable,
    tables,
)
from cudasched.workloads.policykey import KEY_VERSION

if TYPE_CHECKING:
    from cudasched.webhook.admission.admitter import Admitter
    from cudasched.webhook.background.following import FollowedKnowledge, Judging
    from cudasched.webhook.background.knowledgereport import KnowledgeReporter
    from cudasched.webhook.background.watchcache import ClusterCache
    from cudasched.webhook.metrics import ControllerMetrics

__all__ = ["LEASE_NAME", "PolicyController", "decide_all"]

log = logging.getLogger(__name__)

LEASE_NAME = "cudasched-policy-controller"


def decide_all(
    admitter: Admitter, pods: Mapping[str, Mapping[str, Any]], state: Any
) -> dict[str, Placement]:
    """The placement of every key (``key -> key pod``) under ``state``: the webhook's
    decision on each key pod's probe (:func:`~.table.placement_of`); keys without one are
    left out."""
    out: dict[str, Placement] = {}
    for key, pod in pods.items():
        probe = probe_pod(pod)
        decision = admitter.decide("pod", orjson.dumps(creation_review(probe, uid=key[:36])), state)
        placement = placement_of(decision, probe)
        if placement is not None:
            out[key] = placement
    return out


def _same(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return old.get("spec") == new.get("spec") and (old.get("metadata") or {}).get("labels") == (
        new.get("metadata") or {}
    ).get("labels")


class PolicyController:
    """One replica of the controller (see the module docstring)."""

    def __init__(
        self,
        admitter: Admitter,
        cache: ClusterCache,
        client: Any,
        *,
        namespace: str,
        identity: str | None = None,
        interval: float = 2.0,
        refresh_seconds: float = 15.0,
        lease_seconds: int = 15,
        renew_deadline: float = 10.0,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.admitter = admitter
        self.cache = cache
        self.client = client
        self.sources = SourceIndex()
        self.interval = interval
        self.refresh_seconds = refresh_seconds
        identity = identity or os.environ.get("POD_NAME") or socket.gethostname()
        self.lease = LeaseLock(
            client,
            namespace,
            LEASE_NAME,
            identity,
            lease_seconds=lease_seconds,
            renew_deadline=renew_deadline,
        )
        self.tables = OwnedObjects(client, PLACEMENT_TABLE, TABLE_LABEL, TABLE_VALUE, lean=True)
        self.writes = 0
        #: The knowledge followed (:meth:`follow`); ``None``: the admitter's, never swapped.
        self.knowledge: FollowedKnowledge | None = None
        self.metrics = metrics
        #: When the round in progress began (``time.monotonic``); ``None`` between rounds.
        self.round_started: float | None = None
        self._swaps = 0  # knowledge swapped in, each a new admitter
        #: (source changes, snapshot generation, knowledge swaps) last decided
        self._seen: tuple[int, int, int] | None = None
        self._decided_at = 0.0
        self._listed = False
        self._closed: set[str] = set()  # namespaces the last write skipped, as logged
        self._inherited: dict[str, tuple[Placement, float]] = {}  # key -> (placement, listed)
        self._tasks: list[asyncio.Task[None]] = []

    def _start_sources(self) -> None:
        for kind in SOURCE_KINDS:
            reflector = Reflector(
                self.client, kind, self.sources, transform=self.sources.transform, logger=log
            )
            self._tasks.append(asyncio.create_task(reflector.run(), name=f"policy-{kind.plural}"))

    def follow(
        self,
        knowledge: FollowedKnowledge,
        build: Callable[[Judging], Admitter],
        reporter: KnowledgeReporter | None = None,
    ) -> None:
        """Judge with ``knowledge`` from :meth:`run` on: each bundle it swaps in gets an
        admitter of its own (``build``, made before the swap, so a bundle that cannot be built
        is refused), the watch cache's snapshot is rebuilt with it, and every key is decided
        again, so the tables are republished wherever the bundle moves a placement.
        ``reporter``: its metrics and Events, as the webhook's."""
        knowledge.build = build
        knowledge.on_swap(lambda _judging, built: self.use_admitter(built))
        knowledge.on_swap(lambda judging, _built: self.cache.use_knowledge(judging.kb))
        knowledge.reporter = reporter
        self.knowledge = knowledge

    def use_admitter(self, admitter: Admitter) -> None:
        """Decide with ``admitter`` from the next round on (a swap, in the follower's
        thread: one assignment, read once per round)."""
        self.admitter = admitter
        self._swaps += 1

    def _state(self) -> tuple[int, int, int]:
        return (self.sources.changes, self.cache.generation, self._swaps)

    def _due(self) -> bool:
        seen = self._state()
        return seen != self._seen or time.monotonic() - self._decided_at >= self.refresh_seconds

    def _inherit(self, pods: Mapping[str, Any], listed: bool) -> dict[str, Placement]:
        """The placements the tables held when this replica ``listed`` them for keys its
        sources do not know, kept ``keep_seconds`` from that listing (see the module
        docstring). Only a fresh listing is read: what this replica wrote itself it forgets
        on its sources' clock."""
        now = time.monotonic()
        held = held_placements(self.tables.known.values(), KEY_VERSION) if listed else {}
        for key, placement in held.items():
            if key not in pods and key not in self._inherited:
                self._inherited[key] = (placement, now)
        keep = self.sources.keep_seconds
        self._inherited = {
            key: (placement, since)
            for key, (placement, since) in self._inherited.items()
            if key not in pods and now - since < keep
        }
        return {key: placement for key, (placement, _) in self._inherited.items()}

    async def step(self) -> int:
        """One round: renew the lease; when leading, synced and due, decide and write. Returns
        the writes made."""
        leading = await self.lease.try_acquire_or_renew()
        if self.metrics is not None:
            self.metrics.leader.set(1 if leading else 0)
        if not leading:
            self._listed = False  # a later term starts from a fresh list
            return self._outcome("standby")
        if not (self.cache.synced and self.sources.synced()):
            return self._outcome("unsynced")
        if not self._due():
            return self._outcome("idle")
        listed = not self._listed
        if listed:
            await self.tables.refresh()
            self._listed = True
        pods = self.sources.current()  # forgets expired keys first: that is a change too
        seen = self._state()
        admitter, state = self.admitter, self.cache.state
        decided = await asyncio.to_thread(decide_all, admitter, pods, state)
        entries = {**self._inherit(pods, listed), **decided}
        left_out = sorted(k for k in entries if not storable(k)) if listed else []
        if left_out:
            log.warning(
                "%d pod keys cannot be kept in a table (a newline or tab in an annotation "
                "value); their pods stay unplaced: %r",
                len(left_out),
                left_out[:3],
            )
        return await self._converge(entries, seen)

    async def _converge(self, entries: dict[str, Placement], seen: tuple[int, int, int]) -> int:
        """Bring the tables to ``entries`` (decided on the view ``seen``); the writes made."""
        desired = tables(entries, KEY_VERSION)
        try:
            written = await self.tables.converge(desired, same=_same, allowed=self.lease.held)
        except StaleView as exc:
            log.info("placement tables changed under us (%s): listing again", exc)
            self._listed = False
            return self._outcome("stale")
        if self.tables.closed != self._closed:
            self._closed = set(self.tables.closed)
            if self._closed:
                log.info(
                    "no tables written in %d namespaces being deleted or gone: %s",
                    len(self._closed),
                    ", ".join(sorted(self._closed)[:5]),
                )
        if self.lease.held():
            self._seen, self._decided_at = seen, time.monotonic()
        if written:
            log.info(
                "placement tables: %d keys, %d objects, %d writes",
                len(entries),
                len(desired),
                written,
            )
        self.writes += written
        if self.metrics is not None:
            self.metrics.writes.inc(written)
            self.metrics.keys.set(len(entries))
            self.metrics.tables.set(len(desired))
            self.metrics.closed_namespaces.set(len(self._closed))
            self.metrics.last_written.set(time.time())
        return self._outcome("written" if written else "unchanged", written)

    def _outcome(self, outcome: str, writes: int = 0) -> int:
        """Count a round's ``outcome`` (one of
        :data:`~cudasched.webhook.metrics.ROUND_OUTCOMES`); returns ``writes``."""
        if self.metrics is not None:
            self.metrics.rounds.labels(outcome=outcome).inc()
        return writes

    async def run(self) -> None:
        """Until cancelled; the lease is given up on the way out."""
        await self.cache.start()
        if self.knowledge is not None:
            await self.knowledge.start()
        self._start_sources()
        try:
            while True:
                self.round_started = time.monotonic()
                try:
                    await self.step()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("policy controller round failed")
                    self._outcome("failed")
                self.round_started = None
                await asyncio.sleep(self.interval)
        finally:
            for task in self._tasks:
                task.cancel()
            with contextlib.suppress(Exception):
                await self.lease.release()
            if self.knowledge is not None:
                await self.knowledge.stop()
            await self.cache.stop()
