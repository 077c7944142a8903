"""A published bundle followed: its reference checked every interval, a new bundle pulled,
checked and swapped in, the knowledge in use readable at any moment without waiting.

:class:`BundleFollower` is the edge of :mod:`cudasched.knowledge.following`: it asks the
registry (:func:`~cudasched.registry.bundles.pull_bundle`, which fetches nothing but the
manifest while the reference names the bundle in use), checks what it got
(:func:`~cudasched.knowledge.bundlecheck.knowledge_of`, overlays merged on top) and hands the
result to the state machine, whose new state replaces the old one in a single assignment.
:attr:`BundleFollower.current` reads that one attribute, so a review asks for the knowledge
and gets the last good one even while a pull hangs on a slow registry; one check runs at a
time. Each outcome goes to ``on_outcome`` (the webhook counts it, says it in ``/readyz`` and
an Event).

Run it with :meth:`BundleFollower.start` (a daemon thread that checks when due) or call
:meth:`BundleFollower.poll` from a loop of one's own.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence

from cudasched.knowledge.bundle import BundleError
from cudasched.knowledge.bundlecheck import BundleKnowledge, Sourced, knowledge_of
from cudasched.knowledge.following import (
    Followed,
    FollowOutcome,
    FollowResult,
    due,
    failed,
    started,
    unchanged,
    updated,
)
from cudasched.knowledge.loading import ParsedCache
from cudasched.knowledge.signing import TrustedKey
from cudasched.registry.auth import Keychain
from cudasched.registry.bundles import pull_bundle
from cudasched.registry.client import RegistryClient
from cudasched.registry.distribution import RegistryError, repository_of
from cudasched.vocab.errors import InputError

__all__ = ["BundleFollower"]


class BundleFollower:
    """Follows ``reference`` (a tag to follow or a digest to pin) with ``client``.

    ``initial`` is the knowledge to answer with until a bundle is pulled (the built-in one,
    or a last good bundle with its digest: ``initial_digest``); ``trusted`` keys, when given,
    must have signed a bundle for it to be used; ``overlays`` are merged over every bundle;
    ``interval_seconds`` is how often the reference is checked (``owns_client``: :meth:`stop`
    closes ``client``). ``prepare`` is called with a
    bundle's knowledge after it passed every check and before it is swapped in (in the thread
    that checks); what it raises refuses the bundle: a :class:`BundleError` with its reason,
    an :class:`InputError` as ``content``."""

    def __init__(
        self,
        reference: str,
        client: RegistryClient,
        initial: BundleKnowledge,
        *,
        initial_digest: str = "",
        trusted: Sequence[TrustedKey] = (),
        overlays: Sequence[Sourced] = (),
        interval_seconds: float = 300.0,
        keychain: Keychain | None = None,
        cache: ParsedCache | None = None,
        on_outcome: Callable[[FollowOutcome], None] | None = None,
        prepare: Callable[[BundleKnowledge], None] | None = None,
        owns_client: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        repository_of(reference)  # a reference that does not parse is refused now
        if interval_seconds <= 0:
            raise InputError("a bundle's check interval must be more than 0 seconds")
        self.reference = reference.strip()
        self.client = client
        self.trusted = tuple(trusted)
        self.overlays = tuple(overlays)
        self.interval = interval_seconds
        self._keychain = keychain
        self._cache = cache
        self._on_outcome = on_outcome
        self._prepare = prepare
        self._owns_client = owns_client
        self._clock = clock
        self._state = started(self.reference, initial, initial_digest)
        self._checking = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def current(self) -> BundleKnowledge:
        """The knowledge to answer with now: never waits for a check in flight."""
        return self._state.knowledge

    @property
    def state(self) -> Followed:
        """The follower's state (what is in use, when checked, failures since)."""
        return self._state

    def check(self) -> FollowOutcome:
        """Ask the registry now (waiting for a check already in flight), swap in a new bundle
        that passes every check, keep the one in use otherwise; never raises for what the
        registry or the bundle did."""
        with self._checking:
            state = self._state
            outcome = self._outcome(state)
            self._state = outcome.followed
        if self._on_outcome is not None:
            self._on_outcome(outcome)
        return outcome

    def _outcome(self, state: Followed) -> FollowOutcome:
        now = self._clock()
        try:
            pulled = pull_bundle(
                self.client,
                self.reference,
                trusted=self.trusted,
                held=state.digest,
                keychain=self._keychain,
            )
            if pulled is None:
                return unchanged(state, now)
            source = Sourced(pulled.bundle, pulled.pinned, pulled.digest)
            knowledge = knowledge_of(source, self.overlays, self._cache)
            if self._prepare is not None:
                self._prepare(knowledge)
        except BundleError as exc:
            return failed(state, FollowResult.REFUSED, exc.reason, str(exc), now)
        except RegistryError as exc:
            return failed(state, FollowResult.UNREACHABLE, exc.kind, str(exc), now)
        except InputError as exc:  # prepare: what the new knowledge would be used for refuses it
            return failed(state, FollowResult.REFUSED, "content", str(exc), now)
        except Exception as exc:  # a follower never stops on a surprise; it is said and counted
            return failed(state, FollowResult.REFUSED, "error", f"{type(exc).__name__}: {exc}", now)
        return updated(state, knowledge, pulled.digest, now)

    def poll(self) -> FollowOutcome | None:
        """:meth:`check` when the interval has passed since the last one, else ``None``."""
        if not due(self._state, self._clock(), self.interval):
            return None
        return self.check()

    def start(self) -> None:
        """Check in a daemon thread from now on: at once, then every interval."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="cudasched-knowledge", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (a check in flight finishes first, within ``timeout``), and close
        the client when it is the follower's own."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if self._owns_client:
            self.client.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            # A failure of on_outcome's own must not end the following: the state is updated.
            with contextlib.suppress(Exception):
                self.poll()
            checked = self._state.checked
            left = self.interval - (self._clock() - checked) if checked is not None else 0.0
            self._stop.wait(max(0.01, left))
