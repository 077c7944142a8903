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

With a :class:`~cudasched.registry.pullsecrets.PullSecretReader` (``imageResolver.pullSecrets``)
a look-up made for one workload (:meth:`BackgroundResolver.for_scope`) may use the pull
secrets of its namespace. A config read with them is cached for that namespace only (any pod
of the namespace could name the same Secret; no pod of another namespace sees it); one read
without them (the scope's secrets hold nothing for the registries asked) is cached for all.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Protocol

from cudasched.knowledge.imageconfig import ConfigSource, ImageConfig, PullScope
from cudasched.registry.auth import Keychain
from cudasched.registry.cache import ConfigCache
from cudasched.registry.client import Platform, RegistryClient, RegistryError
from cudasched.registry.pullsecrets import PullSecretReader
from cudasched.vocab.errors import InputError

__all__ = ["BackgroundResolver", "OnDemandSource", "ResolverObserver", "resolve_one"]

log = logging.getLogger(__name__)


def resolve_one(
    client: RegistryClient,
    image: str,
    platform: Platform,
    keychain: Keychain | None = None,
) -> tuple[ImageConfig, str]:
    """``image``'s config, or one carrying the error; and the outcome word (``ok`` or the
    :class:`RegistryError` kind, ``invalid`` for a string that is not an image reference).
    ``keychain``: a workload's credentials, in front of the client's."""
    try:
        return client.resolve(image, platform, keychain=keychain), "ok"
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
        pull_secrets: PullSecretReader | None = None,
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
        self.pull_secrets = pull_secrets
        self._key = str(self.platform)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cudasched-image")
        # In flight by (image, namespace): "" for a look-up without a workload's secrets.
        self._inflight: dict[tuple[str, str], Future[ImageConfig]] = {}
        self._lock = threading.Lock()
        self._closed = False

    # ------------------------------------------------------------------ ConfigSource

    def for_scope(self, scope: PullScope) -> ConfigSource:
        """The source for one workload's look-ups: with its pull secrets when the resolver
        reads them, else this resolver itself."""
        return self if self.pull_secrets is None else _Scoped(self, scope)

    def config_for(self, image: str, scope: PullScope | None = None) -> ImageConfig | None:
        found = self._cached(image, scope)
        if found is not None:
            self.observer.looked_up("hit")
            return found
        key = (image, scope.namespace if scope is not None else "")
        with self._lock:
            future = self._inflight.get(key)
        if future is None:
            queued = self.submit(image, scope)
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

    def _cached(self, image: str, scope: PullScope | None) -> ImageConfig | None:
        """The namespace's own answer first, then one for everybody; a failure for everybody
        does not stand for a scope that may have credentials (it is asked with them)."""
        shared = self.cache.get(image, self._key)
        if scope is None or self.pull_secrets is None:
            return shared
        own = self.cache.get(image, self._scoped_key(scope))
        if own is not None:
            return own
        return shared if shared is not None and shared.ok else None

    def _scoped_key(self, scope: PullScope) -> str:
        return f"{self._key} namespace={scope.namespace}"

    # ------------------------------------------------------------------ the queue

    def submit(self, image: str, scope: PullScope | None = None) -> Future[ImageConfig] | None:
        """Queue ``image`` (for ``scope``'s namespace) unless it is being resolved already
        (then that future) or the queue is full or closed (``None``)."""
        if self.pull_secrets is None:
            scope = None
        key = (image, scope.namespace if scope is not None else "")
        with self._lock:
            found = self._inflight.get(key)
            if found is not None:
                return found
            if self._closed or len(self._inflight) >= self.max_queued:
                return None
            future = self._pool.submit(self._resolve, image, scope)
            self._inflight[key] = future
        future.add_done_callback(lambda _f, done=key: self._done(done))
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
        if self.pull_secrets is not None:
            self.pull_secrets.close()

    def _done(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._inflight.pop(key, None)

    def _resolve(self, image: str, scope: PullScope | None = None) -> ImageConfig:
        started = time.perf_counter()
        keychain = None
        if scope is not None and self.pull_secrets is not None:
            try:
                hosts = self.client.hosts_of(image)
            except InputError:  # not an image reference: resolve_one says so
                hosts = []
            chain = self.pull_secrets.keychain_for(scope) if hosts else Keychain()
            if any(chain.get(host) is not None for host in hosts):
                keychain = chain
        config, outcome = resolve_one(self.client, image, self.platform, keychain)
        if keychain is not None and scope is not None:
            # Read with the namespace's credentials: that namespace's answer only.
            self.cache.put(image, self._scoped_key(scope), config)
        else:
            self.cache.put(image, self._key, config)
            if scope is not None and not config.ok:
                # The namespace has nothing more to try until the failure expires.
                self.cache.put(image, self._scoped_key(scope), config)
        self.observer.resolved(outcome, time.perf_counter() - started)
        if config.error:
            log.info("image config of %s not read: %s", image, config.error)
        return config


class _Scoped:
    """One workload's view of the resolver: its look-ups carry its pull scope."""

    __slots__ = ("_resolver", "_scope")

    def __init__(self, resolver: BackgroundResolver, scope: PullScope) -> None:
        self._resolver = resolver
        self._scope = scope

    def config_for(self, image: str) -> ImageConfig | None:
        return self._resolver.config_for(image, self._scope)
