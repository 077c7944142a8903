"""House rules for the tests themselves, checked.

A test whose every ``assert`` sits inside a loop passes when the loop runs zero times: a sample
cluster that lost its nodes, a table read as empty, a generator that yields nothing would all
go unnoticed. So every test function must assert at least once outside a data-driven loop,
typically the number of items it compared (``assert compared == 21``). The scan is of the
syntax tree, so it is cheap and runs over every test module.

What counts as "only inside loops": an ``assert`` in the body of a ``for`` or ``while``, or an
``assert all(...)`` / ``assert not any(...)`` over a comprehension (both true on nothing).
A loop over a table written in the test (a non-empty tuple, list, set or dict display, a name
bound once in the test to one, or ``range(N)``) cannot run zero times, so it does not count.
Asserts in functions nested in a test are the nested function's, not the test's. A test may
opt out with the comment ``# house: loop-asserts only`` and a reason anywhere in it, for the
rare case where counting means nothing (a parametrized case that may rightly see no items,
counted by another test).
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
OPT_OUT = "# house: loop-asserts only"

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _is_display(node: ast.expr) -> bool:
    """A non-empty literal collection without ``*`` unpacking, or ``range(<positive int>)``."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return bool(node.elts) and not any(isinstance(e, ast.Starred) for e in node.elts)
    if isinstance(node, ast.Dict):
        return bool(node.keys) and None not in node.keys
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
        last = node.args[-1] if len(node.args) == 1 else None
        return isinstance(last, ast.Constant) and isinstance(last.value, int) and last.value > 0
    return False


