"""Copying JSON-shaped data (dicts, lists, scalars) fast.

``copy.deepcopy`` keeps a memo for shared and cyclic references and dispatches on every type;
Kubernetes objects decoded from JSON have neither sharing nor cycles, so a plain recursive copy is
several times faster. That matters on the admission path, where each review copies the pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Exact-type checks first: JSON decodes to exactly these types, and an ``isinstance`` check
# against the ``Mapping`` ABC costs more than the copy of a string.
_SCALARS = frozenset({str, int, float, bool, type(None)})


def copy_json(value: Any) -> Any:
    """A deep copy of dicts and lists (and other mappings, as dicts); scalars and any other
    value are shared, which is safe for the immutable values JSON decodes to."""
    kind = type(value)
    if kind is dict:
        return {k: copy_json(v) for k, v in value.items()}
    if kind is list:
        return [copy_json(v) for v in value]
    if kind in _SCALARS:
        return value
    if isinstance(value, Mapping):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return value
