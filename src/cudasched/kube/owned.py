"""Objects of one kind that one writer owns, found by a label: listed, brought to a desired
set (created, replaced, deleted), with the API server's optimistic concurrency.

A replace carries the ``resourceVersion`` the writer last listed, so a writer whose view is
stale (another writer changed the object since) gets ``409 Conflict`` and lists again instead
of overwriting newer contents; one whose object was deleted since gets ``404`` and lists again
too (it would otherwise replace the missing object every round). New and changed objects are
written before old ones are deleted, so a reader selecting by the label never sees the set with
an object missing that both the old and the new set have.

With ``lean=True`` the objects are kept without ``managedFields``: every replace sends the
reset Kubernetes defines for them (a list of one empty entry, apimachinery's
``managedfields/internal/fieldmanager.go`` ``isResetManagedFields``), so the object keeps
only the fields that write changed, and a create is followed by such a replace, which changes
nothing and so leaves none. For objects a reader converts whole on every use (the API server
hands a custom parameter object to CEL by encoding it to JSON), the bookkeeping of every field
would otherwise be read along with the fields.

Objects are known by (namespace, name): a namespaced kind owned in every namespace (no
``namespace`` given) is listed across all of them, and each object is written in the namespace
its own metadata names.

A namespace closes under its owner: once it is being deleted, the API server refuses to create
anything in it (403 with the cause ``NamespaceTerminating``), and once it is gone a create
there is 404 for the namespace (apiserver ``pkg/admission/plugin/namespace/lifecycle``). Such
an object is skipped, not a failure, and its namespace named in :attr:`OwnedObjects.closed`:
the desired set of a writer that learns of deletions later (or keeps what went for a while)
would otherwise fail every write, in every namespace, until the namespace is gone and
forgotten. It is tried again in a later call, so a namespace re-created under the same name
gets its objects. Any other refusal of one object is raised once the others are written, and
with nothing deleted: old objects go only after every new one is in place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cudasched.kube.reflector import ObjectKey, object_key, plain_object, status_code
from cudasched.kube.resources import resource_of
from cudasched.vocab.kinds import Kind

__all__ = ["OwnedObjects", "StaleView", "namespace_closed"]


class StaleView(Exception):  # noqa: N818 - not a failure: the caller lists again
    """Another writer changed an object since it was listed."""


def namespace_closed(exc: BaseException, namespace: str) -> bool:
    """Whether ``exc`` refused a create because ``namespace`` is being deleted or is gone
    (see the module docstring), read from the API server's Status, never its message."""
    status = getattr(exc, "status", None)
    details = getattr(status, "details", None)
    code = status_code(exc)
    if code == 403:
        causes = getattr(details, "causes", None) or []
        return any(getattr(c, "reason", None) == "NamespaceTerminating" for c in causes)
    return (
        code == 404
        and getattr(details, "kind", None) == "namespaces"
        and getattr(details, "name", None) == namespace
    )


class OwnedObjects:
    """The objects of ``kind`` carrying ``label: value``: a cluster-scoped kind's, a namespaced
    kind's in ``namespace``, or in every namespace when ``namespace`` is ``None``."""

    def __init__(
        self,
        client: Any,
        kind: Kind,
        label: str,
        value: str,
        namespace: str | None = None,
        *,
        lean: bool = False,
    ) -> None:
        self.client = client
        self.lean = lean
        self.kind = kind
        self.selector = {label: value}
        self.namespace = namespace
        self._resource = resource_of(kind)
        #: (namespace, name) -> the object as last listed or written; namespace "" for a
        #: cluster-scoped kind.
        self.known: dict[ObjectKey, dict[str, Any]] = {}
        #: The namespaces the last :meth:`converge` could not create objects in (being
        #: deleted, or gone).
        self.closed: set[str] = set()

    async def refresh(self) -> Mapping[ObjectKey, dict[str, Any]]:
        """List the owned objects again."""
        everywhere = self.kind.namespaced and self.namespace is None
        found: dict[ObjectKey, dict[str, Any]] = {}
        async for obj in self.client.list(
            self._resource, labels=self.selector, namespace="*" if everywhere else self.namespace
        ):
            plain = plain_object(obj)
            key = object_key(plain)
            if key is not None:
                found[key] = plain
        self.known = found
        return found

    def _key(self, obj: Mapping[str, Any]) -> ObjectKey:
        meta = obj["metadata"]
        namespace = meta.get("namespace") or self.namespace or ""
        return (str(namespace) if self.kind.namespaced else "", str(meta["name"]))

    async def _replace(self, obj: Mapping[str, Any], version: object) -> dict[str, Any]:
        body = {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}
        if self.lean:
            body["metadata"]["managedFields"] = [{}]
        return plain_object(await self.client.replace(self._resource.from_dict(body)))

    async def _write(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
        """``obj`` created (``old`` is None) or replacing ``old``; the object as written."""
        if old is not None:
            return await self._replace(obj, old["metadata"].get("resourceVersion"))
        written = plain_object(await self.client.create(self._resource.from_dict(dict(obj))))
        if not self.lean:
            return written
        # A create records every field it set; the same contents again, with the reset,
        # record none.
        return await self._replace(written, written["metadata"].get("resourceVersion"))

    async def converge(
        self,
        desired: Sequence[Mapping[str, Any]],
        *,
        same: Callable[[Mapping[str, Any], Mapping[str, Any]], bool],
        allowed: Callable[[], bool] = lambda: True,
    ) -> int:
        """Make the owned objects ``desired`` (whole objects with names, and namespaces for a
        namespaced kind owned in every namespace); ``same(old, new)``
        says an existing one needs no write; ``allowed()`` is asked before each write (a
        leader that lost its lease stops half way, never writing stale contents). Returns the
        writes made; raises :class:`StaleView` on a conflict, and the first other refusal once
        every other object is written (see the module docstring)."""
        wanted = {self._key(obj): obj for obj in desired}
        self.closed = set()
        writes, complete, refused = await self._put_all(wanted, same, allowed)
        if refused is not None:
            raise refused
        if not complete:
            return writes
        for key in [k for k in self.known if k not in wanted]:
            if not allowed():
                return writes
            namespace, name = key
            try:
                await self.client.delete(self._resource, name, namespace=namespace or None)
            except Exception as exc:
                if status_code(exc) != 404:
                    raise
            del self.known[key]
            writes += 1
        return writes

    async def _put_all(
        self,
        wanted: Mapping[ObjectKey, Mapping[str, Any]],
        same: Callable[[Mapping[str, Any], Mapping[str, Any]], bool],
        allowed: Callable[[], bool],
    ) -> tuple[int, bool, Exception | None]:
        """Create or replace each of ``wanted`` that differs: (writes, whether every one was
        tried before ``allowed()`` said stop, the first refusal other than a closed
        namespace)."""
        writes = 0
        refused: Exception | None = None
        for key, obj in wanted.items():
            old = self.known.get(key)
            if old is not None and same(old, obj):
                continue
            if not allowed():
                return writes, False, refused
            try:
                written = await self._write(obj, old)
            except Exception as exc:
                # 409: changed since listed; 404 on a replace: deleted since listed (by a
                # person, a test, its namespace's deletion). Either way the view is stale:
                # list again, never retry it.
                code = status_code(exc)
                if code == 409 or (code == 404 and old is not None):
                    raise StaleView(f"{self.kind.plural}/{'/'.join(key).lstrip('/')}") from None
                if old is None and key[0] and namespace_closed(exc, key[0]):
                    self.closed.add(key[0])
                else:
                    refused = refused or exc
                continue
            self.known[key] = written
            writes += 1
        return writes, True, refused
