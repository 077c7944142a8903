"""List+watch of one resource kind into an in-memory store: client-go's reflector, in asyncio.

How a kind is followed:

* **list** all objects (all namespaces, in chunks), replace the store, remember the list's
  ``resourceVersion``; the kind counts as listed from then on;
* **watch** from that version; ADDED/MODIFIED upsert, DELETED removes, BOOKMARK only advances
  the version;
* a watch that breaks (connection reset, stream cut mid-event, undecodable line) is resumed
  from the last ``resourceVersion`` seen after an exponential backoff with full jitter, so a
  flapping API server is not hammered by every replica in lockstep; a failed list is retried
  the same way;
* ``410 Gone`` (the version was compacted away) means events were lost: **re-list** at once;
* every ``resync_seconds`` (jittered) the watch is dropped and the kind re-listed, which also
  recovers from a connection that died silently (watches have no read timeout);
* a kind whose CRD is not installed (404 on list) counts as listed and empty; it is retried
  every ``absent_retry_seconds`` and logged once, so installing the CRD later needs no restart.

Objects are stored as plain dicts keyed by (namespace, name), without ``managedFields`` (pure
bulk), after the owner's ``transform``. The owner hears of every change through a
:class:`ReflectorListener` (called on the event loop, between awaits) and decides what matters;
the last error is kept for readiness messages and each restart is reported with its reason
(``list_error``, ``watch_error``, ``gone``, ``resync``, ``ended``).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cudasched.kube.resources import resource_of
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import Kind
from cudasched.vocab.objects import metadata_of

__all__ = [
    "ObjectKey",
    "Reflector",
    "ReflectorListener",
    "ReflectorTiming",
    "failure_reason",
    "get_or_none",
    "object_key",
    "plain_object",
    "status_code",
]

log = logging.getLogger(__name__)

ObjectKey = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects

LIST_CHUNK_SIZE = 500


def object_key(obj: Mapping[str, Any]) -> ObjectKey | None:
    """(namespace, name) of ``obj``; ``None`` when it has no name."""
    meta = metadata_of(obj)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    namespace = meta.get("namespace")
    return (namespace if isinstance(namespace, str) else "", name)


def plain_object(obj: Any) -> dict[str, Any]:
    """A lightkube object (or mapping) as a plain dict, without ``managedFields``."""
    raw = obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)
    meta = dict(metadata_of(raw))
    meta.pop("managedFields", None)
    raw["metadata"] = meta
    return raw


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of a lightkube/httpx error, or ``None`` for transport errors."""
    status = getattr(exc, "status", None)
    code = getattr(status, "code", None)
    if isinstance(code, int):
        return code
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    return code if isinstance(code, int) else None


def failure_reason(exc: BaseException) -> str:
    """A failed API call as messages name it: its HTTP status, else the error's type (never
    its text, which may quote the object)."""
    code = status_code(exc)
    return f"HTTP {code}" if code is not None else type(exc).__name__


async def get_or_none(
    client: Any, kind: Kind, name: str, *, namespace: str | None = None, what: str
) -> dict[str, Any] | None:
    """The object ``name`` (in ``namespace``, for a namespaced kind) as a plain dict, or
    ``None`` when the API server has none (404). Any other failure is an
    :class:`~cudasched.vocab.errors.InputError` saying ``cannot {what}`` and the
    :func:`failure_reason`. The caller checks the names first: they become URL segments."""
    kwargs: dict[str, Any] = {} if namespace is None else {"namespace": namespace}
    try:
        found = await client.get(resource_of(kind), name, **kwargs)
    except Exception as exc:
        if status_code(exc) == 404:
            return None
        raise InputError(f"cannot {what}: {failure_reason(exc)}") from None
    return plain_object(found)


