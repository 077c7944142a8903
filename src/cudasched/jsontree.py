"""Copying JSON-shaped data (dicts, lists, scalars) fast.

``copy.deepcopy`` keeps a memo for shared and cyclic references and dispatches on every type;
Kubernetes objects decoded from JSON have neither sharing nor cycles, so a plain recursive copy is
several times faster. That matters on the admission path, where each review copies the pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def copy_json(value: Any) -> Any:
    """A deep copy of dicts and lists (and other mappings, as dicts); scalars and any other
    value are shared, which is safe for the immutable values JSON decodes to."""
    if isinstance(value, dict | Mapping):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return value
