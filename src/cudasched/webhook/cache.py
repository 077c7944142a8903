"""The watch cache: Nodes, InferenceServices, ServingRuntimes and ClusterServingRuntimes
mirrored in memory, published to the request path as immutable snapshots.

Why a cache: admission answers while the API server waits, and a LIST per request costs
time proportional to the cluster (other webhooks measured ~65 µs per listed object). So each
kind is listed once and then watched; request handling only reads the last published
:class:`~cudasched.webhook.state.ClusterState`, a reference swap, never an API call.

How each kind is followed (the client-go reflector pattern, in asyncio):

* **list** all objects (all namespaces), replace that kind's store, remember the list's
  ``resourceVersion``; the kind counts as synced from then on;
* **watch** from that version; ADDED/MODIFIED upsert, DELETED removes;
* a watch that breaks (connection reset, stream cut mid-event, undecodable line) is resumed
  from the last seen ``resourceVersion`` after an exponential backoff with full jitter, so a
  flapping API server is not hammered by every replica in lockstep;
* ``410 Gone`` (the version was compacted away) means events were lost: **re-list** at once;
* every ``resyncSeconds`` (jittered) the watch is dropped and the kind re-listed, which also
  recovers from a connection that died silently (watches have no read timeout);
* a KServe CRD that is not installed (404 on list) counts as an empty, synced kind; it is
  retried periodically and logged once, so installing KServe later needs no restart.

Readiness reflects the first sync only: once synced, a replica whose watch breaks keeps
answering from its last snapshot (stale, but consistent) while it reconnects, instead of
leaving the Service and making the API server fail every call.

After any change that matters to admission a new snapshot is built, debounced (50 ms by
default) so a burst of events costs one rebuild, and off the event loop so building it never
delays requests. Node heartbeats that do not change labels do not trigger a rebuild. Objects
are stored as plain dicts; Nodes are trimmed to metadata and capacity because admission only
reads their labels and a full Node (its image list) can be tens of kilobytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched.errors import InputError
from cudasched.labels import VOLATILE_KEYS
from cudasched.objects import metadata_of as _meta
from cudasched.webhook.metrics import WebhookMetrics

if TYPE_CHECKING:
    from lightkube import AsyncClient

__all__ = [
    "ClusterCache",
    "KindSpec",
    "StateBuilder",
    "default_kinds",
]

log = logging.getLogger(__name__)

#: ``build(nodes, inference_services, serving_runtimes, cluster_serving_runtimes) -> state``
StateBuilder = Callable[
    [
        Sequence[Mapping[str, Any]],
        Sequence[Mapping[str, Any]],
        Sequence[Mapping[str, Any]],
        Sequence[Mapping[str, Any]],
    ],
    Any,
]

NODES = "nodes"
ISVCS = "inferenceservices"
RUNTIMES = "servingruntimes"
CLUSTER_RUNTIMES = "clusterservingruntimes"

_Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects


@dataclass(frozen=True, slots=True)
class KindSpec:
    """One watched kind: the lightkube resource class and how to treat it."""

    name: str
    resource: Any
    namespaced: bool
    optional: bool  # a CRD that may be absent (404 -> empty)


def default_kinds() -> tuple[KindSpec, ...]:
    """The four kinds admission needs, as lightkube generic resources (raw dicts, no models).

    Built on call, not at import: lightkube registers generic resources in its own registry.
    Nodes use a private generic class so the registry's typed ``Node`` model is not replaced.
    """
    from lightkube.generic_resource import (
        GenericGlobalResource,
        create_api_info,
        create_global_resource,
        create_namespaced_resource,
    )

    class RawNode(GenericGlobalResource):  # type: ignore[misc]
        _api_info = create_api_info("", "v1", "Node", "nodes", verbs=["list", "watch"])

    isvc = create_namespaced_resource(
        "serving.kserve.io", "v1beta1", "InferenceService", "inferenceservices"
    )
    runtime = create_namespaced_resource(
        "serving.kserve.io", "v1alpha1", "ServingRuntime", "servingruntimes"
    )
    cluster_runtime = create_global_resource(
        "serving.kserve.io", "v1alpha1", "ClusterServingRuntime", "clusterservingruntimes"
    )
    return (
        KindSpec(NODES, RawNode, namespaced=False, optional=False),
        KindSpec(ISVCS, isvc, namespaced=True, optional=True),
        KindSpec(RUNTIMES, runtime, namespaced=True, optional=True),
        KindSpec(CLUSTER_RUNTIMES, cluster_runtime, namespaced=False, optional=True),
    )


def _key(obj: Mapping[str, Any]) -> _Key | None:
    meta = _meta(obj)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    ns = meta.get("namespace")
    return (ns if isinstance(ns, str) else "", name)


def _plain(obj: Any, kind: str) -> dict[str, Any]:
    """A plain dict of what we keep: everything except ``managedFields`` (pure bulk), and for
    Nodes only identity, labels and capacity."""
    raw = obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)
    meta = dict(_meta(raw))
    meta.pop("managedFields", None)
    if kind == NODES:
        status = raw.get("status") if isinstance(raw.get("status"), Mapping) else {}
        kept_meta = {k: meta[k] for k in ("name", "uid", "resourceVersion", "labels") if k in meta}
        kept_status = {k: status[k] for k in ("capacity", "allocatable") if k in status}
        out: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": kept_meta}
        if kept_status:
            out["status"] = kept_status
        return out
    raw["metadata"] = meta
    return raw


# What admission reads of an InferenceService's status: the runtime KServe recorded. KServe
# rewrites the rest (conditions, URLs, traffic, model state) on every reconcile; rebuilding the
# snapshot for those would also empty the decision memo for nothing.
_ISVC_STATUS_KEYS = ("servingRuntimeName", "clusterServingRuntimeName")


def _relevant(kind: str, obj: Mapping[str, Any]) -> Any:
    """The part of an object whose change requires a new snapshot."""
    meta = _meta(obj)
    if kind == NODES:
        # GFD rewrites its timestamp label on every node every minute: with thousands of
        # nodes that alone would rebuild the snapshot (and empty the decision memo) constantly.
        labels = meta.get("labels")
        if not isinstance(labels, Mapping):
            return labels
        return {k: v for k, v in labels.items() if k not in VOLATILE_KEYS}
    status = obj.get("status")
    if kind == ISVCS and (status is None or isinstance(status, Mapping)):
        # No status yet and a status without a runtime name read the same way.
        status = {k: (status or {}).get(k) for k in _ISVC_STATUS_KEYS}
    return (meta.get("labels"), meta.get("annotations"), obj.get("spec"), status)


def _status_code(exc: BaseException) -> int | None:
    """The HTTP status of a lightkube/httpx error, or ``None`` for transport errors."""
    status = getattr(exc, "status", None)
    code = getattr(status, "code", None)
    if isinstance(code, int):
        return code
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    return code if isinstance(code, int) else None


class ClusterCache:
    """List+watch of the four kinds, publishing :class:`ClusterState` snapshots.

    Implements the server's ``StateSource``: ``state``, ``synced``, ``not_ready_reason``,
    ``start()``, ``stop()``. For tests pass ``client`` (a lightkube ``AsyncClient``) or
    ``base_url`` (plain HTTP API endpoint, e.g. a mock API server); otherwise ``kubeconfig``
    or the in-cluster/``KUBECONFIG`` configuration is used.
    """

    def __init__(
        self,
        *,
        client: AsyncClient | None = None,
        base_url: str | None = None,
        kubeconfig: str | None = None,
        build_state: StateBuilder | None = None,
        kinds: Sequence[KindSpec] | None = None,
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
        self._kinds: tuple[KindSpec, ...] | None = tuple(kinds) if kinds is not None else None
        self.metrics = metrics if metrics is not None else WebhookMetrics()
        self.resync_seconds = resync_seconds
        self.debounce_seconds = debounce_seconds
        self.backoff_initial = backoff_initial
        self.backoff_max = max(backoff_max, backoff_initial)
        self.missing_crd_retry_seconds = missing_crd_retry_seconds
        self.request_timeout = request_timeout  # per API call (watches have no read timeout)
        self._rng = rng if rng is not None else random.Random()

        self._stores: dict[str, dict[_Key, dict[str, Any]]] = {}
        self._listed: set[str] = set()
        self._missing: set[str] = set()
        self._errors: dict[str, str] = {}
        self._resume: dict[str, str | None] = {}  # last resourceVersion seen, per kind
        self._state: Any = None
        self._synced = False
        self._tasks: list[asyncio.Task[None]] = []
        self._publisher: asyncio.Task[None] | None = None
        self._dirty = False
        self._changed: asyncio.Condition | None = None
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
        kinds = [k.name for k in self._kinds or ()] or [NODES, ISVCS, RUNTIMES, CLUSTER_RUNTIMES]
        waiting = [k for k in kinds if k not in self._listed]
        reason = "waiting for the first list of " + ", ".join(waiting or kinds)
        errors = [f"{k}: {self._errors[k]}" for k in waiting if k in self._errors]
        if errors:
            reason += " (last error: " + "; ".join(errors)[:300] + ")"
        elif self._listed == set(kinds):
            reason = "building the first cluster snapshot"
        return reason

    async def start(self) -> None:
        """Create the client if needed and start one list+watch task per kind."""
        if self._tasks:
            return
        if self._kinds is None:
            self._kinds = default_kinds()
        self.prepare()
        self._changed = asyncio.Condition()
        if self._build is None:
            self._build = _default_builder()
        for spec in self._kinds:
            self._stores.setdefault(spec.name, {})
            task = asyncio.create_task(self._follow(spec), name=f"cudasched-watch-{spec.name}")
            self._tasks.append(task)

    @property
    def running(self) -> bool:
        """Whether the watch tasks are running (between ``start`` and ``stop``)."""
        return bool(self._tasks)

    def prepare(self) -> None:
        """Load the Kubernetes configuration and create the client now (``start`` does it
        otherwise), so a bad kubeconfig is reported before the server starts listening.
        Raises :class:`InputError` naming where the configuration was looked for."""
        if self._client is None:
            self._client = self._make_client()

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
        store = self._stores.get(kind, {})
        return [store[k] for k in sorted(store)]

    async def wait_until(
        self, predicate: Callable[[ClusterCache], bool], timeout: float = 10.0
    ) -> None:
        """Wait until ``predicate(self)`` holds after a publish (tests, start-up gating)."""
        if self._changed is None:
            raise RuntimeError("the cache is not started")
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: predicate(self))

    # ------------------------------------------------------------------ client

    def _make_client(self) -> AsyncClient:
        from lightkube import AsyncClient, ConfigError
        from lightkube.config.kubeconfig import KubeConfig
        from lightkube.config.models import Cluster, User

        try:
            if self._base_url is not None:
                # An anonymous user: lightkube insists on one, a test API server needs none.
                config = KubeConfig.from_one(
                    cluster=Cluster(server=self._base_url), user=User(), namespace="default"
                )
            elif self._kubeconfig is not None:
                config = KubeConfig.from_file(self._kubeconfig)
            else:
                config = KubeConfig.from_env()
        except (ConfigError, OSError) as exc:
            where = self._kubeconfig or "in-cluster service account or KUBECONFIG"
            raise InputError(f"cannot load Kubernetes configuration from {where}: {exc}") from None
        try:  # lightkube >= 1.0 is built on httpx2, earlier releases on httpx
            from httpx2 import Timeout
        except ImportError:  # pragma: no cover - depends on the installed lightkube
            from httpx import Timeout
        return AsyncClient(
            config,
            timeout=Timeout(self.request_timeout),
            trust_env=self._base_url is None,
        )

    # ------------------------------------------------------------------ per-kind loop

    def _backoff(self, attempt: int) -> float:
        """Full-jitter exponential backoff: uniform in [0, min(max, initial * 2**attempt)]."""
        ceiling = min(self.backoff_max, self.backoff_initial * (2 ** min(attempt, 30)))
        return self._rng.uniform(self.backoff_initial / 2, ceiling)

    async def _follow(self, spec: KindSpec) -> None:
        """List, then watch, forever (until cancelled)."""
        attempt = 0
        version: str | None = None  # None: (re-)list before watching
        while True:
            if version is None:
                try:
                    version = await self._list(spec)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if spec.optional and _status_code(exc) == 404:
                        self._crd_missing(spec)
                        await asyncio.sleep(self.missing_crd_retry_seconds)
                        continue
                    attempt += 1
                    self._record_error(spec, "list_error", exc)
                    await asyncio.sleep(self._backoff(attempt))
                    continue
                attempt = 0
                self._resume[spec.name] = version
            resync = self.resync_seconds * self._rng.uniform(0.9, 1.1)
            try:
                async with asyncio.timeout(resync) as deadline:
                    version = await self._watch(spec, version)
            except asyncio.CancelledError:
                raise
            except TimeoutError:
                if deadline.expired():
                    self.metrics.watch_restarts.labels(kind=spec.name, reason="resync").inc()
                    version = None  # periodic re-list
                    continue
                attempt += 1
                self._record_error(spec, "watch_error", TimeoutError("watch timed out"))
                version = self._resume.get(spec.name, version)
                await asyncio.sleep(self._backoff(attempt))
            except Exception as exc:
                code = _status_code(exc)
                if code == 410:
                    log.info("watch of %s expired (410 Gone); re-listing", spec.name)
                    self.metrics.watch_restarts.labels(kind=spec.name, reason="gone").inc()
                    version = None
                    continue
                if code == 404 and spec.optional:
                    version = None  # CRD removed: the next list decides
                    continue
                attempt += 1
                self._record_error(spec, "watch_error", exc)
                # Resume after the last event applied, not from the list's version.
                version = self._resume.get(spec.name, version)
                await asyncio.sleep(self._backoff(attempt))
            else:
                # The watch generator ended on its own (it normally reconnects internally).
                self.metrics.watch_restarts.labels(kind=spec.name, reason="ended").inc()

    async def _list(self, spec: KindSpec) -> str | None:
        assert self._client is not None
        kwargs: dict[str, Any] = {"chunk_size": 500}
        if spec.namespaced:
            kwargs["namespace"] = "*"
        listing = self._client.list(spec.resource, **kwargs)
        fresh: dict[_Key, dict[str, Any]] = {}
        async for obj in listing:
            plain = _plain(obj, spec.name)
            key = _key(plain)
            if key is not None:
                fresh[key] = plain
        try:
            version: str | None = listing.resourceVersion
        except Exception:  # NotReadyError: the server sent no resourceVersion
            version = None
        old = self._stores.get(spec.name, {})
        changed = spec.name not in self._listed or _differs(spec.name, old, fresh)
        self._stores[spec.name] = fresh
        if spec.name in self._missing:
            log.info("%s is available again", spec.name)
            self._missing.discard(spec.name)
        self._errors.pop(spec.name, None)
        self._mark_listed(spec.name)
        if changed:
            self._schedule_publish()
        return version

    async def _watch(self, spec: KindSpec, version: str | None) -> str | None:
        """Apply watch events until the stream fails; returns only if the generator ends."""
        assert self._client is not None
        kwargs: dict[str, Any] = {"resource_version": version}
        if spec.namespaced:
            kwargs["namespace"] = "*"
        store = self._stores.setdefault(spec.name, {})
        async for event_type, obj in self._client.watch(spec.resource, **kwargs):
            plain = _plain(obj, spec.name)
            rv = _meta(plain).get("resourceVersion")
            if isinstance(rv, str) and rv:
                version = rv
                self._resume[spec.name] = rv
            key = _key(plain)
            if key is None or event_type == "BOOKMARK":
                continue
            if event_type == "DELETED":
                if store.pop(key, None) is not None:
                    self._schedule_publish()
            elif event_type in ("ADDED", "MODIFIED"):
                old = store.get(key)
                store[key] = plain
                if old is None or _relevant(spec.name, old) != _relevant(spec.name, plain):
                    self._schedule_publish()
        return version

    def _mark_listed(self, kind: str) -> None:
        self._listed.add(kind)
        if not self._synced and all(k.name in self._listed for k in self._kinds or ()):
            log.info(
                "cluster cache synced (%s)",
                ", ".join(
                    f"{len(self._stores.get(k.name, {}))} {k.name}" for k in self._kinds or ()
                ),
            )
            self._schedule_publish(immediately=True)

    def _crd_missing(self, spec: KindSpec) -> None:
        if spec.name not in self._missing:
            log.warning(
                "%s are not served by the API server (KServe CRD not installed?); treating them "
                "as none and retrying every %gs",
                spec.name,
                self.missing_crd_retry_seconds,
            )
            self._missing.add(spec.name)
        had = bool(self._stores.get(spec.name))
        self._stores[spec.name] = {}
        self._errors.pop(spec.name, None)
        self._mark_listed(spec.name)
        if had:
            self._schedule_publish()

    def _record_error(self, spec: KindSpec, reason: str, exc: BaseException) -> None:
        text = f"{type(exc).__name__}: {exc}".strip()
        if self._errors.get(spec.name) != text:
            log.warning("%s of %s failed: %s", reason.replace("_", " "), spec.name, text)
        self._errors[spec.name] = text
        self.metrics.watch_restarts.labels(kind=spec.name, reason=reason).inc()

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
            if not all(k.name in self._listed for k in self._kinds or ()):
                return  # published once every kind is listed (_mark_listed schedules it)
            self._dirty = False
            snapshot = [list(self._stores.get(k, {}).values()) for k in _ORDER]
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
            for kind, objs in zip(_ORDER, snapshot, strict=True):
                m.cache_objects.labels(kind=kind).set(len(objs))
            m.cache_synced.set(1)
            m.state_publishes.inc()
            if newly_synced:
                log.info("cluster snapshot published; admission is ready")
            if self._changed is not None:
                async with self._changed:
                    self._changed.notify_all()

    def _call_builder(self, snapshot: list[list[dict[str, Any]]]) -> Any:
        assert self._build is not None
        return self._build(snapshot[0], snapshot[1], snapshot[2], snapshot[3])

    def _empty_state(self) -> Any:
        if self._build is not None and not isinstance(self._build, _DefaultBuilder):
            return None
        from cudasched.webhook.state import ClusterState

        return ClusterState.empty()


_ORDER = (NODES, ISVCS, RUNTIMES, CLUSTER_RUNTIMES)


def _differs(kind: str, old: Mapping[_Key, Any], new: Mapping[_Key, Any]) -> bool:
    if old.keys() != new.keys():
        return True
    return any(_relevant(kind, old[k]) != _relevant(kind, new[k]) for k in new)


class _DefaultBuilder:
    """``ClusterState.from_objects`` with the knowledge base loaded once, not per snapshot."""

    def __init__(self) -> None:
        self._kb: Any = None

    def __call__(
        self,
        nodes: Sequence[Mapping[str, Any]],
        isvcs: Sequence[Mapping[str, Any]],
        runtimes: Sequence[Mapping[str, Any]],
        cluster_runtimes: Sequence[Mapping[str, Any]],
    ) -> Any:
        from cudasched.knowledge import KnowledgeBase
        from cudasched.webhook.state import ClusterState

        if self._kb is None:
            self._kb = KnowledgeBase.load()
        return ClusterState.from_objects(
            nodes, isvcs, runtimes, cluster_runtimes, kb=self._kb, synced=True
        )


def _default_builder() -> StateBuilder:
    return _DefaultBuilder()
