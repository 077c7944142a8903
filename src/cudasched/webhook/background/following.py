"""The webhook following a published knowledge bundle: checked in the background, swapped in
between reviews, never waited for by one.

A :class:`~cudasched.registry.following.BundleFollower` checks ``knowledge.reference`` every
``knowledge.intervalSeconds`` in a thread of its own. For a bundle that passed every check,
:class:`FollowedKnowledge` builds, still in that thread, what the webhook answers with: the
image table (the bundle's rows, the settings' ``imageOverrides`` and ``imageMirrors`` in front)
and, through the ``build`` hook the server's assembly sets, a new admission (a new
:class:`~cudasched.webhook.admission.admitter.Admitter`, so a new rule context, placer memo,
decision memo and remembered answers: nothing remembered under one bundle answers under
another). Only then is the bundle swapped in, and each listener told (the app's admission
replaced in one assignment, the cluster snapshot rebuilt with the new knowledge, the
background audit run at once). A review reads the app's admission once, when it starts, so
it finishes with the knowledge it started with. What cannot be built refuses the bundle
(``content``) and the last good one stays.

A swap that lowers a toolkit's minimum driver is logged as a warning naming each one; the
background audit, woken by the swap, reports the admitted pods whose placement it moves
(``placement-moved``).

With ``server.workers`` > 1 each worker process follows on its own (docs/design.md).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cudasched.knowledge.following import FollowOutcome, FollowResult, lowered_minimums

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.bundlecheck import BundleKnowledge
    from cudasched.knowledge.images import ImageTable
    from cudasched.knowledge.provenance import Provenance
    from cudasched.registry.following import BundleFollower
    from cudasched.settings.config import WebhookConfig
    from cudasched.webhook.background.knowledgereport import KnowledgeReporter

__all__ = ["FollowedKnowledge", "FollowerFactory", "Judging", "judging_with"]

log = logging.getLogger(__name__)

#: The longest error a ``/readyz`` line quotes.
_DETAIL_CHARS = 300


@dataclass(frozen=True, slots=True)
class Judging:
    """The knowledge the webhook judges with and the image table admission reads with it (the
    bundle's rows with the settings' overrides and mirrors in front; the image resolver is
    added by the server's assembly)."""

    knowledge: BundleKnowledge
    images: ImageTable

    @property
    def kb(self) -> KnowledgeBase:
        return self.knowledge.kb

    @property
    def provenance(self) -> Provenance:
        return self.knowledge.kb.provenance


def judging_with(config: WebhookConfig, knowledge: BundleKnowledge) -> Judging:
    """``knowledge`` with the image table of ``config`` over it (an ``InputError`` when the
    settings' overrides do not hold under it)."""
    from cudasched.knowledge.images import ImageTable

    images = ImageTable.from_config(config, kb=knowledge.kb, base=knowledge.images)
    return Judging(knowledge, images)


class FollowerFactory(Protocol):
    """Makes the follower of a reference in the process that runs it
    (``cli/knowledgesource.FollowPlan`` is the production one)."""

    @property
    def reference(self) -> str: ...

    def follower(
        self,
        initial: BundleKnowledge,
        *,
        interval_seconds: float,
        on_outcome: Callable[[FollowOutcome], None] | None = None,
        prepare: Callable[[BundleKnowledge], None] | None = None,
    ) -> BundleFollower: ...


#: Told of each swap: the new judging and what ``build`` made of it (``None`` without one).
Listener = Callable[[Judging, Any], None]


class FollowedKnowledge:
    """The knowledge one server process judges with, following ``plan``'s reference (``None``:
    the knowledge it started with, said but never checked again); ``notes`` are what reading
    it at start said (a refused bundle, a last good one used instead), logged at :meth:`start`.

    ``current`` is read without a lock (one attribute, replaced whole). The server's assembly
    sets ``build`` (what to answer with, from a :class:`Judging`) and ``reporter``, and adds
    listeners with :meth:`on_swap`; :meth:`start` and :meth:`stop` run on the server's event
    loop (its lifespan)."""

    def __init__(
        self,
        config: WebhookConfig,
        initial: BundleKnowledge,
        plan: FollowerFactory | None = None,
        *,
        interval_seconds: float | None = None,
        notes: Sequence[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.notes = tuple(notes)
        self.current = judging_with(config, initial)
        self.plan = plan
        self.interval = (
            interval_seconds if interval_seconds is not None else config.knowledge.interval_seconds
        )
        self.build: Callable[[Judging], Any] | None = None
        self.reporter: KnowledgeReporter | None = None
        self.follower: BundleFollower | None = None
        self.last: FollowOutcome | None = None
        self._clock = clock
        self._listeners: list[Listener] = []
        self._prepared: tuple[BundleKnowledge, Judging, Any] | None = None
        self._swapping = threading.Lock()

    def on_swap(self, listener: Listener) -> None:
        """Tell ``listener`` of each swap, in the follower's thread, after the ones before."""
        self._listeners.append(listener)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Say the knowledge in use (in the log, after what reading it noted: ``notes``), and
        follow the reference from now on (a thread of its own; the first check at once)."""
        for note in self.notes:
            log.warning("%s", note)
        log.info("judging with %s", self.current.provenance.describe())
        if self.reporter is not None:
            self.reporter.start(asyncio.get_running_loop())
            self.reporter.in_use(self.current.provenance)
        if self.plan is None or self.follower is not None:
            return
        self.follower = self.plan.follower(
            self.current.knowledge,
            interval_seconds=self.interval,
            on_outcome=self._outcome,
            prepare=self._prepare,
        )
        self.follower.start()

    async def stop(self) -> None:
        """Stop following (a check in flight is waited for a few seconds, off the loop)."""
        follower, self.follower = self.follower, None
        if follower is not None:
            await asyncio.to_thread(follower.stop)
        if self.reporter is not None:
            self.reporter.stop()

    # ------------------------------------------------------------------ the follower's hooks

    def _prepare(self, knowledge: BundleKnowledge) -> None:
        """Build what answers with ``knowledge`` before it is swapped in (what raises refuses
        it)."""
        judging = judging_with(self.config, knowledge)
        built = self.build(judging) if self.build is not None else None
        self._prepared = (knowledge, judging, built)

    def _outcome(self, outcome: FollowOutcome) -> None:
        self.last = outcome
        if outcome.result is FollowResult.UPDATED:
            self._swap(outcome)
        if self.reporter is not None:
            self.reporter.observe(outcome)

    def _swap(self, outcome: FollowOutcome) -> None:
        """Put the prepared knowledge in use, when it is still what the follower holds (two
        checks racing: the later one's knowledge is the one kept)."""
        with self._swapping:
            prepared, follower = self._prepared, self.follower
            knowledge = outcome.followed.knowledge
            if prepared is None or prepared[0] is not knowledge:
                return
            if follower is not None and follower.current is not knowledge:
                return
            before, (_, judging, built) = self.current, prepared
            self.current = judging
            self._prepared = None
            for listener in self._listeners:
                try:
                    listener(judging, built)
                except Exception:  # one listener's failure must not keep the others stale
                    log.exception("a listener of the knowledge swap failed")
            if self.reporter is not None:
                self.reporter.in_use(judging.provenance)
        lowered = lowered_minimums(before.kb, judging.kb)
        if lowered:
            log.warning(
                "knowledge swapped in with lower toolkit minimums (%s): %s; the background "
                "audit (cudasched audit) reports the admitted pods whose placement it moves",
                "; ".join(lowered),
                outcome.message,
            )
        else:
            log.info("knowledge swapped in: %s", outcome.message)

    # ------------------------------------------------------------------ readiness

    def detail(self, today: datetime.date | None = None) -> list[str]:
        """The lines ``/readyz`` adds: the knowledge in use and, when following, the last
        check (failures never make the webhook unready: it answers with the last good
        knowledge)."""
        today = today if today is not None else datetime.datetime.now(datetime.UTC).date()
        lines = [f"knowledge: {_described(self.current.provenance, today)}"]
        if self.plan is None:
            return lines
        every = f"following {self.plan.reference} every {self.interval:g}s"
        last, follower = self.last, self.follower
        if last is None or follower is None:
            return [*lines, f"{every}: not checked yet"]
        state = follower.state
        checked = state.checked
        ago = f"{max(0.0, self._clock() - checked):.0f}s ago" if checked is not None else "now"
        said = f"last check {ago}: {last.result.value}"
        if not state.healthy:
            said += f" ({state.reason}): {state.error[:_DETAIL_CHARS]}"
            said += f"; {state.failures} failed in a row, answering with the last good knowledge"
        return [*lines, f"{every}; {said}"]


def _described(provenance: Provenance, today: datetime.date | None) -> str:
    text = provenance.describe(today)
    return f"{text} ({provenance.digest})" if provenance.digest else text
