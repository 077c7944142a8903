"""Image configs as resolution asks for them (a ``ConfigSource``, see knowledge.imageconfig).

Two sources over one :class:`~cudasched.registry.client.RegistryClient`:

* :class:`OnDemandSource` (the CLI's ``--resolve-images``): asks the registry the first time an
  image is looked at, waits for the answer, remembers it for the run;
* :class:`BackgroundResolver` (the webhook): never on the hot path. A look-up is answered from
  the cache; an image already being resolved is waited for at most ``budget_seconds``; any
  other image is queued for the worker threads and answered "not known yet" at once, so the
  review is decided per ``onUnknownRequirement`` and the next replica finds the config. The
  watch cache's runtimes and services warm it (:meth:`BackgroundResolver.warm`).

Failures are configs with an ``error`` (cached briefly), so a registry outage costs one
attempt per image per ``error_ttl``, never a delay of any review beyond the budget.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Protocol

from cudasched.knowledge.imageconfig import ImageConfig
from cudasched.registry.cache import ConfigCache
from cudasched.registry.client import Platform, RegistryClient, RegistryError
from cudasched.vocab.errors import InputError

__all__ = ["BackgroundResolver", "OnDemandSource", "ResolverObserver", "resolve_one"]

log = logging.getLogger(__name__)


def resolve_one(client: RegistryClient, image: str, platform: Platform) -> tuple[ImageConfig, str]:
    """``image``'s config, or one carrying the error; and the outcome word (``ok`` or the
    :class:`RegistryError` kind, ``invalid`` for a string that is not an image reference)."""
    try:
        return client.resolve(image, platform), "ok"
    except RegistryError as exc:
        return ImageConfig(image.strip(), platform=str(platform), error=str(exc)), exc.kind
    except InputError as exc:
        return ImageConfig(image.strip(), platform=str(platform), error=str(exc)), "invalid"


class OnDemandSource:
    """Resolve each image the first time it is asked for, and remember it (one CLI run)."""

    def __init__(self, client: RegistryClient, platform: Platform | None = None) -> None:
        self.client = client
        self.platform = platform if platform is not None else Platform()
        self.resolved: dict[str, ImageConfig] = {}

    def config_for(self, image: str) -> ImageConfig | None:
        found = self.resolved.get(image)
        if found is None:
            found = self.resolved[image] = resolve_one(self.client, image, self.platform)[0]
        return found


class ResolverObserver(Protocol):
    """What the webhook counts (metrics): each look-up and each resolution."""

    def looked_up(self, result: str) -> None: ...  # hit, waited, queued, in_flight, dropped

    def resolved(self, outcome: str, seconds: float) -> None: ...


class _Silent:
    def looked_up(self, result: str) -> None:
        return None

    def resolved(self, outcome: str, seconds: float) -> None:
        return None


class BackgroundResolver:
    """The webhook's :class:`ConfigSource` (see the module's docstring). Thread-safe."""

    def __init__(
        self,
        client: RegistryClient,
        cache: ConfigCache,
        *,
        platform: Platform | None = None,
        budget_seconds: float = 0.05,
        workers: int = 2,
        max_queued: int = 1024,
        observer: ResolverObserver | None = None,
    ) -> None:
        if budget_seconds < 0 or workers < 1 or max_queued < 1:
            raise InputError(
                "invalid image resolver: budget_seconds >= 0, workers and max_queued >= 1 "
                f"(got {budget_seconds}, {workers}, {max_queued})"
            )
        self.client = client
        self.cache = cache
        self.platform = platform if platform is not None else Platform()
        self.budget_seconds = budget_seconds
        self.max_queued = max_queued
        self.observer: ResolverObserver = observer if observer is not None else _Silent()
        self._key = str(self.platform)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cudasched-image")
        self._inflight: dict[str, Future[ImageConfig]] = {}
        self._lock = threading.Lock()
        self._closed = False

    # ------------------------------------------------------------------ ConfigSource

    def config_for(self, image: str) -> ImageConfig | None:
        found = self.cache.get(image, self._key)
        if found is not None:
            self.observer.looked_up("hit")
            return found
        with self._lock:
            future = self._inflight.get(image)
        if future is None:
            queued = self.submit(image)
            self.observer.looked_up("queued" if queued is not None else "dropped")
            return None
        try:
            config = future.result(timeout=self.budget_seconds)
        except FutureTimeout:
            self.observer.looked_up("in_flight")
            return None
        except Exception:  # a worker never raises; a cancelled future on shutdown may
            self.observer.looked_up("in_flight")
            return None
        self.observer.looked_up("waited")
        return config

    # ------------------------------------------------------------------ the queue

    def submit(self, image: str) -> Future[ImageConfig] | None:
        """Queue ``image`` unless it is being resolved already (then that future) or the
        queue is full or closed (``None``)."""
        with self._lock:
            found = self._inflight.get(image)
            if found is not None:
                return found
            if self._closed or len(self._inflight) >= self.max_queued:
                return None
            future = self._pool.submit(self._resolve, image)
            self._inflight[image] = future
        future.add_done_callback(lambda _f, key=image: self._done(key))
        return future

    def warm(self, images: Iterable[str]) -> int:
        """Queue every image not cached (runtimes and services of the watch cache); how many
        were queued."""
        queued = 0
        for image in dict.fromkeys(i.strip() for i in images if isinstance(i, str) and i.strip()):
            if self.cache.get(image, self._key) is None and self.submit(image) is not None:
                queued += 1
        return queued

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is being resolved (tests, benchmarks); whether it got there."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._lock:
                pending = list(self._inflight.values())
            if not pending:
                return True
            for future in pending:
                try:
                    future.result(timeout=max(0.0, end - time.monotonic()))
                except Exception:
                    break
        with self._lock:
            return not self._inflight

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()

    def _done(self, image: str) -> None:
        with self._lock:
            self._inflight.pop(image, None)

    def _resolve(self, image: str) -> ImageConfig:
        started = time.perf_counter()
        config, outcome = resolve_one(self.client, image, self.platform)
        self.cache.put(image, self._key, config)
        self.observer.resolved(outcome, time.perf_counter() - started)
        if config.error:
            log.info("image config of %s not read: %s", image, config.error)
        return config
