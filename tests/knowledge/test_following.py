"""Following a bundle as a state machine: the knowledge in use changes only to a bundle that
passed every check, whatever the checks find."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.knowledge.bundlecheck import BundleKnowledge, Sourced, builtin_source, knowledge_of
from cudasched.knowledge.following import (
    FollowResult,
    due,
    failed,
    lowered_minimums,
    started,
    unchanged,
    updated,
)
from tests.support.bundles import builtin_tables, bundle_of, planted

REF = "registry.example.com/cudasched/knowledge:stable"


def _knowledge(names: list[str], version: str) -> BundleKnowledge:
    return knowledge_of(Sourced(planted(names, version=version), REF))


BUILTIN = knowledge_of(builtin_source())
NEWER = _knowledge(["new-release"], "2026.09.15")


def test_an_update_swaps_the_knowledge_and_says_from_what_to_what() -> None:
    state = started(REF, BUILTIN)
    assert due(state, 0.0, 300.0) and state.healthy
    outcome = updated(state, NEWER, "sha256:" + "2" * 64, now=10.0)
    assert outcome.result is FollowResult.UPDATED
    assert outcome.followed.knowledge is NEWER and outcome.followed.digest.endswith("2" * 64)
    was = f"was {BUILTIN.provenance.version}"
    assert "now knowledge 2026.09.15" in outcome.message and was in outcome.message
    assert not due(outcome.followed, 309.0, 300.0) and due(outcome.followed, 310.0, 300.0)
    again = unchanged(outcome.followed, 320.0)
    assert again.result is FollowResult.UNCHANGED and again.followed.knowledge is NEWER


def test_a_failure_keeps_the_knowledge_in_use_and_counts() -> None:
    state = updated(started(REF, BUILTIN), NEWER, "sha256:" + "2" * 64, 0.0).followed
    first = failed(state, FollowResult.REFUSED, "content", "toolkits.yaml: bad", 1.0)
    second = failed(first.followed, FollowResult.UNREACHABLE, "timeout", "no answer", 2.0)
    assert second.followed.knowledge is NEWER and second.followed.failures == 2
    assert second.reason == "timeout" and not second.followed.healthy
    assert "still answering with knowledge 2026.09.15" in second.message
    assert unchanged(second.followed, 3.0).followed.failures == 0
    with pytest.raises(ValueError, match="not a failure"):
        failed(state, FollowResult.UPDATED, "", "", 1.0)


def test_a_lowered_minimum_is_said_when_the_bundle_is_swapped_in() -> None:
    tables = builtin_tables()
    row = next(r for r in tables["toolkits.yaml"]["releases"] if r["version"] == "12.4.0")
    row["min_driver"] = "545.23.06"
    lower = knowledge_of(Sourced(bundle_of(tables), REF))
    assert lowered_minimums(BUILTIN.kb, lower.kb) == ["CUDA 12.4: 550.54.14 -> 545.23.06"]
    outcome = updated(started(REF, BUILTIN), lower, "sha256:" + "3" * 64, 0.0)
    assert "lowered: CUDA 12.4: 550.54.14 -> 545.23.06" in outcome.message
    assert lowered_minimums(lower.kb, BUILTIN.kb) == []


STEPS = st.lists(st.sampled_from(["updated", "unchanged", "refused", "unreachable"]), max_size=12)


@settings(max_examples=60, deadline=None)
@given(STEPS)
def test_the_knowledge_in_use_is_always_the_last_bundle_that_passed(steps: list[str]) -> None:
    state = started(REF, BUILTIN)
    last_good, failures = BUILTIN, 0
    for i, step in enumerate(steps):
        if step == "updated":
            candidate = NEWER if last_good is BUILTIN else BUILTIN
            outcome = updated(state, candidate, f"sha256:{i:064d}", float(i))
            last_good, failures = candidate, 0
        elif step == "unchanged":
            outcome, failures = unchanged(state, float(i)), 0
        else:
            outcome = failed(state, FollowResult(step), "x", "y", float(i))
            failures += 1
        state = outcome.followed
    assert state.knowledge is last_good and state.failures == failures