@dataclass(frozen=True, slots=True)
class ReflectorTiming:
    """When to re-list and how long to wait after failures (seconds)."""

    resync_seconds: float = 300.0
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    absent_retry_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.resync_seconds <= 0 or self.backoff_initial <= 0:
            raise InputError(
                "invalid reflector timing: resync_seconds and backoff_initial must be > 0 "
                f"(got {self.resync_seconds}, {self.backoff_initial})"
            )

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Full-jitter exponential backoff: uniform in [initial / 2, min(max, initial *
        2**attempt)]."""
        ceiling = min(
            max(self.backoff_max, self.backoff_initial),
            self.backoff_initial * (2 ** min(attempt, 30)),
        )
        return rng.uniform(self.backoff_initial / 2, ceiling)


class ReflectorListener(Protocol):
    """What a reflector tells its owner. ``previous``/``current`` map keys to stored objects."""

    def on_listed(
        self,
        kind: Kind,
        previous: Mapping[ObjectKey, dict[str, Any]],
        current: Mapping[ObjectKey, dict[str, Any]],
    ) -> None:
        """A list replaced the store."""
        ...

    def on_event(self, kind: Kind, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        """A watch event changed the store: ``old`` is ``None`` for a new object, ``new`` is
        ``None`` for a deletion."""
        ...

    def on_absent(self, kind: Kind, previous: Mapping[ObjectKey, dict[str, Any]]) -> None:
        """The kind is not served (its CRD is not installed); the store is now empty."""
        ...

    def on_restart(self, kind: Kind, reason: str) -> None:
        """A list or watch was started again, for ``reason``."""
        ...


class Reflector:
    """Follows one kind with list+watch until cancelled (run it as a task)."""

    def __init__(
        self,
        client: Any,
        kind: Kind,
        listener: ReflectorListener,
        *,
        transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        timing: ReflectorTiming | None = None,
        rng: random.Random | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.client = client
        self.kind = kind
        self.listener = listener
        self.timing = timing if timing is not None else ReflectorTiming()
        self._transform = transform
        self._resource = resource_of(kind)
        self._rng = rng if rng is not None else random.Random()
        self._log = logger if logger is not None else log
        self._store: dict[ObjectKey, dict[str, Any]] = {}
        self._resume: str | None = None  # last resourceVersion seen
        self.listed = False  # a list succeeded (or found the kind absent) at least once
        self.absent = False  # the last list found the kind not served
        self.last_error: str | None = None  # since the last successful list

    @property
    def name(self) -> str:
        """The kind's plural, as used in logs and metrics (``nodes``, ``inferenceservices``)."""
        return self.kind.plural

    @property
    def objects(self) -> Mapping[ObjectKey, dict[str, Any]]:
        """The stored objects by (namespace, name). Read it, do not change it."""
        return self._store

    async def run(self) -> None:
        """List, then watch, forever (until cancelled)."""
        timing = self.timing
        attempt = 0
        version: str | None = None  # None: (re-)list before watching
        while True:
            if version is None:
                try:
                    version = await self._list()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if self.kind.optional and status_code(exc) == 404:
                        self._mark_absent()
                        await asyncio.sleep(timing.absent_retry_seconds)
                        continue
                    attempt += 1
                    self._record_error("list_error", exc)
                    await asyncio.sleep(timing.backoff(attempt, self._rng))
                    continue
                attempt = 0
                self._resume = version
            resync = timing.resync_seconds * self._rng.uniform(0.9, 1.1)
            try:
                async with asyncio.timeout(resync) as deadline:
                    version = await self._watch(version)
            except asyncio.CancelledError:
                raise
            except TimeoutError:
                if deadline.expired():
                    self.listener.on_restart(self.kind, "resync")
                    version = None  # periodic re-list
                    continue
                attempt += 1
                self._record_error("watch_error", TimeoutError("watch timed out"))
                version = self._resume
                await asyncio.sleep(timing.backoff(attempt, self._rng))
            except Exception as exc:
                code = status_code(exc)
                if code == 410:
                    self._log.info("watch of %s expired (410 Gone); re-listing", self.name)
                    self.listener.on_restart(self.kind, "gone")
                    version = None
                    continue
                if code == 404 and self.kind.optional:
                    version = None  # CRD removed: the next list decides
                    continue
                attempt += 1
                self._record_error("watch_error", exc)
                # Resume after the last event applied, not from the list's version.
                version = self._resume
                await asyncio.sleep(timing.backoff(attempt, self._rng))
            else:
                # The watch generator ended on its own (it normally reconnects internally).
                self.listener.on_restart(self.kind, "ended")

    def _plain(self, obj: Any) -> dict[str, Any]:
        plain = plain_object(obj)
        return self._transform(plain) if self._transform is not None else plain

    async def _list(self) -> str | None:
        kwargs: dict[str, Any] = {"chunk_size": LIST_CHUNK_SIZE}
        if self.kind.namespaced:
            kwargs["namespace"] = "*"
        listing = self.client.list(self._resource, **kwargs)
        fresh: dict[ObjectKey, dict[str, Any]] = {}
        async for obj in listing:
            plain = self._plain(obj)
            key = object_key(plain)
            if key is not None:
                fresh[key] = plain
        try:
            version: str | None = listing.resourceVersion
        except Exception:  # NotReadyError: the server sent no resourceVersion
            version = None
        previous, self._store = self._store, fresh
        if self.absent:
            self._log.info("%s is available again", self.name)
            self.absent = False
        self.last_error = None
        self.listed = True
        self.listener.on_listed(self.kind, previous, fresh)
        return version

    async def _watch(self, version: str | None) -> str | None:
        """Apply watch events until the stream fails; returns only if the generator ends."""
        kwargs: dict[str, Any] = {"resource_version": version}
        if self.kind.namespaced:
            kwargs["namespace"] = "*"
        async for event_type, obj in self.client.watch(self._resource, **kwargs):
            plain = self._plain(obj)
            rv = metadata_of(plain).get("resourceVersion")
            if isinstance(rv, str) and rv:
                version = rv
                self._resume = rv
            key = object_key(plain)
            if key is None or event_type == "BOOKMARK":
                continue
            if event_type == "DELETED":
                old = self._store.pop(key, None)
                if old is not None:
                    self.listener.on_event(self.kind, old, None)
            elif event_type in ("ADDED", "MODIFIED"):
                old = self._store.get(key)
                self._store[key] = plain
                self.listener.on_event(self.kind, old, plain)
        return version

    def _mark_absent(self) -> None:
        if not self.absent:
            self._log.warning(
                "%s are not served by the API server (%s CRD not installed?); treating them "
                "as none and retrying every %gs",
                self.name,
                self.kind.crd_of,
                self.timing.absent_retry_seconds,
            )
            self.absent = True
        previous, self._store = self._store, {}
        self.last_error = None
        self.listed = True
        self.listener.on_absent(self.kind, previous)

    def _record_error(self, reason: str, exc: BaseException) -> None:
        text = f"{type(exc).__name__}: {exc}".strip()
        if self.last_error != text:
            self._log.warning("%s of %s failed: %s", reason.replace("_", " "), self.name, text)
        self.last_error = text
        self.listener.on_restart(self.kind, reason)
