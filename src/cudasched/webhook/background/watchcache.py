"""The watch cache: Nodes, InferenceServices, ServingRuntimes, ClusterServingRuntimes and
LLMInferenceServices mirrored in memory, published to the request path as immutable snapshots.

Why a cache: admission answers while the API server waits, and a LIST per request costs
time proportional to the cluster (other webhooks measured ~65 µs per listed object). So each
kind is listed once and then watched by a :class:`~cudasched.kube.reflector.Reflector` (backoff,
``410 Gone`` re-list, periodic resync and a missing KServe CRD counting as an empty kind are
its business); request handling only reads the last published
:class:`~cudasched.webhook.state.clusterstate.ClusterState`, a reference swap, never an API call.

This module decides what is about admission: which kinds are followed, how small a Node is
kept (metadata and capacity: admission only reads labels, and a full Node with its image list
can be tens of kilobytes), which changes are worth a new snapshot (Node heartbeats and GFD's
timestamp label are not; neither is KServe's status churn), and when the webhook is ready.
LLMInferenceServices are followed so that their pods are judged with the service's
``cudasched.io/*`` annotations (the controller does not copy them to the pods) and so that a
``NoCompatibleNode`` Event can refer to a created service by its uid.

Readiness reflects the first sync only: once every kind is listed and a snapshot is published,
a replica whose watch breaks keeps answering from its last snapshot (stale, but consistent)
while it reconnects, instead of leaving the Service and making the API server fail every call.

After any change that matters a new snapshot is built, debounced (50 ms by default) so a burst
of events costs one rebuild, and off the event loop so building it never delays requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cudasched.kube.reflector import ObjectKey, Reflector, ReflectorTiming
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import (
    CLUSTER_SERVING_RUNTIME,
    INFERENCE_SERVICE,
    LLM_INFERENCE_SERVICE,
    NODE,
    SERVING_RUNTIME,
    Kind,
)
from cudasched.vocab.labels import VOLATILE_KEYS
from cudasched.vocab.objects import metadata_of
from cudasched.webhook.metrics import WebhookMetrics

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.kube.client import AsyncClient

__all__ = [
    "ADMISSION_KINDS",
    "ClusterCache",
    "StateBuilder",
    "StateFromObjects",
    "trim_node",
]

log = logging.getLogger(__name__)

#: ``build(nodes, inference_services, serving_runtimes, cluster_serving_runtimes,
#: llm_inference_services) -> state``
StateBuilder = Callable[
    [
        Sequence[Mapping[str, Any]],
        Sequence[Mapping[str, Any]],
        Sequence[Mapping[str, Any]],
        Sequence[Mapping[str, Any]],
        Sequence[Mapping[str, Any]],
    ],
    Any,
]

#: The kinds admission reads, in the order the :data:`StateBuilder` takes them.
ADMISSION_KINDS: tuple[Kind, ...] = (
    NODE,
    INFERENCE_SERVICE,
    SERVING_RUNTIME,
    CLUSTER_SERVING_RUNTIME,
    LLM_INFERENCE_SERVICE,
)


def trim_node(node: dict[str, Any]) -> dict[str, Any]:
    """The part of a Node admission keeps: identity, labels and capacity."""
    meta = metadata_of(node)
    found = node.get("status")
    status = found if isinstance(found, Mapping) else {}
    kept_meta = {k: meta[k] for k in ("name", "uid", "resourceVersion", "labels") if k in meta}
    kept_status = {k: status[k] for k in ("capacity", "allocatable") if k in status}
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": kept_meta}
    if kept_status:
        out["status"] = kept_status
    return out


# What admission reads of an InferenceService's status: the runtime KServe recorded. KServe
# rewrites the rest (conditions, URLs, traffic, model state) on every reconcile; rebuilding the
# snapshot for those would also empty the decision memo for nothing.
_ISVC_STATUS_KEYS = ("servingRuntimeName", "clusterServingRuntimeName")


def _relevant(kind: Kind, obj: Mapping[str, Any]) -> Any:
    """The part of an object whose change requires a new snapshot."""
    meta = metadata_of(obj)
    if kind == NODE:
        # GFD rewrites its timestamp label on every node every minute: with thousands of
        # nodes that alone would rebuild the snapshot (and empty the decision memo) constantly.
        labels = meta.get("labels")
        if not isinstance(labels, Mapping):
            return labels
        return {k: v for k, v in labels.items() if k not in VOLATILE_KEYS}
    if kind == LLM_INFERENCE_SERVICE:
        # Admission reads its annotations and spec; the controller's status churn is not.
        return (meta.get("labels"), meta.get("annotations"), obj.get("spec"))
    status = obj.get("status")
    if kind == INFERENCE_SERVICE and (status is None or isinstance(status, Mapping)):
        # No status yet and a status without a runtime name read the same way.
        status = {k: (status or {}).get(k) for k in _ISVC_STATUS_KEYS}
    return (meta.get("labels"), meta.get("annotations"), obj.get("spec"), status)


def _differs(kind: Kind, old: Mapping[ObjectKey, Any], new: Mapping[ObjectKey, Any]) -> bool:
    if old.keys() != new.keys():
        return True
    return any(_relevant(kind, old[k]) != _relevant(kind, new[k]) for k in new)


class ClusterCache:
    """List+watch of the admission kinds, publishing :class:`ClusterState` snapshots.

    Implements the server's ``StateSource``: ``state``, ``synced``, ``not_ready_reason``,
    ``start()``, ``stop()``. For tests pass ``client`` (a lightkube ``AsyncClient``) or
    ``base_url`` (plain HTTP API endpoint, e.g. a mock API server); otherwise ``kubeconfig``
    or the in-cluster/``KUBECONFIG`` configuration is used (:mod:`cudasched.kube.client`).
    Its ``on_*`` methods are the :class:`~cudasched.kube.reflector.ReflectorListener` its
    reflectors call.
    """

    def __init__(
        self,
        *,
        client: AsyncClient | None = None,
        base_url: str | None = None,
        kubeconfig: str | None = None,
        build_state: StateBuilder | None = None,
        metrics: WebhookMetrics | None = None,
        resync_seconds: float = 300.0,
        debounce_seconds: float = 0.05,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        missing_crd_retry_seconds: float = 60.0,
        request_timeout: float = 10.0,
        rng: random.Random | None = None,
    ) -> None:
        if resync_seconds <= 0 or debounce_seconds < 0 or backoff_initial <= 0:
            raise InputError(
                "invalid cache timing: resync_seconds and backoff_initial must be > 0, "
                f"debounce_seconds >= 0 (got {resync_seconds}, {backoff_initial}, "
                f"{debounce_seconds})"
            )
        self._client = client
        self._owns_client = client is None
        self._base_url = base_url
        self._kubeconfig = kubeconfig
        self._build = build_state
        self.metrics = metrics if metrics is not None else WebhookMetrics()
        self.timing = ReflectorTiming(
            resync_seconds=resync_seconds,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
            absent_retry_seconds=missing_crd_retry_seconds,
        )
        self.debounce_seconds = debounce_seconds
        self.request_timeout = request_timeout  # per API call (watches have no read timeout)
        self._rng = rng if rng is not None else random.Random()

        self._reflectors: dict[str, Reflector] = {}
        self._listed: set[str] = set()
        self._state: Any = None
        self._synced = False
        self._tasks: list[asyncio.Task[None]] = []
        self._publisher: asyncio.Task[None] | None = None
        self._dirty = False
        self._changed: asyncio.Condition | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.generation = 0  # number of snapshots published

    # ------------------------------------------------------------------ StateSource

    @property
    def state(self) -> Any:
        """The last published snapshot (``ClusterState.empty()`` before the first sync)."""
        if self._state is None:
            self._state = self._empty_state()
        return self._state

    @property
    def synced(self) -> bool:
        return self._synced

    @property
    def not_ready_reason(self) -> str:
        if self._synced:
            return ""
        kinds = [k.plural for k in ADMISSION_KINDS]
        waiting = [k for k in kinds if k not in self._listed]
        reason = "waiting for the first list of " + ", ".join(waiting or kinds)
        errors = [
            f"{k}: {self._reflectors[k].last_error}"
            for k in waiting
            if k in self._reflectors and self._reflectors[k].last_error is not None
        ]
        if errors:
            reason += " (last error: " + "; ".join(errors)[:300] + ")"
        elif self._listed == set(kinds):
            reason = "building the first cluster snapshot"
        return reason

    async def start(self) -> None:
        """Create the client if needed and start one reflector task per kind."""
        if self._tasks:
            return
        self.prepare()
        self._changed = asyncio.Condition()
        self._loop = asyncio.get_running_loop()
        if self._build is None:
            self._build = StateFromObjects()
        for kind in ADMISSION_KINDS:
            reflector = self._reflectors.get(kind.plural)
            if reflector is None:
                reflector = Reflector(
                    self._client,
                    kind,
                    self,
                    transform=trim_node if kind == NODE else None,
                    timing=self.timing,
                    rng=self._rng,
                    logger=log,
                )
                self._reflectors[kind.plural] = reflector
            else:  # started again after stop(): keep what was mirrored, use the new client
                reflector.client = self._client
            task = asyncio.create_task(reflector.run(), name=f"cudasched-watch-{kind.plural}")
            self._tasks.append(task)

    def use_knowledge(self, kb: KnowledgeBase) -> None:
        """Build snapshots with ``kb`` from now on, the next one at once (a knowledge swap;
        any thread)."""
        if self._build is None:
            self._build = StateFromObjects(kb)
        elif isinstance(self._build, StateFromObjects):
            self._build.use(kb)
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._schedule_publish)

    @property
    def client(self) -> AsyncClient | None:
        """The lightkube client the cache reads with (``None`` before :meth:`prepare`); the
        webhook records its Events through it."""
        return self._client

    @property
    def running(self) -> bool:
        """Whether the watch tasks are running (between ``start`` and ``stop``)."""
        return bool(self._tasks)

    def prepare(self) -> None:
        """Load the Kubernetes configuration and create the client now (``start`` does it
        otherwise), so a bad kubeconfig is reported before the server starts listening.
        Raises :class:`InputError` naming where the configuration was looked for."""
        if self._client is None:
            from cudasched.kube.client import make_client

            self._client = make_client(
                kubeconfig=self._kubeconfig, server=self._base_url, timeout=self.request_timeout
            )

    async def stop(self) -> None:
        """Cancel the watches and the publisher; close the client if we created it."""
        tasks = [*self._tasks, *([self._publisher] if self._publisher else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        self._publisher = None
        if self._owns_client and self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()
            self._client = None

    # ------------------------------------------------------------------ inspection

    def objects(self, kind: str) -> list[dict[str, Any]]:
        """The cached objects of ``kind`` (``nodes``, ``inferenceservices``, ...), sorted by
        namespace and name."""
        reflector = self._reflectors.get(kind)
        store = reflector.objects if reflector is not None else {}
        return [store[k] for k in sorted(store)]

    async def wait_until(
        self, predicate: Callable[[ClusterCache], bool], timeout: float = 10.0
    ) -> None:
        """Wait until ``predicate(self)`` holds after a publish (tests, start-up gating)."""
        if self._changed is None:
            raise RuntimeError("the cache is not started")
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: predicate(self))

    # ------------------------------------------------------------------ ReflectorListener

    def on_listed(
        self,
        kind: Kind,
        previous: Mapping[ObjectKey, dict[str, Any]],
        current: Mapping[ObjectKey, dict[str, Any]],
    ) -> None:
        changed = kind.plural not in self._listed or _differs(kind, previous, current)
        self._mark_listed(kind.plural)
        if changed:
            self._schedule_publish()

    def on_event(self, kind: Kind, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if old is None or new is None or _relevant(kind, old) != _relevant(kind, new):
            self._schedule_publish()

    def on_absent(self, kind: Kind, previous: Mapping[ObjectKey, dict[str, Any]]) -> None:
        self._mark_listed(kind.plural)
        if previous:
            self._schedule_publish()

    def on_restart(self, kind: Kind, reason: str) -> None:
        self.metrics.watch_restarts.labels(kind=kind.plural, reason=reason).inc()

    def _mark_listed(self, kind: str) -> None:
        self._listed.add(kind)
        if not self._synced and all(k.plural in self._listed for k in ADMISSION_KINDS):
            log.info(
                "cluster cache synced (%s)",
                ", ".join(
                    f"{len(self._reflectors[k.plural].objects)} {k.plural}" for k in ADMISSION_KINDS
                ),
            )
            self._schedule_publish(immediately=True)

    # ------------------------------------------------------------------ publishing

    def _schedule_publish(self, *, immediately: bool = False) -> None:
        self._dirty = True
        if self._publisher is None or self._publisher.done():
            delay = 0.0 if immediately else self.debounce_seconds
            self._publisher = asyncio.create_task(self._publish_loop(delay))

    async def _publish_loop(self, delay: float) -> None:
        while self._dirty:
            if delay:
                await asyncio.sleep(delay)
            delay = self.debounce_seconds
            if not all(k.plural in self._listed for k in ADMISSION_KINDS):
                return  # published once every kind is listed (_mark_listed schedules it)
            self._dirty = False
            snapshot = [list(self._reflectors[k.plural].objects.values()) for k in ADMISSION_KINDS]
            try:
                state = await asyncio.to_thread(self._call_builder, snapshot)
            except Exception:
                log.exception("building the cluster snapshot failed; keeping the previous one")
                continue
            self._state = state
            self.generation += 1
            newly_synced = not self._synced
            self._synced = True
            m = self.metrics
            for kind, objs in zip(ADMISSION_KINDS, snapshot, strict=True):
                m.cache_objects.labels(kind=kind.plural).set(len(objs))
            m.cache_synced.set(1)
            m.state_publishes.inc()
            if newly_synced:
                log.info("cluster snapshot published; admission is ready")
            if self._changed is not None:
                async with self._changed:
                    self._changed.notify_all()

    def _call_builder(self, snapshot: list[list[dict[str, Any]]]) -> Any:
        assert self._build is not None
        return self._build(*snapshot)

    def _empty_state(self) -> Any:
        if self._build is not None and not isinstance(self._build, StateFromObjects):
            return None
        from cudasched.webhook.state.clusterstate import ClusterState

        return ClusterState.empty()


class StateFromObjects:
    """The production state builder: ``ClusterState.from_objects`` with one knowledge base,
    given (the webhook loads it once for admission and state alike) or loaded on first use."""

    def __init__(self, kb: KnowledgeBase | None = None) -> None:
        self._kb = kb

    def use(self, kb: KnowledgeBase) -> None:
        """Build with ``kb`` from the next snapshot on."""
        self._kb = kb

    def __call__(
        self,
        nodes: Sequence[Mapping[str, Any]],
        isvcs: Sequence[Mapping[str, Any]],
        runtimes: Sequence[Mapping[str, Any]],
        cluster_runtimes: Sequence[Mapping[str, Any]],
        llmisvcs: Sequence[Mapping[str, Any]],
    ) -> Any:
        from cudasched.knowledge import KnowledgeBase
        from cudasched.webhook.state.clusterstate import ClusterState

        if self._kb is None:
            self._kb = KnowledgeBase.load()
        return ClusterState.from_objects(
            nodes,
            isvcs,
            runtimes,
            cluster_runtimes,
            llm_inference_services=llmisvcs,
            kb=self._kb,
            synced=True,
        )
