"""Objects of one kind that one writer owns, found by a label: listed, brought to a desired
set (created, replaced, deleted), with the API server's optimistic concurrency.

A replace carries the ``resourceVersion`` the writer last listed, so a writer whose view is
stale (another writer changed the object since) gets ``409 Conflict`` and lists again instead
of overwriting newer contents. New and changed objects are written before old ones are deleted,
so a reader selecting by the label never sees the set with an object missing that both the old
and the new set have.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cudasched.kube.reflector import plain_object, status_code
from cudasched.kube.resources import resource_of
from cudasched.vocab.kinds import Kind

__all__ = ["OwnedObjects", "StaleView"]


class StaleView(Exception):  # noqa: N818 - not a failure: the caller lists again
    """Another writer changed an object since it was listed."""


class OwnedObjects:
    """The objects of ``kind`` carrying ``label: value`` (cluster-scoped kinds, or
    ``namespace``'s)."""

    def __init__(
        self, client: Any, kind: Kind, label: str, value: str, namespace: str | None = None
    ) -> None:
        self.client = client
        self.kind = kind
        self.selector = {label: value}
        self.namespace = namespace
        self._resource = resource_of(kind)
        self.known: dict[str, dict[str, Any]] = {}  # name -> the object as last listed/written

    async def refresh(self) -> Mapping[str, dict[str, Any]]:
        """List the owned objects again."""
        found: dict[str, dict[str, Any]] = {}
        async for obj in self.client.list(
            self._resource, labels=self.selector, namespace=self.namespace
        ):
            plain = plain_object(obj)
            found[plain["metadata"]["name"]] = plain
        self.known = found
        return found

    async def converge(
        self,
        desired: Sequence[Mapping[str, Any]],
        *,
        same: Callable[[Mapping[str, Any], Mapping[str, Any]], bool],
        allowed: Callable[[], bool] = lambda: True,
    ) -> int:
        """Make the owned objects ``desired`` (whole objects with names); ``same(old, new)``
        says an existing one needs no write; ``allowed()`` is asked before each write (a
        leader that lost its lease stops half way, never writing stale contents). Returns the
        writes made; raises :class:`StaleView` on a conflict."""
        writes = 0
        wanted = {str(obj["metadata"]["name"]): obj for obj in desired}
        for name, obj in wanted.items():
            old = self.known.get(name)
            if old is not None and same(old, obj):
                continue
            if not allowed():
                return writes
            body = {**obj, "metadata": {**obj["metadata"]}}
            try:
                if old is None:
                    written = await self.client.create(self._resource.from_dict(body))
                else:
                    body["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion")
                    written = await self.client.replace(self._resource.from_dict(body))
            except Exception as exc:
                if status_code(exc) == 409:
                    raise StaleView(f"{self.kind.plural}/{name}") from None
                raise
            self.known[name] = plain_object(written)
            writes += 1
        for name in [n for n in self.known if n not in wanted]:
            if not allowed():
                return writes
            try:
                await self.client.delete(self._resource, name, namespace=self.namespace)
            except Exception as exc:
                if status_code(exc) != 404:
                    raise
            del self.known[name]
            writes += 1
        return writes
