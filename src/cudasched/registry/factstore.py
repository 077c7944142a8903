"""Image facts shared through the cluster, for the webhook's image resolver
(``imageResolver.sharedFacts``): what one replica read of an image (its config's CUDA facts,
its SBOM and layers) is kept in the image digest's ImageFacts object
(:mod:`cudasched.knowledge.imagefacts`), so no replica, and no restart, reads the layers again,
and a person's ``spec.override`` reaches every replica.

The resolver's workers are threads: :class:`SharedFacts` reads and writes through its own
client on its own loop thread (:class:`~cudasched.kube.threaded.ThreadedClient`), each call
bounded in time, and never raises: a cluster that cannot be read or written (no CRD, no RBAC,
an outage) costs the resolver its sharing, not its answers, and is tried again after
``pause_seconds`` (said once in the log, counted in the metrics).

What is remembered: each digest's object for ``ttl_seconds`` (so an override is seen within
that time; an absent object too, since another replica may write it). What is written: the
object when there is none; its status when this replica knows more than it says (its layers'
contents, a reference it was not read as). Stored contents without an answer older than
``retry_seconds`` are not used, so a transient failure is read again.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol

from cudasched.knowledge.imageconfig import ImageConfig
from cudasched.knowledge.imagefacts import (
    StoredFacts,
    facts_name,
    facts_object,
    facts_status,
    read_facts,
)
from cudasched.kube.imagefacts import (
    AlreadyThere,
    create_image_facts,
    get_image_facts,
    patch_image_facts_status,
)
from cudasched.kube.threaded import ThreadedClient
from cudasched.vocab.errors import InputError

__all__ = ["FactObserver", "SharedFacts"]

log = logging.getLogger(__name__)


class FactObserver(Protocol):
    """What the webhook counts: each look-up and write of shared facts, by result
    (``found``, ``absent``, ``written``, ``failed``)."""

    def shared_facts(self, result: str) -> None: ...


def _utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SharedFacts:
    """The cluster's ImageFacts objects, for threads (see the module's docstring)."""

    def __init__(
        self,
        client_factory: Callable[[], Any],
        *,
        timeout_seconds: float = 5.0,
        ttl_seconds: float = 300.0,
        retry_seconds: float = 3600.0,
        pause_seconds: float = 300.0,
        remember: int = 4096,
        observer: FactObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], str] = _utc_now,
    ) -> None:
        if ttl_seconds <= 0 or retry_seconds <= 0 or pause_seconds <= 0 or remember < 1:
            raise InputError("invalid shared facts: TTLs and pause > 0 seconds, remember >= 1")
        self._client = ThreadedClient(
            client_factory, timeout_seconds=timeout_seconds, name="image-facts"
        )
        self.ttl_seconds = ttl_seconds
        self.retry_seconds = retry_seconds
        self.pause_seconds = pause_seconds
        self.max_remembered = remember
        self._observer = observer
        self._clock = clock
        self._now = now
        self._kept: OrderedDict[str, tuple[StoredFacts | None, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._paused_until = 0.0

    # ------------------------------------------------------------------ reading

    def lookup(self, digest: str) -> StoredFacts | None:
        """The facts the cluster keeps for ``digest`` (``None``: none, or not readable);
        blocks the calling thread for at most the client's timeout."""
        if not digest:
            return None
        known, found = self._remembered(digest)
        if known:
            return self._usable(found) if found is not None else None
        if self._paused():
            return None
        try:
            obj = self._client.run(partial(get_image_facts, name=facts_name(digest)))
        except InputError as exc:
            self._failed(f"ImageFacts of {digest} not read: {exc}")
            return None
        stored = read_facts(obj) if obj is not None else None
        self._keep(digest, stored)
        self._count("found" if stored is not None else "absent")
        return self._usable(stored) if stored is not None else None

    def _usable(self, stored: StoredFacts) -> StoredFacts:
        """``stored`` without contents that found no answer longer than ``retry_seconds``
        ago (the read may do better now)."""
        contents = stored.contents
        if contents is None or contents.known or stored.config is None:
            return stored
        try:
            observed = datetime.strptime(stored.observed, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
            when = datetime.strptime(self._now(), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            return stored
        if (when - observed).total_seconds() < self.retry_seconds:
            return stored
        return replace(stored, config=replace(stored.config, contents=None))

    # ------------------------------------------------------------------ writing

    def record(self, config: ImageConfig, image: str) -> None:
        """Keep what ``config`` (read as ``image``) says, where the cluster does not say it
        yet: the object when it has none, the status when this config adds contents or a
        reference. Never raises."""
        if not config.ok or not config.digest or self._paused():
            return
        stored = self.lookup(config.digest)
        if stored is not None and not self._adds(stored, config, image):
            return
        refs = [image, *(stored.references if stored is not None else ())]
        if stored is not None and config.contents is None:
            config = replace(config, contents=stored.contents)
        status = facts_status(config, refs, self._now())
        name = facts_name(config.digest)
        try:
            if stored is None:
                self._create(config.digest)
            patched = self._client.run(partial(patch_image_facts_status, name=name, status=status))
        except InputError as exc:
            self._failed(f"ImageFacts {name} not written: {exc}")
            return
        self._keep(config.digest, read_facts(patched))
        self._count("written")

    def _create(self, digest: str) -> None:
        # Another replica may have made it first: its status is merged into all the same.
        with contextlib.suppress(AlreadyThere):
            self._client.run(partial(create_image_facts, obj=facts_object(digest)))

    @staticmethod
    def _adds(stored: StoredFacts, config: ImageConfig, image: str) -> bool:
        """Whether ``config`` says something ``stored`` does not."""
        if stored.config is None or image not in stored.references:
            return True
        mine, kept = config.contents, stored.contents
        return mine is not None and (kept is None or (mine.known and not kept.known))

    # ------------------------------------------------------------------ memory, failures

    def _remembered(self, digest: str) -> tuple[bool, StoredFacts | None]:
        """Whether ``digest``'s object (or its absence) is remembered, and the object."""
        with self._lock:
            found = self._kept.get(digest)
            if found is None:
                return False, None
            if found[1] <= self._clock():
                del self._kept[digest]
                return False, None
            self._kept.move_to_end(digest)
            return True, found[0]

    def _keep(self, digest: str, value: StoredFacts | None) -> None:
        with self._lock:
            self._kept[digest] = (value, self._clock() + self.ttl_seconds)
            self._kept.move_to_end(digest)
            while len(self._kept) > self.max_remembered:
                self._kept.popitem(last=False)

    def _paused(self) -> bool:
        with self._lock:
            return self._clock() < self._paused_until

    def _failed(self, message: str) -> None:
        """Count a failure and pause sharing for ``pause_seconds`` (said once per pause)."""
        with self._lock:
            first = self._clock() >= self._paused_until
            self._paused_until = self._clock() + self.pause_seconds
        if first:
            log.warning("%s; image facts are not shared for %gs", message, self.pause_seconds)
        self._count("failed")

    def _count(self, result: str) -> None:
        if self._observer is not None:
            self._observer.shared_facts(result)

    def close(self) -> None:
        self._client.close()
