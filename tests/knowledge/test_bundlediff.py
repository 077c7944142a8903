"""What changed between two bundles: exactly the planted changes, in words."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.knowledge.bundlediff import TOPICS, diff_tables
from tests.support.bundles import (
    NEW_610,
    PLANTS,
    builtin_610,
    builtin_tables,
    expected_rows,
    planted,
)


def _rows(names: list[str]) -> set[tuple[str, str, str]]:
    changes = diff_tables(builtin_tables(), planted(names).documents())
    return {(c.topic, c.kind, c.name) for c in changes}


def test_equal_bundles_have_no_changes() -> None:
    assert diff_tables(builtin_tables(), builtin_tables()) == []


@settings(max_examples=12, deadline=None)
@given(st.sets(st.sampled_from(sorted(PLANTS))))
def test_the_diff_lists_exactly_the_planted_changes(names: set[str]) -> None:
    assert _rows(sorted(names)) == expected_rows(names)


def test_each_change_reads_as_a_platform_engineer_says_it() -> None:
    changes = diff_tables(builtin_tables(), planted(sorted(PLANTS)).documents())
    text = {c.name: c.text for c in changes}
    assert text["R610 newest release"].startswith(
        f"R610 newest release: release {builtin_610()} -> {NEW_610}; released "
    )
    assert text["CUDA 13.4.1"].startswith("CUDA 13.4.1: minimum driver none -> 615.20.01")
    turing = [g for g in builtin_tables()["gpus.yaml"]["gpus"] if g.get("arch") == "Turing"]
    assert text["Turing (cc 7.5)"].startswith(
        f"Turing (cc 7.5): last driver branch ongoing -> R610 (moves {len(turing)} GPUs: T4,"
    )
    assert text["GPU NVIDIA Z100"] == ("GPU NVIDIA Z100: new (compute capability 9.0; arch Hopper)")
    topics = [c.topic for c in changes]
    assert topics == sorted(topics, key=TOPICS.index), "grouped in the topics' order"
    assert {c.to_dict()["change"] for c in changes} == {"added", "changed"}


def test_rows_moved_within_a_list_are_no_change_and_removed_rows_are() -> None:
    new = builtin_tables()
    new["gpus.yaml"]["gpus"].reverse()
    assert diff_tables(builtin_tables(), new) == []
    gone = new["gpus.yaml"]["gpus"].pop()
    (change,) = diff_tables(builtin_tables(), new)
    assert change.kind == "removed" and change.text == f"GPU {gone['product']}: removed"


def test_sections_without_row_names_and_sources() -> None:
    new = builtin_tables()
    operator = new["gpu-operator.yaml"]
    operator["precompiled"]["branches"] = [*operator["precompiled"]["branches"], 620]
    new["drivers.yaml"]["sources"]["ours"] = "https://example.com/ours"
    old = builtin_tables()
    changes = diff_tables(old, copy.deepcopy(new))
    assert [(c.topic, c.kind) for c in changes] == [
        ("GPU Operator", "changed"),
        ("Sources", "added"),
    ]
    assert changes[0].text.startswith("gpu-operator precompiled: branches [")
