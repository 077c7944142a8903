"""The webhook's layer reads: what an image carries, read from its SBOM and layers
(:func:`~cudasched.registry.layers.read_contents`) in the background, once per digest, within
the budgets of ``imageResolver.layers``.

The image resolver (:class:`~cudasched.registry.resolver.BackgroundResolver`) asks here when
an image's config names no CUDA. A digest already read is answered from memory; one being read
is not read twice; any other is queued for the layer workers (``concurrency`` threads, their
own: a read of gigabytes never holds the workers that read configs) and the resolver's answer
stays "no CUDA" until the read ends, when ``then`` hands the contents back to it. No review
ever waits for a layer read: the resolver answers reviews from its cache, which the read
updates. A queue that is full drops the request (counted); it is asked again at the next
resolution of the image.

Each read is bounded by :class:`~cudasched.registry.layers.LayerBudget` (bytes fetched, one
deadline, what the scan unpacks), so a corrupt, huge, slow or truncated layer ends as an
unknown with its reason. An answer (a CUDA found) is kept for good: a digest's contents cannot
change. An unknown is kept for ``retry_seconds``: a budget spent or a registry that failed may
do better later, but not at every tag's TTL.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from cudasched.knowledge.imagecontents import ImageContents
from cudasched.registry.auth import Keychain
from cudasched.registry.client import Platform, RegistryClient
from cudasched.registry.layers import LayerBudget, read_contents
from cudasched.vocab.errors import InputError

__all__ = ["LayerObserver", "LayerReads", "wait_drained"]

log = logging.getLogger(__name__)


def wait_drained(
    lock: threading.Lock, inflight: Mapping[Any, Future[Any]], end: float, *, pause: float = 0.0
) -> bool:
    """Wait, until the monotonic clock reads ``end``, for ``inflight`` (guarded by ``lock``,
    emptied by the futures' done callbacks) to empty; whether it did. A future that fails
    ends its round early: its callback still empties its entry."""
    while time.monotonic() < end:
        with lock:
            pending = list(inflight.values())
        if not pending:
            return True
        for future in pending:
            try:
                future.result(timeout=max(0.0, end - time.monotonic()))
            except Exception:
                break
        if pause:
            time.sleep(pause)
    with lock:
        return not inflight


class LayerObserver(Protocol):
    """What the webhook counts of layer reads (metrics): each read by how it ended,
    ``answered`` (a CUDA found), ``unknown`` (read, no answer: the reason is in the contents),
    ``failed`` (an exception nothing expected) or ``dropped`` (the queue was full); and how
    many are waiting or running."""

    def layer_read(self, outcome: str, seconds: float, fetched: int) -> None: ...

    def layer_reads_in_flight(self, count: int) -> None: ...


class _Silent:
    def layer_read(self, outcome: str, seconds: float, fetched: int) -> None:
        return None

    def layer_reads_in_flight(self, count: int) -> None:
        return None


class LayerReads:
    """Layer reads by digest, in the background (see the module's docstring). Thread-safe."""

    def __init__(
        self,
        client: RegistryClient,
        platform: Platform,
        budget: LayerBudget,
        *,
        concurrency: int = 1,
        max_queued: int = 64,
        remember: int = 4096,
        retry_seconds: float = 3600.0,
        observer: LayerObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if concurrency < 1 or max_queued < 1 or remember < 1 or retry_seconds <= 0:
            raise InputError(
                "invalid layer reads: concurrency, max_queued and remember >= 1, "
                f"retry_seconds > 0 (got {concurrency}, {max_queued}, {remember}, {retry_seconds})"
            )
        self.client = client
        self.platform = platform
        self.budget = budget
        self.concurrency = concurrency
        self.max_queued = max_queued
        self.max_remembered = remember
        self.retry_seconds = retry_seconds
        self.observer: LayerObserver = observer if observer is not None else _Silent()
        self._clock = clock
        self._pool = ThreadPoolExecutor(
            max_workers=concurrency, thread_name_prefix="cudasched-layers"
        )
        self._inflight: dict[str, Future[ImageContents]] = {}
        self._then: dict[str, list[Callable[[ImageContents], object]]] = {}
        self._known: OrderedDict[str, tuple[ImageContents, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._closed = False

    def known(self, digest: str) -> ImageContents | None:
        """The contents read for ``digest``, while they are kept."""
        with self._lock:
            found = self._known.get(digest)
            if found is None:
                return None
            if found[1] <= self._clock():
                del self._known[digest]
                return None
            self._known.move_to_end(digest)
            return found[0]

    def remember(self, contents: ImageContents) -> None:
        """Keep ``contents`` for its digest (a read's, or one shared by another replica)."""
        if not contents.digest:
            return
        life = float("inf") if contents.known else self.retry_seconds
        with self._lock:
            self._known[contents.digest] = (contents, self._clock() + life)
            self._known.move_to_end(contents.digest)
            while len(self._known) > self.max_remembered:
                self._known.popitem(last=False)

    def request(
        self,
        image: str,
        digest: str,
        keychain: Keychain | None,
        then: Callable[[ImageContents], object],
    ) -> bool:
        """Read ``image`` (whose platform manifest is ``digest``) unless it is being read
        already (then ``then`` joins that read); ``then`` gets the contents when the read
        ends. False when the queue is full or closed (counted ``dropped``)."""
        with self._lock:
            if digest in self._inflight:
                self._then[digest].append(then)
                return True
            if self._closed or len(self._inflight) >= self.max_queued:
                dropped = True
            else:
                dropped = False
                future = self._pool.submit(self._read, image, digest, keychain)
                self._inflight[digest] = future
                self._then[digest] = [then]
                running = len(self._inflight)
        if dropped:
            self.observer.layer_read("dropped", 0.0, 0)
            return False
        self.observer.layer_reads_in_flight(running)
        future.add_done_callback(lambda done: self._done(digest, done))
        return True

    def _read(self, image: str, digest: str, keychain: Keychain | None) -> ImageContents:
        """One read, on a layer worker. It never raises: an exception nothing expected is an
        unknown (``failed``), logged with its type only (its message may carry a URL)."""
        started = time.perf_counter()
        try:
            contents = read_contents(
                self.client, image, self.platform, budget=self.budget, keychain=keychain
            )
        except Exception as exc:
            log.warning("layers of %s not read: unexpected %s", image, type(exc).__name__)
            contents = ImageContents(
                image, digest, unknown=f"internal error ({type(exc).__name__}) reading its layers"
            )
            self.observer.layer_read("failed", time.perf_counter() - started, 0)
            return contents
        outcome = "answered" if contents.known else "unknown"
        self.observer.layer_read(outcome, time.perf_counter() - started, contents.bytes_read)
        if contents.digest == digest:
            self.remember(contents)
        if not contents.known:
            log.info("layers of %s name no CUDA: %s", image, contents.unknown)
        return contents

    def _done(self, digest: str, future: Future[ImageContents]) -> None:
        with self._lock:
            self._inflight.pop(digest, None)
            thens = self._then.pop(digest, [])
            running = len(self._inflight)
        self.observer.layer_reads_in_flight(running)
        if future.cancelled():
            return
        contents = future.result()
        for then in thens:
            try:
                then(contents)
            except Exception:
                log.exception("a follow-up of the layer read of %s failed", digest)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no layer is being read (tests, benchmarks); whether it got there."""
        # the pause lets the done callbacks (the follow-ups) run between rounds
        return wait_drained(self._lock, self._inflight, time.monotonic() + timeout, pause=0.01)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
