"""Label syntax as Kubernetes validates it (``k8s.io/apimachinery``): label keys
(``IsQualifiedName``), label values (``IsValidLabelValue``), the DNS-1123 names objects and label
key prefixes are made of (``IsDNS1123Label``, ``IsDNS1123Subdomain``) and the base-10 int64 that
``Gt`` / ``Lt`` compare (Go's ``strconv.ParseInt(text, 10, 64)``). Compiled node-selector terms
are checked with them, and nodes' integer labels parsed, as the API server and scheduler do; the
names cudasched writes or asks for (namespaces, object names) are checked with them before any
request.

Every check matches the whole text (``fullmatch``): with ``re.match`` and ``$`` a trailing
newline would pass.
"""

from __future__ import annotations

import re

__all__ = [
    "dns_label_ok",
    "dns_subdomain_ok",
    "label_key_ok",
    "label_key_problem",
    "label_value_ok",
    "label_value_problem",
    "parse_int64",
]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_INT_RE = re.compile(r"[+-]?[0-9]+")
_LABEL_VALUE_RE = re.compile(r"(?:(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_QUALIFIED_NAME_RE = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_LABEL_RE = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN_RE = re.compile(
    r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
)
_DNS_LABEL_MAX = 63
_DNS_SUBDOMAIN_MAX = 253
_LABEL_VALUE_MAX = 63
_NAME_MAX = 63


def parse_int64(text: str) -> int | None:
    """Parse like Go's ``strconv.ParseInt(text, 10, 64)``; ``None`` where Go returns an error.

    Python's ``int()`` is far more permissive (spaces, ``_`` separators, non-ASCII digits) and has
    no range, so it would accept label values the scheduler rejects.
    """
    if len(text) > 20:  # int64 has 19 digits; longer text is never in range (nor cheap to int())
        return None
    if text.isdigit() and text.isascii():  # fast path: the common unsigned decimal
        value = int(text)
        return value if value <= _INT64_MAX else None
    if _INT_RE.fullmatch(text) is None:
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def label_value_ok(value: str) -> bool:
    """Whether ``value`` is a valid label value: at most 63 characters, empty or alphanumeric at
    both ends with ``-``, ``_`` and ``.`` inside (apimachinery ``IsValidLabelValue``)."""
    return (
        isinstance(value, str)
        and len(value) <= _LABEL_VALUE_MAX
        and _LABEL_VALUE_RE.fullmatch(value) is not None
    )


def dns_label_ok(name: str) -> bool:
    """Whether ``name`` is a DNS-1123 label (a namespace, most object names): 1 to 63 lower-case
    letters, digits and ``-``, a letter or digit at both ends (apimachinery ``IsDNS1123Label``)."""
    return (
        isinstance(name, str)
        and len(name) <= _DNS_LABEL_MAX
        and _DNS1123_LABEL_RE.fullmatch(name) is not None
    )


def dns_subdomain_ok(name: str) -> bool:
    """Whether ``name`` is a DNS-1123 subdomain (a Secret's, a PriorityClass's name, a label
    key's prefix): at most 253 characters of DNS-1123 labels joined by ``.`` (apimachinery
    ``IsDNS1123Subdomain``)."""
    return (
        isinstance(name, str)
        and len(name) <= _DNS_SUBDOMAIN_MAX
        and _DNS1123_SUBDOMAIN_RE.fullmatch(name) is not None
    )


def label_key_ok(key: str) -> bool:
    """Whether ``key`` is a valid label key (apimachinery ``IsQualifiedName``): an optional
    DNS-1123 subdomain prefix of at most 253 characters and ``/``, then a name of 1 to 63
    characters, alphanumeric at both ends with ``-``, ``_`` and ``.`` inside."""
    return isinstance(key, str) and label_key_problem(key) is None


def label_key_problem(key: str) -> str | None:
    parts = key.split("/")
    if len(parts) > 2:
        return "a label key has at most one '/' (an optional DNS prefix, then a name)"
    if len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return "the prefix before '/' must not be empty"
        if not dns_subdomain_ok(prefix):
            return (
                "the prefix must be a lowercase DNS-1123 subdomain of at most "
                f"{_DNS_SUBDOMAIN_MAX} characters (e.g. 'example.com')"
            )
    else:
        name = parts[0]
    if not name:
        return "the name part must not be empty"
    if len(name) > _NAME_MAX:
        return f"the name part must be at most {_NAME_MAX} characters"
    if _QUALIFIED_NAME_RE.fullmatch(name) is None:
        return (
            "the name part must start and end with a letter or digit and contain only letters, "
            "digits, '-', '_' and '.'"
        )
    return None


def label_value_problem(value: str) -> str | None:
    if len(value) > _LABEL_VALUE_MAX:
        return f"a label value must be at most {_LABEL_VALUE_MAX} characters"
    if _LABEL_VALUE_RE.fullmatch(value) is None:
        return (
            "a label value must be empty or start and end with a letter or digit and contain "
            "only letters, digits, '-', '_' and '.'"
        )
    return None
