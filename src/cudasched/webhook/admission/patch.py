"""Minimal RFC 6902 JSON patches between an admitted object and our mutation of it.

The API server applies a webhook's patch with evanphx/json-patch, and a patch that does not
apply fails the user's request with HTTP 500 *even under* ``failurePolicy: Ignore``. So every
patch built here only ever:

* ``add``\\s a key whose parent exists in the original (a missing parent is added whole, never
  walked into: ``add /spec/affinity`` rather than ``add /spec/affinity/nodeAffinity``);
* ``replace``\\s or ``remove``\\s a key that exists in the original;
* escapes ``~`` and ``/`` in keys (``nvidia.com/gpu`` -> ``nvidia.com~1gpu``).

The diff is limited to the subtrees the admission touches (annotations, affinity), so a field
we never changed can never appear in the patch, and keys are visited in sorted order so the
same input always gives byte-identical output.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Op",
    "Scope",
    "diff",
    "escape",
    "pointer",
    "unescape",
]

Op = dict[str, Any]

_MISSING: Any = object()


def escape(token: str) -> str:
    """RFC 6901 reference-token escaping (``~`` first, or ``/`` -> ``~1`` -> ``~01``)."""
    return token.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    """Inverse of :func:`escape` (``~1`` first, so ``~01`` stays ``~1``)."""
    return token.replace("~1", "/").replace("~0", "~")


def pointer(parts: Iterable[str | int]) -> str:
    """A JSON pointer from unescaped path parts: ``("metadata", "annotations", "a/b")`` ->
    ``/metadata/annotations/a~1b``; ``()`` -> ``""`` (the whole document)."""
    tokens = []
    for part in parts:
        token = part if type(part) is str else str(part)
        tokens.append(escape(token) if "~" in token or "/" in token else token)
    return "/" + "/".join(tokens) if tokens else ""


@dataclass(frozen=True, slots=True)
class Scope:
    """A subtree to compare: ``path`` (unescaped keys from the root) and ``depth``, how many
    levels of mapping keys below it are diffed one by one before a differing value is replaced
    whole. ``depth=1`` on ``metadata.annotations`` gives one op per changed annotation;
    ``depth=1`` on ``spec.affinity`` replaces ``nodeAffinity`` as one value and leaves
    ``podAffinity`` alone."""

    path: tuple[str, ...]
    depth: int = 1


def _get(doc: Any, parts: Sequence[str]) -> Any:
    cur = doc
    for part in parts:
        if not (type(cur) is dict or isinstance(cur, Mapping)) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


#: Below this nesting :func:`_same` recurses (fastest in CPython); deeper it walks its own stack.
_RECURSION_DEPTH = 64


def _same(a: Any, b: Any, depth: int = 0) -> bool:
    """JSON equality: Python's ``==`` says ``1 == True == 1.0``, JSON does not. A value
    compared with itself costs nothing; any nesting depth is fine (past
    :data:`_RECURSION_DEPTH` levels the comparison continues without recursion)."""
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is dict or isinstance(a, Mapping):
        if len(a) != len(b) or a.keys() != b.keys():
            return False
        if depth >= _RECURSION_DEPTH:
            return _same_deep(a, b)
        # A loop, not all(generator): one frame per level instead of two, and faster.
        for key, value in a.items():  # noqa: SIM110
            if not _same(value, b[key], depth + 1):
                return False
        return True
    if kind is list or kind is tuple:
        if len(a) != len(b):
            return False
        if depth >= _RECURSION_DEPTH:
            return _same_deep(a, b)
        for x, y in zip(a, b, strict=True):  # noqa: SIM110
            if not _same(x, y, depth + 1):
                return False
        return True
    return bool(a == b)


def _same_deep(a: Any, b: Any) -> bool:
    """:func:`_same` with an explicit stack, for deeply nested values."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        if type(x) is not type(y):
            return False
        if isinstance(x, Mapping):
            if x.keys() != y.keys():
                return False
            stack.extend((v, y[k]) for k, v in x.items())
        elif isinstance(x, list | tuple):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif not bool(x == y):
            return False
    return True


def _diff_value(path: tuple[str, ...], old: Any, new: Any, depth: int, out: list[Op]) -> None:
    if old is _MISSING and new is _MISSING:
        return
    if new is _MISSING:
        out.append({"op": "remove", "path": pointer(path)})
        return
    if old is _MISSING:
        out.append({"op": "add", "path": pointer(path), "value": new})
        return
    if _same(old, new):
        return
    if (
        depth > 0
        and (type(old) is dict or isinstance(old, Mapping))
        and (type(new) is dict or isinstance(new, Mapping))
    ):
        for key in sorted(set(old) | set(new)):
            before, after = old.get(key, _MISSING), new.get(key, _MISSING)
            if before is not after:  # a value shared by both (most of them) is unchanged
                _diff_value((*path, key), before, after, depth - 1, out)
        return
    out.append({"op": "replace", "path": pointer(path), "value": new})


def diff(
    original: Mapping[str, Any],
    mutated: Mapping[str, Any],
    scopes: Iterable[Scope],
    at: str = "",
) -> list[Op]:
    """Operations that turn ``original`` into ``mutated`` within ``scopes`` (and nothing else),
    their paths under ``at`` (the pointer of ``original`` in a larger document; ``""``: none).

    For each scope the nearest ancestor missing from ``original`` is added whole, so the patch
    applies whatever the original looked like. Scopes are processed in the given order; they
    must not overlap. An empty list means "nothing changed": the caller must then send no
    patch at all.
    """
    out: list[Op] = []
    for scope in scopes:
        path = scope.path
        # Find the first prefix of `path` that is missing (or not an object) in the original,
        # walking the original down the path once.
        parent_old: Any = original
        for i in range(1, len(path) + 1):
            if not (type(parent_old) is dict or isinstance(parent_old, Mapping)):
                # Cannot happen for i == 1 with a mapping document; deeper, the previous
                # iteration already handled a non-object and stopped.
                break
            part = path[i - 1]
            if part not in parent_old:
                new = _get(mutated, path[:i])
                if new is not _MISSING:
                    out.append({"op": "add", "path": pointer(path[:i]), "value": new})
                break
            old = parent_old[part]
            if i == len(path):
                _diff_value(path, old, _get(mutated, path), scope.depth, out)
            elif not (type(old) is dict or isinstance(old, Mapping)):
                # A scalar (or null) where we need an object: replace it whole.
                new = _get(mutated, path[:i])
                if new is _MISSING:
                    out.append({"op": "remove", "path": pointer(path[:i])})
                elif not _same(new, old):
                    out.append({"op": "replace", "path": pointer(path[:i]), "value": new})
                break
            parent_old = old
    if at:
        for op in out:
            op["path"] = at + op["path"]
    return out
