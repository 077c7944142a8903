"""Kubernetes label selectors in their text form, as ``kubectl -l`` takes them, parsed and
matched the way the API server does (``k8s.io/apimachinery/pkg/labels``, ``Parse``).

Requirements are separated by commas and ANDed; each is one of:

* ``key=value``, ``key==value`` (equal), ``key!=value`` (not equal, or the key is absent);
* ``key in (v1,v2)``, ``key notin (v1,v2)`` (``notin`` also matches an absent key);
* ``key`` (the key exists), ``!key`` (it does not).

Keys and values are checked as label keys and values are (qualified names, at most 63
characters, a DNS prefix of at most 253); a bad one is an ``InputError`` that names it. An empty
selector selects everything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from cudasched.vocab.errors import InputError
from cudasched.vocab.labelsyntax import label_key_problem, label_value_ok

__all__ = ["Operator", "Requirement", "Selector", "parse_selector"]

_MAX_SELECTOR = 10_000


class Operator(StrEnum):
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator is Operator.EXISTS:
            return present
        if self.operator is Operator.DOES_NOT_EXIST:
            return not present
        if self.operator in (Operator.EQUALS, Operator.IN):
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values

    def __str__(self) -> str:
        if self.operator is Operator.EXISTS:
            return self.key
        if self.operator is Operator.DOES_NOT_EXIST:
            return f"!{self.key}"
        if self.operator in (Operator.EQUALS, Operator.NOT_EQUALS):
            return f"{self.key}{self.operator.value}{next(iter(self.values))}"
        return f"{self.key} {self.operator.value} ({','.join(sorted(self.values))})"


@dataclass(frozen=True, slots=True)
class Selector:
    """A parsed label selector: every requirement must hold."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    @property
    def is_empty(self) -> bool:
        return not self.requirements

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _split(text: str) -> list[str]:
    """The comma-separated requirements; commas inside ``( )`` belong to a value list."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _key(text: str, selector: str) -> str:
    key = text.strip()
    problem = label_key_problem(key)
    if problem is not None:
        raise InputError(f"label selector {selector!r}: {key!r} is not a label key: {problem}")
    return key


def _value(text: str, selector: str) -> str:
    value = text.strip()
    if not label_value_ok(value):
        raise InputError(
            f"label selector {selector!r}: {value!r} is not a label value (at most 63 letters, "
            "digits, '-', '_' or '.', starting and ending with a letter or digit)"
        )
    return value


_SET = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")


def _requirement(part: str, selector: str) -> Requirement:
    text = part.strip()
    if not text:
        raise InputError(f"label selector {selector!r}: an empty requirement (two commas?)")
    found = _SET.match(text)
    if found is not None:
        values = frozenset(_value(v, selector) for v in found["values"].split(","))
        op = Operator.IN if found["op"] == "in" else Operator.NOT_IN
        return Requirement(_key(found["key"], selector), op, values)
    for symbol, op in (
        ("!=", Operator.NOT_EQUALS),
        ("==", Operator.EQUALS),
        ("=", Operator.EQUALS),
    ):
        if symbol in text:
            key, _, value = text.partition(symbol)
            return Requirement(_key(key, selector), op, frozenset({_value(value, selector)}))
    if text.startswith("!"):
        return Requirement(_key(text[1:], selector), Operator.DOES_NOT_EXIST)
    return Requirement(_key(text, selector), Operator.EXISTS)


def parse_selector(text: str | None) -> Selector:
    """``text`` (``kubectl -l``'s syntax) as a :class:`Selector`; ``None`` or blank selects
    everything. An ``InputError`` names the part that does not parse."""
    if text is None or not text.strip():
        return Selector()
    if len(text) > _MAX_SELECTOR:
        raise InputError(f"label selector is {len(text):,} characters (at most {_MAX_SELECTOR:,})")
    if text.count("(") != text.count(")"):
        raise InputError(f"label selector {text!r}: unbalanced parentheses")
    return Selector(tuple(_requirement(part, text) for part in _split(text)))
