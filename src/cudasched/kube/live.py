"""Read a live cluster once into the :class:`~cudasched.cluster.snapshot.ClusterSnapshot` a file
gives: what ``--live`` means for every command.

It lists Nodes, Pods (all namespaces), InferenceServices, ServingRuntimes,
ClusterServingRuntimes, LLMInferenceServices, NVIDIADrivers, autoscaler node groups, DRA
DeviceClasses and ResourceSlices and Kueue ResourceFlavors (:data:`LIVE_KINDS`, declared
once in :mod:`cudasched.vocab.kinds`) in pages of :data:`PAGE_SIZE` (kubectl's chunk size, with
``continue`` tokens), and fetches by name the few objects a command names (a Deployment to
explain). It only ever reads: no watch, no write, never a Secret.

* List items arrive without ``kind``/``apiVersion``; they get the listed kind's. Pods are reduced
  to the fields cudasched reads (:func:`cudasched.cluster.snapshot.reduce_pod`), other objects lose
  ``managedFields``: the same objects ``cudasched snapshot`` writes.
* A kind whose CRD is not installed (404) is read as none and reported in
  :attr:`LiveCluster.absent` for the caller to note; a 404 on a built-in kind is an error.
* ``410 Gone`` while paging (the continue token outlived the API server's compaction window)
  re-lists that kind once from the start, then gives up.
* Every failure is an :class:`~cudasched.vocab.errors.InputError` with a one-line message: the
server
  cannot be reached or does not answer, the credentials are rejected (401), a permission is
  missing (403, naming the verb and the resource to grant).

Progress goes to an optional :class:`ListingProgress`; nothing here prints.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cudasched.cluster.snapshot import ClusterSnapshot, KubeObject, reduce_pod, without_bulk
from cudasched.kube.client import DEFAULT_TIMEOUT_SECONDS, load_config, make_client
from cudasched.kube.reflector import LIST_CHUNK_SIZE, plain_object, status_code
from cudasched.kube.resources import resource_of
from cudasched.vocab.errors import InputError, one_line
from cudasched.vocab.kinds import (
    CLUSTER_SERVING_RUNTIME,
    DRA_KUEUE_KINDS,
    INFERENCE_SERVICE,
    LLM_INFERENCE_SERVICE,
    NODE,
    NODE_GROUP_KINDS,
    NVIDIA_DRIVER,
    POD,
    SERVING_RUNTIME,
    Kind,
)

__all__ = [
    "LIVE_KINDS",
    "PAGE_SIZE",
    "ApiServer",
    "ListingProgress",
    "LiveCluster",
    "ObjectRef",
    "absent_notes",
    "read_cluster",
    "read_live_cluster",
    "request_failure",
]

#: The kinds a live read lists, in this order (nodes first: the cheapest check of access).
LIVE_KINDS: tuple[Kind, ...] = (
    NODE,
    POD,
    INFERENCE_SERVICE,
    SERVING_RUNTIME,
    CLUSTER_SERVING_RUNTIME,
    LLM_INFERENCE_SERVICE,
    NVIDIA_DRIVER,
    *NODE_GROUP_KINDS,
    *DRA_KUEUE_KINDS,
)

#: Items per list request, as kubectl asks (``--chunk-size`` default).
PAGE_SIZE = LIST_CHUNK_SIZE

_USER_RE = re.compile(r'User "([^"]*)"')


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """One object to fetch by name (``namespace`` is ignored for cluster-scoped kinds)."""

    kind: Kind
    namespace: str
    name: str

    def describe(self) -> str:
        where = f"{self.namespace}/" if self.kind.namespaced else ""
        return f"{self.kind.kind} {where}{self.name}"


class ListingProgress(Protocol):
    """What a live read reports while it lists (the command line draws it on a terminal)."""

    def start(self, kind: Kind) -> None:
        """Listing ``kind`` begins."""
        ...

    def advance(self, kind: Kind, count: int) -> None:
        """``count`` objects of ``kind`` listed so far (reported once per page)."""
        ...

    def finish(self, kind: Kind, count: int | None) -> None:
        """``kind`` is listed (``count`` objects), or not served (``None``)."""
        ...


@dataclass(frozen=True, slots=True)
class LiveCluster:
    """A live read: the snapshot, the optional kinds the cluster does not serve, and the
    advisory kinds the identity may not list (read as none)."""

    snapshot: ClusterSnapshot
    absent: tuple[Kind, ...] = ()
    denied: tuple[Kind, ...] = ()


@dataclass(frozen=True, slots=True)
class ApiServer:
    """How messages name the cluster: its URL, where its configuration came from, and the
    timeout of each request (seconds)."""

    server: str
    origin: str
    timeout: float = DEFAULT_TIMEOUT_SECONDS


def absent_notes(absent: Iterable[Kind], denied: Iterable[Kind] = ()) -> list[str]:
    """One note per product whose CRDs are missing (``KServe is not installed ...``), advisory
    kinds left out (most clusters lack them); and one for the advisory kinds the identity may
    not list."""
    by_product: dict[str, list[Kind]] = {}
    for kind in absent:
        if not kind.advisory:
            by_product.setdefault(kind.crd_of or "its", []).append(kind)
    notes = []
    for product, kinds in by_product.items():
        names = ", ".join(_resource_name(k) for k in kinds)
        notes.append(
            f"the cluster does not serve {names} ({product} CRD not installed); read as none"
        )
    groups = [_resource_name(k) for k in denied if k in NODE_GROUP_KINDS]
    if groups:
        notes.append(
            f"not allowed to list {', '.join(groups)}; autoscaler node groups read as none "
            "(grant list on them for the audit's scale-up hints)"
        )
    others = [_resource_name(k) for k in denied if k not in NODE_GROUP_KINDS]
    if others:
        notes.append(
            f"not allowed to list {', '.join(others)}; read as none (grant list on them for "
            "the audit's DRA and Kueue checks)"
        )
    return notes


def read_live_cluster(
    *,
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    server: str | None = None,
    fetch: Sequence[ObjectRef] = (),
    kinds: Sequence[Kind] = LIVE_KINDS,
    page_size: int = PAGE_SIZE,
    progress: ListingProgress | None = None,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> LiveCluster:
    """Read the cluster the configuration names (see :func:`cudasched.kube.client.load_config`
    for the order of sources) and return it as a snapshot. Blocks; raises ``InputError``."""
    config = load_config(kubeconfig=kubeconfig, context=context, server=server)
    client = make_client(kubeconfig=kubeconfig, context=context, server=server, timeout=timeout)
    where = ApiServer(str(config.settings.cluster.server), config.origin, timeout)

    async def run() -> LiveCluster:
        try:
            return await read_cluster(
                client,
                where=where,
                fetch=fetch,
                kinds=kinds,
                page_size=page_size,
                progress=progress,
            )
        finally:
            await client.close()

    return asyncio.run(run())


async def read_cluster(
    client: Any,
    *,
    where: ApiServer | None = None,
    fetch: Sequence[ObjectRef] = (),
    kinds: Sequence[Kind] = LIVE_KINDS,
    page_size: int = PAGE_SIZE,
    progress: ListingProgress | None = None,
) -> LiveCluster:
    """List ``kinds`` and fetch ``fetch`` through a lightkube ``AsyncClient`` (the caller
    closes it). Raises ``InputError`` with one line naming what failed."""
    if page_size < 1:
        raise InputError(f"invalid page size {page_size}: expected a positive number of items")
    where = where if where is not None else ApiServer("(unknown URL)", "the given client")
    objects: list[KubeObject] = []
    absent: list[Kind] = []
    denied: list[Kind] = []
    forbidden: list[_Forbidden] = []
    for kind in kinds:
        if progress is not None:
            progress.start(kind)
        try:
            listed = await _list_kind(client, kind, page_size, where, progress)
        except _Denied:
            listed = None
            denied.append(kind)
        except _Forbidden as refused:  # said once for every kind, after all were tried
            listed = None
            forbidden.append(refused)
        else:
            if listed is None:
                absent.append(kind)
        if progress is not None:
            progress.finish(kind, None if listed is None else len(listed))
        if listed is not None:
            objects.extend(listed)
    if forbidden:
        names = ", ".join(_resource_name(f.kind) for f in forbidden)
        users = sorted({f.user for f in forbidden if f.user})
        who = f" (denied to User {users[0]!r})" if len(users) == 1 else ""
        raise InputError(f"cannot list {names} at the cluster scope: grant list on {names}{who}")
    for ref in fetch:
        objects.append(await _fetch(client, ref, where))
    snapshot = ClusterSnapshot.from_objects(objects, source=f"live cluster {where.server}")
    return LiveCluster(snapshot, tuple(absent), tuple(denied))


class _Denied(Exception):
    """An advisory kind the identity may not list (403)."""


class _Forbidden(Exception):
    """A kind the identity may not list (403): every such kind is named in one error."""

    def __init__(self, kind: Kind, user: str | None) -> None:
        super().__init__(kind.plural)
        self.kind = kind
        self.user = user


# --------------------------------------------------------------------------- requests


async def _list_kind(
    client: Any, kind: Kind, page_size: int, where: ApiServer, progress: ListingProgress | None
) -> list[KubeObject] | None:
    """Every object of ``kind`` (all namespaces), or ``None`` when its CRD is not installed."""
    options: dict[str, Any] = {"chunk_size": page_size}
    if kind.namespaced:
        options["namespace"] = "*"
    for attempt in (1, 2):
        items: list[KubeObject] = []
        try:
            async for obj in client.list(resource_of(kind), **options):
                items.append(_as_listed(kind, obj))
                if progress is not None and len(items) % page_size == 0:
                    progress.advance(kind, len(items))
        except Exception as exc:
            code = status_code(exc)
            if code == 404 and kind.optional:
                return None
            if code == 403 and kind.advisory:
                raise _Denied from None
            if code == 403:
                user = _USER_RE.search(_server_message(exc))
                raise _Forbidden(kind, user.group(1) if user else None) from None
            if code == 410 and attempt == 1:
                continue  # the continue token expired mid-list: start this kind again, once
            raise request_failure(exc, "list", kind, None, where) from None
        return items
    raise AssertionError("unreachable")  # pragma: no cover


async def _fetch(client: Any, ref: ObjectRef, where: ApiServer) -> KubeObject:
    kind = ref.kind
    options = {"namespace": ref.namespace} if kind.namespaced else {}
    try:
        obj = await client.get(resource_of(kind), ref.name, **options)
    except Exception as exc:
        if status_code(exc) == 404:
            raise InputError(f"{ref.describe()} not found in the live cluster") from None
        raise request_failure(exc, "get", kind, ref.namespace, where) from None
    return _as_listed(kind, obj)


def _as_listed(kind: Kind, obj: Any) -> KubeObject:
    """A list item as a file holds it: ``kind``/``apiVersion`` filled in, bulk dropped."""
    plain = plain_object(obj)
    full = {"apiVersion": kind.api_version, "kind": kind.kind, **plain}
    return reduce_pod(full) if kind == POD else without_bulk(full)


# --------------------------------------------------------------------------- errors


def _transport_errors() -> tuple[type[BaseException], ...]:
    import httpx2  # lightkube (>= 1.0, as pyproject pins) is built on httpx2

    return (httpx2.TransportError, OSError)


def _is_timeout(exc: BaseException) -> bool:
    return "Timeout" in type(exc).__name__


def request_failure(
    exc: BaseException, verb: str, kind: Kind, namespace: str | None, where: ApiServer
) -> InputError:
    """The one-line error for a failed request."""
    resource = _resource_name(kind)
    scope = f"in the namespace {namespace!r}" if namespace else "at the cluster scope"
    code = status_code(exc)
    if code is None:
        if _is_timeout(exc):
            return InputError(
                f"the Kubernetes API server at {where.server} ({where.origin}) did not answer "
                f"within {where.timeout:g}s"
            )
        if isinstance(exc, _transport_errors()):
            return InputError(
                f"cannot reach the Kubernetes API server at {where.server} ({where.origin}): "
                f"{one_line(exc)}"
            )
        from lightkube import ConfigError

        if isinstance(exc, ConfigError):
            return InputError(f"cannot use {where.origin}: {one_line(exc)}")
        raise exc
    message = _server_message(exc)
    if code == 401:
        return InputError(
            f"the Kubernetes API server at {where.server} rejected the credentials of "
            f"{where.origin} (401 Unauthorized): they are expired or invalid; log in again or "
            "refresh the kubeconfig"
        )
    if code == 403:
        user = _USER_RE.search(message)
        who = f" (denied to User {user.group(1)!r})" if user else ""
        return InputError(f"cannot {verb} {resource} {scope}: grant {verb} on {resource}{who}")
    if code == 404:
        return InputError(
            f"the API server at {where.server} does not serve {resource} (404 Not Found): is "
            "it a Kubernetes API server?"
        )
    if code == 410:
        return InputError(
            f"the list of {resource} expired twice while paging (410 Gone): the cluster changes "
            "faster than it can be read; try again"
        )
    detail = f": {message}" if message else ""
    return InputError(
        f"the Kubernetes API server at {where.server} answered HTTP {code} to {verb} "
        f"{resource} {scope}{detail}"
    )


def _resource_name(kind: Kind) -> str:
    """How RBAC and ``kubectl create role --resource`` spell a kind: ``pods``,
    ``inferenceservices.serving.kserve.io``."""
    return f"{kind.plural}.{kind.group}" if kind.group else kind.plural


def _server_message(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    message = getattr(status, "message", None)
    if isinstance(message, str) and message:
        return one_line(message)
    response = getattr(exc, "response", None)
    try:
        body = response.json() if response is not None else None
    except Exception:  # not JSON: the status line says enough
        body = None
    if isinstance(body, Mapping) and isinstance(body.get("message"), str):
        return one_line(body["message"])
    return ""
