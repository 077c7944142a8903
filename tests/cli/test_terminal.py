"""What a command prints for a person fits the terminal and cuts no word, at 80 columns and at
200: a table is never wider than the terminal and never folds a pool, workload or node name, a
reason code, a version or a label key across lines; where no such table fits, each row becomes
a record. (``explain`` and ``audit`` have their own tests of the same promise.)"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

import pytest
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.cli.demo import run_demo
from cudasched.cli.terminal import table_widths
from cudasched.cluster.snapshot import bundled_snapshot

AS_OF = ("--as-of", "2026-12-01")
runner = CliRunner()


def _run(columns: int, *args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": str(columns)})
    assert result.exit_code in (0, 1), result.output
    return result.stdout


def _words(texts: Iterable[str]) -> set[str]:
    return {word for text in texts for word in text.split()}


def _unbreakable(line: str) -> bool:
    """One word, or a footnote's number and one word (a link): wrapping cannot shorten it."""
    words = line.split()
    return len(words) == 1 or (len(words) == 2 and re.fullmatch(r"\[\d+\]", words[0]) is not None)


def _cut_or_too_long(out: str, columns: int, words: set[str]) -> tuple[list[str], list[str]]:
    """The words that do not appear whole, and the lines wider than the terminal that could
    have been wrapped."""
    missing = sorted(w for w in words if w not in out)
    long = [line for line in out.splitlines() if len(line) > columns and not _unbreakable(line)]
    return missing, long


def _json(*args: str) -> dict[str, object]:
    result = runner.invoke(app, [*args, "-o", "json"])
    assert result.exit_code in (0, 1), result.output
    doc = json.loads(result.stdout)
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize("columns", [80, 200])
def test_plan_drivers_cuts_no_name(columns: int) -> None:
    doc = _json("plan-drivers", *AS_OF)
    pools = doc["pools"]
    assert isinstance(pools, list) and len(pools) == 13
    words = _words(
        [p["name"] for p in pools]
        + [p["gpu"] for p in pools]
        + [p["action"] for p in pools if p["action"]]
        + [p["why"][0] for p in pools]
    )
    out = _run(columns, "plan-drivers", *AS_OF)
    assert _cut_or_too_long(out, columns, words) == ([], [])


@pytest.mark.parametrize("columns", [80, 200])
def test_recommend_driver_cuts_no_reason(columns: int) -> None:
    args = ("recommend-driver", "--gpu", "A100", "--cuda", "12.8", *AS_OF)
    doc = _json(*args)
    rejected = doc["rejected"]
    assert isinstance(rejected, list) and rejected
    words = _words([r["why"] for r in rejected] + list(doc["reasons"]) + list(doc["warnings"]))
    out = _run(columns, *args)
    assert _cut_or_too_long(out, columns, words) == ([], [])


@pytest.mark.parametrize("columns", [80, 200])
def test_explain_wide_cuts_no_node_name_or_reason(columns: int) -> None:
    args = ("explain", "isvc/llama3-8b", "-n", "team-nlp")
    nodes = _json(*args)["nodes"]
    assert isinstance(nodes, list) and len(nodes) == 21
    reasons = [r for n in nodes for r in n["reasons"]]
    words = _words([n["node"] for n in nodes] + [r["code"] for r in reasons])
    words |= _words(r["message"] for r in reasons)
    out = _run(columns, *args, "-o", "wide")
    assert _cut_or_too_long(out, columns, words) == ([], [])


@pytest.mark.parametrize("columns", [80, 200])
def test_check_cuts_no_reason(columns: int) -> None:
    args = ("check", "--gpu", "K80", "--driver", "470.82.01", "--cuda", "12.4")
    doc = _json(*args)
    reasons = doc["reasons"]
    assert isinstance(reasons, list) and len(reasons) == 2
    words = _words([r["message"] for r in reasons] + [r["code"] for r in reasons])
    out = _run(columns, *args)
    assert _cut_or_too_long(out, columns, words) == ([], [])


@pytest.mark.parametrize("columns", [80, 200])
@pytest.mark.parametrize("topic", ["gpus", "images", "cuda", "drivers", "frameworks"])
def test_knowledge_cuts_no_fact(topic: str, columns: int) -> None:
    rows = _json("knowledge", topic)["rows"]
    assert isinstance(rows, list) and rows
    words = _words(str(v) for row in rows for k, v in row.items() if k != "source" and v)
    out = _run(columns, "knowledge", topic)
    assert _cut_or_too_long(out, columns, words) == ([], [])


@pytest.mark.parametrize("columns", [80, 200])
def test_the_demo_cuts_no_name(columns: int) -> None:
    rows, _, _ = run_demo(bundled_snapshot())
    words = _words(
        [r.workload for r in rows]
        + [r.runtime for r in rows]
        + [r.source for r in rows]
        + [w.removeprefix("cudasched: ") for r in rows for w in r.warnings]
    )
    out = _run(columns, "demo")
    assert _cut_or_too_long(out, columns, words) == ([], [])


def test_table_widths_give_every_column_its_longest_word() -> None:
    headers = ["pool", "why"]
    rows = [["a100-sxm4-80gb-r535-ubuntu22.04", "serves 12 of 12 " * 8]]
    widths = table_widths(headers, rows, 60)
    assert widths is not None
    assert widths[0] == len(rows[0][0]) and sum(widths) + 3 * 2 + 1 == 60
    assert table_widths(headers, [["x", "short"]], 60) == [4, 5]  # as wide as it needs
    assert table_widths(headers, rows, 40) is None  # 31 + 6 + 7: records instead
