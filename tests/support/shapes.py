"""Arbitrary JSON, and objects with it planted where a reader looks.

What the API server would never send still reaches cudasched: a fuzzer, a hand-written
snapshot, a CRD without a schema. The readers that must never raise on such input (the pod
view, the pull scope, admission) are tested by placing any JSON value (numbers, strings,
lists and mappings, nested) at each field they read, one field at a time or several at once.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

__all__ = ["JSON", "planted", "planted_many"]

#: Any JSON value, small: scalars, and lists and mappings of them (the unhashable shapes a
#: reader that assumes a string trips on), nested a few levels.
JSON: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


def planted(obj: Any, path: Sequence[str | int], value: Any) -> Any:
    """A deep copy of ``obj`` with ``value`` at ``path`` (keys of mappings, indexes of lists).
    Missing or wrongly shaped parents on the way are replaced by mappings (a list index past
    the end appends), so the value always lands; the empty path replaces the whole object."""
    if not path:
        return copy.deepcopy(value)
    out = copy.deepcopy(obj) if isinstance(obj, dict | list) else {}
    parent: Any = out
    for key, child_key in itertools.pairwise(path):
        parent = _child(parent, key, dict if isinstance(child_key, str) else list)
    _put(parent, path[-1], copy.deepcopy(value))
    return out


def planted_many(obj: Any, grafts: Sequence[tuple[Sequence[str | int], Any]]) -> Any:
    """``obj`` with each ``(path, value)`` of ``grafts`` planted in turn."""
    for path, value in grafts:
        obj = planted(obj, path, value)
    return obj


def _child(parent: Any, key: str | int, kind: type) -> Any:
    current = _get(parent, key)
    if not isinstance(current, kind):
        current = kind()
        _put(parent, key, current)
    return current


def _get(parent: Any, key: str | int) -> Any:
    if isinstance(parent, dict):
        return parent.get(key)
    if isinstance(parent, list) and isinstance(key, int) and key < len(parent):
        return parent[key]
    return None


def _put(parent: Any, key: str | int, value: Any) -> None:
    if isinstance(parent, dict):
        parent[key] = value
    elif isinstance(parent, list) and isinstance(key, int):
        if key < len(parent):
            parent[key] = value
        else:
            parent.append(value)