class _Tables:
    """Names a test binds exactly once, to a display (``cases = [...]``)."""

    def __init__(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        bound: dict[str, list[ast.expr | None]] = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        bound.setdefault(target.id, []).append(node.value)
            elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(
                node.target, ast.Name
            ):
                bound.setdefault(node.target.id, []).append(getattr(node, "value", None))
            elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                for name in ast.walk(node.target):
                    if isinstance(name, ast.Name):
                        bound.setdefault(name.id, []).append(None)
        self.names = {
            name
            for name, values in bound.items()
            if len(values) == 1 and values[0] is not None and _is_display(values[0])
        }

    def fixed(self, iterable: ast.expr) -> bool:
        """Whether a loop over ``iterable`` runs a number of times written in the test."""
        if _is_display(iterable):
            return True
        if isinstance(iterable, ast.Name):
            return iterable.id in self.names
        # cases.items() / .keys() / .values() of a table, zip/enumerate of tables
        if isinstance(iterable, ast.Call) and not iterable.keywords:
            func = iterable.func
            if isinstance(func, ast.Attribute) and func.attr in ("items", "keys", "values"):
                return not iterable.args and self.fixed(func.value)
            if isinstance(func, ast.Name) and func.id in ("enumerate", "reversed", "sorted"):
                return len(iterable.args) == 1 and self.fixed(iterable.args[0])
        return False


def _vacuous_on_nothing(test: ast.expr, tables: _Tables) -> bool:
    """``all(<comprehension>)`` or ``not any(<comprehension>)`` over data, true on nothing."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, wanted = test.operand, "any"
    else:
        wanted = "all"
    if not (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Name)
        and test.func.id == wanted
        and len(test.args) == 1
        and isinstance(test.args[0], _COMPREHENSIONS)
    ):
        return False
    return not all(tables.fixed(gen.iter) for gen in test.args[0].generators)


def _asserts(
    fn: ast.FunctionDef | ast.AsyncFunctionDef,
) -> Iterator[tuple[ast.Assert, bool]]:
    """Each ``assert`` of the test itself, and whether it sits only inside data-driven loops."""
    tables = _Tables(fn)

    def visit(node: ast.AST, looped: bool) -> Iterator[tuple[ast.Assert, bool]]:
        if isinstance(node, _NESTED):
            return
        if isinstance(node, ast.Assert):
            yield node, looped or _vacuous_on_nothing(node.test, tables)
            return
        if isinstance(node, _LOOPS):
            fixed = isinstance(node, ast.For | ast.AsyncFor) and tables.fixed(node.iter)
            for stmt in node.body:
                yield from visit(stmt, looped or not fixed)
            for stmt in node.orelse:  # runs once the loop is done, even after zero rounds
                yield from visit(stmt, looped)
            return
        for child in ast.iter_child_nodes(node):
            yield from visit(child, looped)

    for stmt in fn.body:
        yield from visit(stmt, False)


def _test_functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in tree.body:
        bodies = node.body if isinstance(node, ast.ClassDef) else [node]
        for fn in bodies:
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and fn.name.startswith(
                "test"
            ):
                yield fn


def loop_only_tests(source: str) -> list[str]:
    """Names of the test functions in ``source`` whose every assert is inside a loop."""
    lines = source.splitlines()
    found = []
    for fn in _test_functions(ast.parse(source)):
        start = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
        if any(OPT_OUT in line for line in lines[start - 1 : fn.end_lineno]):
            continue
        asserts = list(_asserts(fn))
        if asserts and all(looped for _, looped in asserts):
            found.append(fn.name)
    return found


def _modules() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_every_test_asserts_outside_its_loops() -> None:
    modules = _modules()
    offenders = [
        f"{path.relative_to(TESTS.parent)}::{name}"
        for path in modules
        for name in loop_only_tests(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], "assert how many items were compared:\n" + "\n".join(offenders)
    assert len(modules) >= 80  # the scan saw the suite, not an empty glob


def test_opt_outs_stay_rare() -> None:
    modules = [path for path in _modules() if path != Path(__file__).resolve()]
    used = [path.name for path in modules if OPT_OUT in path.read_text(encoding="utf-8")]
    assert len(used) <= 2, used
    assert len(modules) >= 80


_PLANTED = {
    "only_in_a_loop": """
        def test_x(items):
            for item in items:
                assert item.ok
    """,
    "only_in_a_while": """
        def test_x(queue):
            while queue:
                assert queue.pop()
    """,
    "all_over_data": """
        def test_x(items):
            assert all(item.ok for item in items)
    """,
    "not_any_over_data": """
        def test_x(items):
            assert not any(item.bad for item in items)
    """,
    "data_inside_a_table": """
        def test_x(kb):
            for policy in ("strict", "minor-compat"):
                for row in kb.rows(policy):
                    assert row.ok
    """,
    "in_a_method": """
        class TestX:
            def test_x(self, items):
                for item in items:
                    assert item
    """,
    "a_table_rebound": """
        def test_x(more):
            cases = [1, 2]
            cases = more
            for case in cases:
                assert case
    """,
}

_FINE = {
    "counted": """
        def test_x(items):
            for item in items:
                assert item.ok
            assert len(items) == 21
    """,
    "a_written_table": """
        def test_x(selector):
            for driver, ok in [("550.54.14", True), ("545.23.08", False)]:
                assert selector.match(driver) is ok
    """,
    "a_named_table": """
        def test_x(selector):
            cases = {"a": True, "b": False}
            for name, ok in cases.items():
                assert selector.match(name) is ok
    """,
    "a_range": """
        def test_x(adm):
            for _ in range(2):
                assert adm.review() is None
    """,
    "any_is_not_vacuous": """
        def test_x(warnings):
            assert any("no NFD" in w for w in warnings)
    """,
    "no_assert_at_all": """
        def test_x(items):
            for item in items:
                check(item)
    """,
    "nested_helper": """
        def test_x(items):
            def check(item):
                assert item
            for item in items:
                check(item)
            assert items
    """,
    "opted_out": f"""
        def test_x(items):
            {OPT_OUT} (every item is counted by another test)
            for item in items:
                assert item
    """,
    "not_a_test": """
        def helper(items):
            for item in items:
                assert item
    """,
}


@pytest.mark.parametrize("name", sorted(_PLANTED))
def test_a_planted_loop_only_test_is_found(name: str) -> None:
    source = textwrap.dedent(_PLANTED[name])
    assert loop_only_tests(source) == ["test_x"]


@pytest.mark.parametrize("name", sorted(_FINE))
def test_a_test_that_asserts_outside_its_loops_passes(name: str) -> None:
    source = textwrap.dedent(_FINE[name])
    assert loop_only_tests(source) == []
