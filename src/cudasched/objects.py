"""Reading Kubernetes objects held as plain dicts (exactly as the API returns them).

Two readers, because callers need two attitudes: resolution and KServe selection must reject a
field of the wrong type with a message (``as_mapping``), while admission and the caches must
never fail on an object they merely look into (``metadata_of``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from cudasched.errors import InputError

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def as_mapping(value: object, what: str) -> Mapping[str, Any]:
    """``value`` as a mapping: absent (None) is empty; any other type is an ``InputError``
    naming ``what``."""
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise InputError(f"invalid {what}: expected a mapping, got {type(value).__name__}")
    return value


def metadata_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj.metadata``, or an empty mapping when it is absent or not a mapping."""
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else _EMPTY
