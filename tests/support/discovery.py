"""A discovery source for the agent's tests: it answers the outcomes it was given in order
(facts, or a :class:`~cudasched.nodes.hostfacts.DiscoveryError` it raises), the last one for
every probe after, and counts its probes."""

from __future__ import annotations

from cudasched.nodes.hostfacts import DiscoveryError, DriverFacts

__all__ = ["Outcomes"]


class Outcomes:
    """``Outcomes(facts)`` probes ``facts`` forever; ``Outcomes(a, error, b)`` answers ``a``,
    raises ``error``, then answers ``b`` from then on."""

    def __init__(self, *outcomes: DriverFacts | DiscoveryError) -> None:
        if not outcomes:
            raise ValueError("give at least one outcome")
        self.outcomes = outcomes
        self.calls = 0

    def probe(self) -> DriverFacts:
        outcome = self.outcomes[min(self.calls, len(self.outcomes) - 1)]
        self.calls += 1
        if isinstance(outcome, DiscoveryError):
            raise outcome
        return outcome
