"""Reading Kubernetes objects held as plain dicts (exactly as the API returns them).

Two attitudes, because callers need both: resolution, KServe selection and the command line
reject a field of the wrong type with a message (``as_mapping``, ``checked_metadata``), while
admission and the caches must never fail on an object they merely look into (the lenient
readers: ``metadata_of``, ``name_of``, ``namespace_of``, ``labels_of``, ``annotations_of``).

One namespace rule everywhere: a namespaced object written without ``metadata.namespace`` is
in ``default``, where the API server (and kubectl, without ``-n``) puts it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from cudasched.vocab.errors import InputError

__all__ = [
    "DEFAULT_NAMESPACE",
    "annotations_of",
    "as_flag",
    "as_list",
    "as_mapping",
    "checked_labels",
    "checked_metadata",
    "checked_name",
    "labels_of",
    "metadata_of",
    "name_of",
    "namespace_of",
    "optional_str",
]

DEFAULT_NAMESPACE = "default"

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def as_mapping(value: object, what: str) -> Mapping[str, Any]:
    """``value`` as a mapping: absent (None) is empty; any other type is an ``InputError``
    naming ``what``."""
    if type(value) is dict:  # what decoded JSON is: no abstract-class check (hot path)
        return value
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise InputError(f"invalid {what}: expected a mapping, got {type(value).__name__}")
    return value


def as_list(value: object, what: str) -> list[Any]:
    """``value`` as a list: absent (None) is empty; any other type is an ``InputError``."""
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise InputError(f"invalid {what}: expected a list, got {type(value).__name__}")
    return list(value)


def optional_str(value: object, what: str) -> str | None:
    """A scalar field read as text (YAML may have typed ``1.0`` as a number); ``None`` when
    absent; an ``InputError`` for a boolean, list or mapping."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InputError(f"invalid {what} {value!r}: expected a string")
    return str(value)


def as_flag(value: object, what: str) -> bool:
    """A ``*bool`` field: absent or null is false, like the Go helpers' nil checks."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    raise InputError(f"invalid {what} {value!r}: expected true or false")


def checked_metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj.metadata``; an ``InputError`` when it is present but not a mapping."""
    return as_mapping(obj.get("metadata"), "metadata")


def checked_name(obj: Mapping[str, Any]) -> str:
    """``metadata.name`` as text (``""`` when absent); an ``InputError`` when metadata is not
    a mapping."""
    return str(checked_metadata(obj).get("name") or "")


def checked_labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``metadata.labels``; an ``InputError`` when metadata or labels is not a mapping."""
    return as_mapping(checked_metadata(obj).get("labels"), "metadata.labels")


def metadata_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj.metadata``, or an empty mapping when it is absent or not a mapping."""
    meta = obj.get("metadata")
    return meta if (type(meta) is dict or isinstance(meta, Mapping)) else _EMPTY


def name_of(obj: Mapping[str, Any]) -> str:
    """``metadata.name``, or ``""`` when it is absent or not a string."""
    name = metadata_of(obj).get("name")
    return name if isinstance(name, str) else ""


def namespace_of(obj: Mapping[str, Any]) -> str:
    """``metadata.namespace``, or ``default`` when it is absent, empty or not a string."""
    namespace = metadata_of(obj).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else DEFAULT_NAMESPACE


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    """``metadata.labels`` with string keys and values only (others are dropped)."""
    labels = metadata_of(obj).get("labels")
    if not isinstance(labels, Mapping):
        return {}
    return {str(k): v for k, v in labels.items() if isinstance(v, str)}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``metadata.annotations``, or an empty mapping when absent or not a mapping."""
    annotations = metadata_of(obj).get("annotations")
    return (
        annotations if (type(annotations) is dict or isinstance(annotations, Mapping)) else _EMPTY
    )
