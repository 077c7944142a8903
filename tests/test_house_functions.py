"""House rule, checked: functions a person can hold.

Every function and method in ``src/cudasched`` is measured: its length in lines (from the
``def`` line to its last line, decorators left out) and its cyclomatic complexity as radon
counts it (branches, loops, ``except`` clauses, boolean operators, comprehension ``if``\\s,
``assert``\\s; a nested function is measured on its own and does not add to its parent). The
limits are :data:`MAX_LINES` and :data:`MAX_COMPLEXITY`.

Functions that broke a limit when the rule came in are listed in :data:`OFFENDERS` with the
numbers they had then. The list only shrinks:

* a function not on the list that breaks a limit fails (cut it into named steps);
* a listed function that grew past its recorded numbers fails;
* a listed function that no longer breaks any limit fails until its entry is removed, so a fix
  is recorded where the next reader looks;
* a listed name that no longer exists fails (renamed or moved: update the name, keep the
  numbers).

A listed function that got better but still breaks a limit passes; lower its numbers when you
touch it. Names are ``module:qualified.name`` (``Class.method``, ``outer.inner``).
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from radon.visitors import ComplexityVisitor

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "cudasched"

MAX_LINES = 80
MAX_COMPLEXITY = 20

# (lines, complexity) of each function over a limit when the rule came in. Only shrinks.
OFFENDERS: dict[str, tuple[int, int]] = {
    "cudasched.cli.agent:agent": (90, 4),
    "cudasched.cli.audit:audit_cmd": (83, 7),
    "cudasched.cli.explain:explain_cmd": (123, 16),
    "cudasched.cli.manifests:manifests_command": (114, 8),
    "cudasched.cli.nodetemplate:node_template_cmd": (125, 13),
    "cudasched.cli.plan:plan_cmd": (123, 14),
    "cudasched.cli.recommend:recommend_cmd": (88, 11),
    "cudasched.cli.webhook:webhook_cmd": (95, 6),
    "cudasched.explain.grouping:summarise": (26, 22),
    "cudasched.install.agent:daemonset_objects": (118, 22),
    "cudasched.install.agent:node_restriction_objects": (81, 1),
    "cudasched.install.registration:webhook_configuration": (84, 5),
    "cudasched.webhook.metrics:WebhookMetrics.__init__": (90, 2),
}


@dataclass(frozen=True, slots=True)
class Measure:
    name: str
    lines: int
    complexity: int

    def over(self) -> bool:
        return self.lines > MAX_LINES or self.complexity > MAX_COMPLEXITY


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def measure(source: str, module: str) -> Iterator[Measure]:
    """Every function and method of ``source``, nested ones included, measured."""

    def walk(node: ast.AST, prefix: str) -> Iterator[Measure]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _FUNCTIONS):
                name = f"{prefix}{child.name}"
                assert child.end_lineno is not None
                (block,) = ComplexityVisitor.from_ast(child).functions
                yield Measure(
                    f"{module}:{name}", child.end_lineno - child.lineno + 1, block.complexity
                )
                yield from walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(ast.parse(source), "")


def measure_package(root: Path = PACKAGE) -> dict[str, Measure]:
    measured: dict[str, Measure] = {}
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        for m in measure(path.read_text(encoding="utf-8"), module):
            measured[m.name] = m
    return measured


def problems(measured: Mapping[str, Measure], listed: Mapping[str, tuple[int, int]]) -> list[str]:
    """What breaks the rule, one sentence each (empty when the house is in order)."""
    out: list[str] = []
    limits = f"at most {MAX_LINES} lines and complexity {MAX_COMPLEXITY}"
    for name, m in sorted(measured.items()):
        if name in listed or not m.over():
            continue
        out.append(
            f"{name}: {m.lines} lines, complexity {m.complexity}; the house allows {limits}: "
            "cut it into named steps"
        )
    for name, (lines, complexity) in sorted(listed.items()):
        m = measured.get(name)
        if m is None:
            out.append(f"{name} is listed in OFFENDERS but not found: renamed or moved? update it")
        elif m.lines > max(lines, MAX_LINES) or m.complexity > max(complexity, MAX_COMPLEXITY):
            out.append(
                f"{name} got worse: {m.lines} lines, complexity {m.complexity}, recorded "
                f"({lines}, {complexity}); the list only shrinks"
            )
        elif not m.over():
            out.append(
                f"{name} now keeps the limits ({m.lines} lines, complexity {m.complexity}): "
                "remove it from OFFENDERS"
            )
    return out


def test_functions_keep_the_limits() -> None:
    measured = measure_package()
    assert len(measured) > 1000  # the scan found the package
    assert problems(measured, OFFENDERS) == []


def test_the_list_holds_only_offenders() -> None:
    held = [
        n for n, (lines, cc) in OFFENDERS.items() if lines <= MAX_LINES and cc <= MAX_COMPLEXITY
    ]
    assert held == []


_PLANTED = textwrap.dedent(
    """
    def long_one(x):
    {body}
        return x

    class Box:
        def tangled(self, x):
    {branches}
            return x

        def fine(self):
            def inner(y):
                return y
            return inner
    """
).format(
    body="\n".join(f"    x += {i}" for i in range(MAX_LINES)),
    branches="\n".join(
        f"        if x == {i}:\n            x = {i + 1}" for i in range(MAX_COMPLEXITY)
    ),
)


def test_a_planted_long_and_a_planted_tangled_function_fail() -> None:
    measured = {m.name: m for m in measure(_PLANTED, "planted")}
    assert sorted(measured) == [
        "planted:Box.fine",
        "planted:Box.fine.inner",
        "planted:Box.tangled",
        "planted:long_one",
    ]
    assert measured["planted:long_one"].lines == MAX_LINES + 2
    assert measured["planted:Box.tangled"].complexity == MAX_COMPLEXITY + 1
    found = problems(measured, {})
    assert [p.split(":")[1] for p in found] == ["Box.tangled", "long_one"]


def test_a_listed_function_may_not_grow_and_must_leave_once_fixed() -> None:
    measured = {m.name: m for m in measure(_PLANTED, "planted")}
    listed = {
        "planted:long_one": (MAX_LINES + 1, 1),  # grew by a line
        "planted:Box.tangled": (40, MAX_COMPLEXITY + 1),  # unchanged: passes
        "planted:Box.fine": (100, 30),  # keeps the limits now
        "planted:gone": (100, 30),  # renamed or removed
    }
    found = problems(measured, listed)
    assert len(found) == 3
    assert "planted:Box.fine now keeps the limits" in found[0]
    assert found[1].startswith("planted:gone is listed in OFFENDERS but not found")
    assert found[2].startswith("planted:long_one got worse")
