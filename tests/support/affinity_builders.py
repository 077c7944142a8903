"""Builders for node-selector expressions and terms, shared by the affinity tests."""

from __future__ import annotations

from typing import Any


def expr(key: str, op: str, *values: object) -> dict[str, Any]:
    """A node-selector requirement; values are written as strings, and omitted when none are
    given (Exists, DoesNotExist), as the API server stores them."""
    out: dict[str, Any] = {"key": key, "operator": op}
    if values:
        out["values"] = [str(v) for v in values]
    return out


def term(*exprs: dict[str, Any]) -> dict[str, Any]:
    return {"matchExpressions": list(exprs)}
