"""Following a published bundle, as a state machine: what knowledge to answer with after each
check of the reference, and what happened, for metrics, readiness and Events.

The rule: **the knowledge in use only ever changes to a bundle that passed every check.** It
starts as the built-in knowledge (or a last good bundle kept from before); a check that finds
the reference unchanged keeps it; one that finds a new bundle that passes
(:mod:`cudasched.knowledge.bundlecheck`) swaps it in; one that cannot reach the registry, or
fetches a bundle that fails a check, keeps what was in use and counts the failure. An edge
does the pulling (:mod:`cudasched.registry.following`) and hands each outcome here; this
module never waits, fetches or reads a clock.

A new bundle may ask less of a node than the one it replaces (a toolkit's minimum driver
lowered by a corrected source): the swap still happens, as the new facts are the better ones,
but never silently: the outcome names every lowered minimum (:func:`lowered_minimums`), and the
audit reports the workloads whose placement the change would move.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from cudasched.knowledge.base import KnowledgeBase
from cudasched.knowledge.bundlecheck import BundleKnowledge
from cudasched.knowledge.records import ReleaseKind

__all__ = [
    "FollowOutcome",
    "FollowResult",
    "Followed",
    "due",
    "failed",
    "lowered_minimums",
    "started",
    "unchanged",
    "updated",
]


class FollowResult(StrEnum):
    """What one check of the reference did (a closed word for metrics)."""

    UPDATED = "updated"  # a new bundle passed every check and is in use
    UNCHANGED = "unchanged"  # the reference still names the bundle in use
    REFUSED = "refused"  # a bundle was fetched and failed a check: the one in use stays
    UNREACHABLE = "unreachable"  # the registry could not be asked: the one in use stays


@dataclass(frozen=True, slots=True)
class Followed:
    """A follower's state: the knowledge in use and its digest (``""``: not a followed bundle,
    the built-in one or one read at start), when the reference was last checked and last
    checked well (monotonic seconds), and the failures since (with the last one's reason and
    message)."""

    reference: str
    knowledge: BundleKnowledge
    digest: str = ""
    checked: float | None = None
    succeeded: float | None = None
    failures: int = 0
    reason: str = ""
    error: str = ""

    @property
    def healthy(self) -> bool:
        """Whether the last check went well (or none was made yet)."""
        return self.failures == 0


@dataclass(frozen=True, slots=True)
class FollowOutcome:
    """One check's result: what happened (``result``, ``reason``: the refusal's or the
    registry's closed word), a sentence for an Event or ``/readyz``, and the state after it."""

    result: FollowResult
    message: str
    followed: Followed
    reason: str = ""


def started(reference: str, knowledge: BundleKnowledge, digest: str = "") -> Followed:
    """The state before the first check: ``knowledge`` in use (the built-in one, or a bundle
    kept from an earlier run with its ``digest``)."""
    return Followed(reference, knowledge, digest)


def due(followed: Followed, now: float, interval: float) -> bool:
    """Whether the reference should be checked at ``now``: never checked, or ``interval``
    seconds after the last check."""
    return followed.checked is None or now - followed.checked >= interval


def unchanged(followed: Followed, now: float) -> FollowOutcome:
    """The reference still names the bundle in use."""
    state = replace(followed, checked=now, succeeded=now, failures=0, reason="", error="")
    message = f"{followed.reference} unchanged: {followed.knowledge.provenance.describe()}"
    return FollowOutcome(FollowResult.UNCHANGED, message, state)


def updated(
    followed: Followed, knowledge: BundleKnowledge, digest: str, now: float
) -> FollowOutcome:
    """A new bundle passed every check: it is in use from now on."""
    state = replace(
        followed,
        knowledge=knowledge,
        digest=digest,
        checked=now,
        succeeded=now,
        failures=0,
        reason="",
        error="",
    )
    before = followed.knowledge.provenance
    message = (
        f"{followed.reference}: now {knowledge.provenance.describe()} ({digest}), was "
        f"{before.version}"
    )
    lowered = lowered_minimums(followed.knowledge.kb, knowledge.kb)
    if lowered:
        message += f"; lowered: {'; '.join(lowered)} (cudasched audit reports placements it moves)"
    return FollowOutcome(FollowResult.UPDATED, message, state)


def failed(
    followed: Followed, result: FollowResult, reason: str, error: str, now: float
) -> FollowOutcome:
    """A check that could not reach the registry or refused what it fetched: the knowledge in
    use stays."""
    if result not in (FollowResult.REFUSED, FollowResult.UNREACHABLE):
        raise ValueError(f"not a failure: {result}")
    state = replace(
        followed, checked=now, failures=followed.failures + 1, reason=reason, error=error
    )
    verb = "refused" if result is FollowResult.REFUSED else "could not be read"
    message = (
        f"{followed.reference} {verb} ({reason}): {error}; still answering with "
        f"{followed.knowledge.provenance.describe()}"
    )
    return FollowOutcome(result, message, state, reason)


def lowered_minimums(old: KnowledgeBase, new: KnowledgeBase) -> list[str]:
    """The toolkits whose minimum driver ``new`` states lower than ``old`` (or no longer
    states), each as ``CUDA 13.4: 616.00 -> 615.20.01``: the requirements a swap lowers."""
    found: list[str] = []
    for row in old.toolkits():
        if row.kind is not ReleaseKind.GA:
            continue
        before = row.effective_min_driver
        after = new.min_driver(row.cuda)
        if before is not None and (after is None or after < before):
            found.append(f"CUDA {row.cuda.release}: {before} -> {after or 'none'}")
    return found
