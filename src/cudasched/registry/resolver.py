"""Image configs as resolution asks for them (a ``ConfigSource``, see knowledge.imageconfig).

Two sources over one :class:`~cudasched.registry.client.RegistryClient`:

* :class:`OnDemandSource` (the CLI's ``--resolve-images`` and ``cudasched image``): asks the
  registry the first time an image is looked at, waits for the answer, remembers it for the
  run; ``cudasched image`` has it read the image's SBOM and layers too when the config names
  no CUDA;
* :class:`BackgroundResolver` (the webhook): never on the hot path. A look-up is answered from
  the cache; an image already being resolved is waited for at most ``budget_seconds``; any
  other image is queued for the worker threads and answered "not known yet" at once, so the
  review is decided per ``onUnknownRequirement`` and the next replica finds the config. The
  watch cache's runtimes and services warm it (:meth:`BackgroundResolver.warm`), with their
  own pull scopes where the look-up for everybody fails. When a config names no CUDA, its
  SBOM and layers are read by :class:`~cudasched.registry.layerreads.LayerReads` (its own
  workers, once per digest), and the contents join the cached config when the read ends.
  With :class:`~cudasched.registry.factstore.SharedFacts`, what the cluster keeps for a digest
  (another replica's layer read, a person's override) completes each config read, and what
  this replica reads is kept there for the others.

Failures are configs with an ``error`` (cached briefly), so a registry outage costs one
attempt per image per ``error_ttl``, never a delay of any review beyond the budget; an
exception nothing expected is such a failure too (kind ``internal``).

With a :class:`~cudasched.registry.pullsecrets.PullSecretReader` (``imageResolver.pullSecrets``)
a look-up made for one workload (:meth:`BackgroundResolver.for_scope`) may use the pull
secrets of its namespace. A config read with them is cached for that namespace only (any pod
of the namespace could name the same Secret; no pod of another namespace sees it); one read
without them (the scope's secrets hold nothing for the registries asked) is cached for all. A
failure is the answer of its pull scope only (and of everybody when read without credentials):
a pod that names no secret, or a wrong one, never stands in for one whose secret may read the
image, in flight or cached.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Protocol

from cudasched.knowledge.imageconfig import ConfigSource, ImageConfig, PullScope, config_cuda
from cudasched.knowledge.imagecontents import ImageContents
from cudasched.knowledge.imagefacts import with_facts
from cudasched.registry.auth import Keychain
from cudasched.registry.client import Platform, RegistryClient
from cudasched.registry.configcache import ConfigCache
from cudasched.registry.distribution import RegistryError
from cudasched.registry.factstore import SharedFacts
from cudasched.registry.layerreads import LayerReads, wait_drained
from cudasched.registry.layers import LayerBudget, read_contents
from cudasched.registry.pullsecrets import PullSecretReader
from cudasched.vocab.errors import InputError

__all__ = [
    "CREDENTIAL_FAILURES",
    "INTERNAL",
    "LAYER_MODES",
    "BackgroundResolver",
    "OnDemandSource",
    "ResolverObserver",
    "resolve_one",
]

log = logging.getLogger(__name__)

#: Failures a workload's credentials may turn into an answer: the registry refused the
#: anonymous look-up (401/403), or hid a private repository behind a 404. A timeout, an
#: unreachable host or a bad answer is the same with any credentials.
CREDENTIAL_FAILURES = frozenset({"unauthorized", "not-found"})

#: The error kind of a look-up that ended in an exception nothing expected (see
#: :meth:`BackgroundResolver._resolve`).
INTERNAL = "internal"


def _credentials_may_help(config: ImageConfig) -> bool:
    return not config.ok and config.error_kind in CREDENTIAL_FAILURES


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
        failed = ImageConfig(image.strip(), platform=str(platform), error=str(exc))
        return replace(failed, error_kind=exc.kind), exc.kind
    except InputError as exc:
        failed = ImageConfig(image.strip(), platform=str(platform), error=str(exc))
        return replace(failed, error_kind="invalid"), "invalid"


#: When a look-up also reads what the image carries (its SBOM and layers,
#: :mod:`cudasched.registry.layers`): ``auto`` when its config names no CUDA, ``always``, or
#: ``never``.
LAYER_MODES = ("auto", "always", "never")


class OnDemandSource:
    """Resolve each image the first time it is asked for, and remember it (one CLI run).
    ``layers`` (:data:`LAYER_MODES`) says when its SBOM and layers are read too, within
    ``budget``."""

    def __init__(
        self,
        client: RegistryClient,
        platform: Platform | None = None,
        *,
        layers: str = "never",
        budget: LayerBudget | None = None,
    ) -> None:
        if layers not in LAYER_MODES:
            raise InputError(f"invalid layers {layers!r}: expected one of {', '.join(LAYER_MODES)}")
        self.client = client
        self.platform = platform if platform is not None else Platform()
        self.layers = layers
        self.budget = budget
        self.resolved: dict[str, ImageConfig] = {}

    def config_for(self, image: str) -> ImageConfig | None:
        found = self.resolved.get(image)
        if found is None:
            found = resolve_one(self.client, image, self.platform)[0]
            if found.ok and self._reads_layers(found):
                contents = read_contents(self.client, image, self.platform, budget=self.budget)
                found = replace(found, contents=contents)
            self.resolved[image] = found
        return found

    def _reads_layers(self, config: ImageConfig) -> bool:
        if self.layers == "always":
            return True
        return self.layers == "auto" and config_cuda(config)[0] is None


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
        layers: LayerReads | None = None,
        shared: SharedFacts | None = None,
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
        self.layers = layers
        self.shared = shared
        self._key = str(self.platform)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cudasched-image")
        # In flight by (image, pull scope key): "" for a look-up without a workload's secrets.
        self._inflight: dict[tuple[str, str], Future[ImageConfig]] = {}
        # What runs with a look-up's answer before it is let go (warming's scoped look-ups).
        self._then: dict[tuple[str, str], list[Callable[[ImageConfig], object]]] = {}
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
        key = (image, self._scope_key(scope) if scope is not None else "")
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
        that credentials may change (:data:`CREDENTIAL_FAILURES`) does not stand for a scope
        that may have them (it is asked with them)."""
        shared = self.cache.get(image, self._key)
        if scope is None or self.pull_secrets is None:
            return shared
        own = self.cache.get(image, self._scoped_key(scope))
        if own is not None:
            return own
        failed = self.cache.get(image, self._scope_key(scope))
        if failed is not None:
            return failed
        return None if shared is None or _credentials_may_help(shared) else shared

    def _scoped_key(self, scope: PullScope) -> str:
        """Where a config read with a namespace's credentials is kept (its namespace's)."""
        return f"{self._key} namespace={scope.namespace}"

    def _scope_key(self, scope: PullScope) -> str:
        """Where one pull scope's failure is kept, and its look-up's key in flight."""
        return f"{self._key} scope={(scope.namespace, scope.secrets, scope.service_account)!r}"

    # ------------------------------------------------------------------ the queue

    def submit(
        self,
        image: str,
        scope: PullScope | None = None,
        *,
        then: Callable[[ImageConfig], object] | None = None,
    ) -> Future[ImageConfig] | None:
        """Queue ``image`` (for ``scope``'s namespace) unless it is being resolved already
        (then that future) or the queue is full or closed (``None``). ``then`` is called
        with the answer before the look-up counts as finished (so :meth:`wait_idle` also
        waits for what it queues)."""
        if self.pull_secrets is None:
            scope = None
        key = (image, self._scope_key(scope) if scope is not None else "")
        with self._lock:
            found = self._inflight.get(key)
            if found is not None:
                if then is not None:
                    self._then.setdefault(key, []).append(then)
                return found
            if self._closed or len(self._inflight) >= self.max_queued:
                return None
            future = self._pool.submit(self._resolve, image, scope)
            self._inflight[key] = future
            if then is not None:
                self._then[key] = [then]
        future.add_done_callback(partial(self._done, key))
        return future

    def warm(self, wanted: Iterable[tuple[str, PullScope | None]]) -> int:
        """Queue the images of the watch cache's runtimes and services, each with the pull
        scope of an object that names it (``None``: none, e.g. a ClusterServingRuntime's);
        how many were queued now.

        An image is first looked up for everybody, with the webhook's own credentials only:
        a public image costs one look-up and no Secret read however many namespaces run it.
        Only where the registry refused it or hid it (:data:`CREDENTIAL_FAILURES`), and the
        resolver reads pull secrets, is it looked up again for each scope that names it (the
        namespace's answer, cached for it), as a review of one of its pods would."""
        scopes: dict[str, list[PullScope]] = {}
        for image, scope in wanted:
            if not isinstance(image, str) or not image.strip():
                continue
            found = scopes.setdefault(image.strip(), [])
            if scope is not None and self.pull_secrets is not None and scope not in found:
                found.append(scope)
        queued = 0
        for image, its in scopes.items():
            shared = self.cache.get(image, self._key)
            if shared is not None:
                queued += self._warm_scoped(image, its, shared)
                continue
            then = None
            if its:
                then = partial(self._warm_scoped, image, tuple(its))
            if self.submit(image, then=then) is not None:
                queued += 1
        return queued

    def _warm_scoped(self, image: str, scopes: Iterable[PullScope], shared: ImageConfig) -> int:
        """After the look-up for everybody: where credentials may help, each scope's own."""
        if not _credentials_may_help(shared):
            return 0
        queued = 0
        for scope in scopes:
            if self._cached(image, scope) is None and self.submit(image, scope) is not None:
                queued += 1
        return queued

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is being resolved and no layer is being read (tests,
        benchmarks); whether it got there."""
        end = time.monotonic() + timeout
        configs = self._wait_configs(end)
        if self.layers is None:
            return configs
        return self.layers.wait_idle(max(0.0, end - time.monotonic())) and self._wait_configs(end)

    def _wait_configs(self, end: float) -> bool:
        return wait_drained(self._lock, self._inflight, end)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.layers is not None:
            self.layers.close()
        if self.shared is not None:
            self.shared.close()
        self.client.close()
        if self.pull_secrets is not None:
            self.pull_secrets.close()

    def _done(self, key: tuple[str, str], future: Future[ImageConfig]) -> None:
        """Run what waits on the answer, then let the look-up go (under the lock only when
        nothing more waits, so a follow-up added meanwhile is not lost)."""
        while True:
            with self._lock:
                thens = self._then.pop(key, None)
                if not thens:
                    self._inflight.pop(key, None)
                    return
            if future.cancelled() or future.exception() is not None:
                continue
            for then in thens:
                try:
                    then(future.result())
                except Exception:
                    log.exception("a follow-up of the look-up of %s failed", key[0])

    def _resolve(self, image: str, scope: PullScope | None = None) -> ImageConfig:
        """One look-up on a worker thread. Whatever it raises (a registry answer no part of
        the client expected, a bug) ends as a failure of kind ``internal``, cached like any
        other, so the registry is not asked again at every review; logged once with the
        exception's type and where it was raised, not its message (which could carry a URL
        or a header)."""
        started = time.perf_counter()
        try:
            return self._resolve_checked(image, scope, started)
        except Exception as exc:
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            where = f"{Path(frame.filename).name}:{frame.lineno}"
            failed = ImageConfig(
                image.strip(),
                platform=str(self.platform),
                error=f"internal error ({type(exc).__name__}) reading the image config",
                error_kind=INTERNAL,
            )
            key = self._key if scope is None else self._scope_key(scope)
            self.cache.put(image, key, failed)
            self.observer.resolved(INTERNAL, time.perf_counter() - started)
            log.warning(
                "image config of %s not read: unexpected %s at %s",
                image,
                type(exc).__name__,
                where,
            )
            return failed

    def _resolve_checked(self, image: str, scope: PullScope | None, started: float) -> ImageConfig:
        keychain = None
        if scope is not None and self.pull_secrets is not None:
            try:
                hosts = self.client.hosts_of(image)
            except InputError:  # not an image reference: resolve_one says so
                hosts = []
            chain = self.pull_secrets.keychain_for(scope) if hosts else Keychain()
            if any(chain.get(host) is not None for host in hosts):
                keychain = chain
            else:
                shared = self.cache.get(image, self._key)
                if shared is not None and not shared.ok:
                    # No credentials to add to the failed look-up for everybody: its answer
                    # stands for this scope too, without asking the registry again.
                    self.cache.put(image, self._scope_key(scope), shared)
                    return shared
        config, outcome = resolve_one(self.client, image, self.platform, keychain)
        if keychain is not None and scope is not None:
            # Read with the namespace's credentials: that namespace's answer only, and a
            # failure this scope's only (another pod's secrets may still read it).
            key = self._scoped_key(scope) if config.ok else self._scope_key(scope)
        else:
            key = self._key
            if scope is not None and not config.ok:
                # The scope has nothing more to try until the failure expires.
                self.cache.put(image, self._scope_key(scope), config)
        config = self._with_layers(image, key, self._with_shared(config), keychain)
        self.cache.put(image, key, config)
        if self.shared is not None:
            self.shared.record(config, image)
        self.observer.resolved(outcome, time.perf_counter() - started)
        if config.error:
            log.info("image config of %s not read: %s", image, config.error)
        return config

    def _with_shared(self, config: ImageConfig) -> ImageConfig:
        """``config`` completed with what the cluster keeps for its digest: another
        replica's contents (remembered, so they are not read again) and a person's override."""
        if self.shared is None or not config.ok:
            return config
        stored = self.shared.lookup(config.digest)
        if stored is None:
            return config
        if stored.contents is not None and self.layers is not None:
            self.layers.remember(replace(stored.contents, digest=config.digest))
        return with_facts(config, stored)

    def _with_layers(
        self, image: str, key: str, config: ImageConfig, keychain: Keychain | None
    ) -> ImageConfig:
        """``config`` with what its image carries when its config names no CUDA (and no
        person corrected it): the contents already read for its digest, else a layer read
        queued, whose contents join the cached config when it ends (the review path never
        waits for it)."""
        if self.layers is None or not config.ok or not config.digest:
            return config
        if config.correction is not None or config.contents is not None:
            return config
        if config_cuda(config)[0] is not None:
            return config
        known = self.layers.known(config.digest)
        if known is not None:
            return replace(config, contents=known)
        self.layers.request(
            image, config.digest, keychain, partial(self._layers_read, image, key, config)
        )
        return config

    def _layers_read(
        self, image: str, key: str, config: ImageConfig, contents: ImageContents
    ) -> None:
        """A layer read ended: its contents join the config it was read for, if the image's
        cached config is still of that digest (a moved tag is resolved again)."""
        if contents.digest != config.digest:
            return
        cached = self.cache.get(image, key)
        if cached is not None and cached.digest != config.digest:
            return
        read = replace(cached or config, contents=contents)
        self.cache.put(image, key, read)
        if self.shared is not None:
            self.shared.record(read, image)


class _Scoped:
    """One workload's view of the resolver: its look-ups carry its pull scope."""

    __slots__ = ("_resolver", "_scope")

    def __init__(self, resolver: BackgroundResolver, scope: PullScope) -> None:
        self._resolver = resolver
        self._scope = scope

    def config_for(self, image: str) -> ImageConfig | None:
        return self._resolver.config_for(image, self._scope)
