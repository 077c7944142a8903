"""Compiled terms in a normal form: each term as one range (or set) per label, empty terms
and repeats dropped, two ORs of terms ANDed, terms that lie inside another dropped (their nodes
are admitted anyway), and the ranges written back as ``Gt``/``Lt``/``In`` expressions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched.placement.schemeterms import Expr, Term, between, in_

if TYPE_CHECKING:
    pass

__all__ = [
    "Ranges",
    "and_bound",
    "and_ranges",
    "and_values",
    "int_bounds",
    "normal_terms",
    "set_values",
    "to_ranges",
]


@dataclass(frozen=True, slots=True)
class _Range:  # hashable: terms are de-duplicated by their ranges
    """What a term asks of one label: an integer range (inclusive, None unbounded) or a set."""

    lo: int | None = None
    hi: int | None = None
    values: frozenset[Any] | None = None

    def __and__(self, other: _Range) -> _Range | None:
        if self.values is not None or other.values is not None:
            sets = [r.values for r in (self, other) if r.values is not None]
            values = frozenset.intersection(*sets)
            ranges = [r for r in (self, other) if r.values is None]
            values = frozenset(v for v in values if all(r.holds(v) for r in ranges))
            return _Range(values=values) if values else None
        lo = max((b for b in (self.lo, other.lo) if b is not None), default=None)
        hi = min((b for b in (self.hi, other.hi) if b is not None), default=None)
        if lo is not None and hi is not None and lo > hi:
            return None
        if hi is not None and hi < 0:
            return None
        return _Range(lo, hi)

    def holds(self, value: Any) -> bool:
        if self.values is not None:
            return value in self.values
        if not isinstance(value, int):
            return False
        return (self.lo is None or value >= self.lo) and (self.hi is None or value <= self.hi)

    def within(self, other: _Range) -> bool:
        if self.values is not None:
            return all(other.holds(v) for v in self.values)
        if other.values is not None:
            return False
        low = other.lo is None or (self.lo is not None and self.lo >= other.lo)
        high = other.hi is None or (self.hi is not None and self.hi <= other.hi)
        return low and high


def _range_of(expr: Expr) -> _Range:
    op, values = expr["operator"], expr["values"]
    if op == "Gt":
        return _Range(lo=int(values[0]) + 1)
    if op == "Lt":
        return _Range(hi=int(values[0]) - 1)
    assert op == "In", expr
    parsed = [int(v) if v.isdigit() else v for v in values]
    return _Range(values=frozenset(parsed))


def _term_ranges(exprs: list[Expr]) -> dict[str, _Range] | None:
    """A term as one range per key, in the order keys first appear; None when it is empty."""
    out: dict[str, _Range] = {}
    for expr in exprs:
        mine = _range_of(expr)
        have = out.get(expr["key"])
        both = mine if have is None else have & mine
        if both is None:
            return None
        out[expr["key"]] = both
    return out


def _emit(ranges: dict[str, _Range]) -> list[Expr]:
    exprs: list[Expr] = []
    for key, r in ranges.items():
        if r.values is not None:
            ints = sorted(v for v in r.values if isinstance(v, int))
            strs = sorted(v for v in r.values if not isinstance(v, int))
            exprs.append(in_(key, [*ints, *strs]))
            continue
        exprs += between(key, r.lo if r.lo is not None else 0, r.hi)
    return exprs


def _within(small: dict[str, _Range], big: dict[str, _Range]) -> bool:
    return all(key in small and small[key].within(r) for key, r in big.items())


Ranges = dict[str, _Range]


def to_ranges(terms: list[list[Expr]]) -> list[Ranges]:
    """Each term as one range per key; empty terms dropped, equal ones once."""
    out: list[Ranges] = []
    seen: set[frozenset[tuple[str, _Range]]] = set()
    for exprs in terms:
        ranges = _term_ranges(exprs)
        if ranges is None:
            continue
        identity = frozenset(ranges.items())
        if identity not in seen:
            seen.add(identity)
            out.append(ranges)
    return out


def int_bounds(ranges: Ranges, key: str) -> tuple[int | None, int | None] | None:
    """The integer range a term asks of ``key`` (inclusive, None unbounded); None when the
    term does not mention ``key`` or asks a set of it."""
    r = ranges.get(key)
    if r is None or r.values is not None:
        return None
    return r.lo, r.hi


def set_values(ranges: Ranges, key: str) -> frozenset[Any] | None:
    """The set of values a term asks of ``key`` (``In``); None when it asks a range or nothing."""
    r = ranges.get(key)
    return None if r is None else r.values


def and_bound(ranges: Ranges, key: str, lo: int | None, hi: int | None) -> Ranges | None:
    """The term ANDed with ``lo <= key <= hi``; None when that leaves it empty."""
    return _and_term(ranges, {key: _Range(lo, hi)})


def and_values(ranges: Ranges, key: str, values: Iterable[int]) -> Ranges | None:
    """The term ANDed with ``key In values``; None when that leaves it empty."""
    return _and_term(ranges, {key: _Range(values=frozenset(values))})


def _and_term(a: Ranges, b: Ranges) -> Ranges | None:
    """One product of two terms, or None when some label's ranges do not meet."""
    both = dict(a)
    for key, r in b.items():
        have = both.get(key)
        merged = r if have is None else have & r
        if merged is None:
            return None
        both[key] = merged
    return both


def and_ranges(left: list[Ranges], right: list[Ranges]) -> list[Ranges]:
    """The conjunction of two ORs of terms, empty and repeated products dropped."""
    out: list[Ranges] = []
    seen: set[frozenset[tuple[str, _Range]]] = set()
    for a in left:
        for b in right:
            both = _and_term(a, b)
            if both is None:
                continue
            identity = frozenset(both.items())
            if identity not in seen:
                seen.add(identity)
                out.append(both)
    return out


def normal_terms(terms: list[Ranges]) -> list[Term]:
    """Terms with each key's expressions merged (already), terms that lie inside another one
    dropped (their nodes are admitted anyway); first-seen order is kept."""
    kept: list[tuple[Ranges, frozenset[str]]] = []
    for ranges in terms:
        keys = frozenset(ranges)
        # A term can only lie inside one whose keys are a subset of its own.
        if any(k <= keys and _within(ranges, r) for r, k in kept):
            continue
        kept = [(r, k) for r, k in kept if not (keys <= k and _within(r, ranges))]
        kept.append((ranges, keys))
    out: list[Term] = []
    for ranges, _keys in kept:
        term = {"matchExpressions": _emit(ranges)}
        if term not in out:
            out.append(term)
    return out
