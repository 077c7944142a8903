"""How much work one admission request may ask for, checked before any is done.

The request body is capped in bytes (``server.maxBodyBytes``), but bytes are a poor measure of
work: a 2.4 MB pod of empty lists decodes to 800,000 Python objects, and one with 10,000
node-selector terms keeps a review thread busy for a second. So before deciding, one pass over
the decoded object counts what the decision's cost grows with, and an object over any limit is
answered at once by the failure mode (admitted without CUDA placement, or denied with code 400
under ``failClosed``) instead of being decided.

Where the API server itself bounds a quantity, the limit here is at or above it, so no object
the API server would store is refused for it: an object must fit etcd's 1.5 MiB, which at three
bytes per value (``"",``) is 524,288 values, below ``maxValues``. Where it sets no bound
(containers, node-selector terms, expressions, values), the limits are far above what real
workloads carry and keep the worst decision in the tens of milliseconds (measured figures are in
docs/security.md). String lengths need no limit of their own: every step that reads a string is
linear in it, and every string quoted back (warnings, the requirement annotation) is clipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from cudasched.settings.config import ObjectLimits

__all__ = [
    "MAX_DEPTH",
    "body_over_limits",
    "nesting_bounded",
    "over_limits",
    "small_body_checks",
    "too_deep",
]

#: Nesting of objects and arrays allowed: what orjson writes (a deeper object could not be
#: answered with a patch that copies it), far above a Pod's own schema (about 20 levels) and
#: low enough that Python code copying such an object stays within its recursion limit.
MAX_DEPTH = 254

_CONTAINER_KEYS = frozenset({"containers", "initContainers", "ephemeralContainers"})
_TERM_KEYS = frozenset({"nodeSelectorTerms", "preferredDuringSchedulingIgnoredDuringExecution"})
_EXPRESSION_KEYS = frozenset({"matchExpressions", "matchFields"})


def over_limits(obj: Mapping[str, Any], limits: ObjectLimits) -> str | None:
    """What ``obj`` exceeds (a phrase for the answer's message), or ``None``.

    One pass, level by level (no recursion, whatever the nesting), that stops at the first
    level where a limit is crossed, so an abusive object costs at most about ``max_values``
    steps."""
    budget = limits.max_values
    containers = terms = expressions = values = seen = depth = 0
    level: list[Any] = [obj]
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            return f"object nested deeper than {MAX_DEPTH} levels"
        below: list[Any] = []
        append = below.append
        for node in level:
            seen += len(node)
            if type(node) is dict:
                for key, value in node.items():
                    kind = type(value)
                    if kind is list:
                        if key in _CONTAINER_KEYS:
                            containers += len(value)
                        elif key in _TERM_KEYS:
                            terms += len(value)
                        elif key in _EXPRESSION_KEYS:
                            expressions += len(value)
                        elif key == "values":
                            values += len(value)
                        append(value)
                    elif kind is dict:
                        append(value)
            else:
                for item in node:
                    kind = type(item)
                    if kind is dict or kind is list:
                        append(item)
        if seen > budget:
            return f"object has more than {budget:,} values"
        level = below
    if containers > limits.max_containers:
        return f"{containers:,} containers (at most {limits.max_containers:,})"
    if terms > limits.max_terms:
        return f"{terms:,} node-selector terms (at most {limits.max_terms:,})"
    if expressions > limits.max_expressions:
        return f"{expressions:,} selector expressions (at most {limits.max_expressions:,})"
    if values > limits.max_selector_values:
        return f"{values:,} selector values (at most {limits.max_selector_values:,})"
    return None


def body_over_limits(body: bytes, limits: ObjectLimits) -> str | None:
    """What a raw request body certainly exceeds, judged before decoding it, or ``None``.

    Every JSON value after the first in an array or object follows a comma or an opening
    bracket, so counting those bytes (a C loop: milliseconds for 3 MiB) gives an upper bound
    on the values, inflated only by punctuation inside strings. A body over ``max_values`` by
    that count is refused without being decoded: decoding is the costliest step for such
    bodies (a 2.4 MB array of empty arrays is 800,000 objects, and the garbage collector
    scans them again and again while they are created). A valid object inside etcd's 1.5 MiB
    could only be refused if a third of its bytes were commas inside strings."""
    estimate = body.count(b",") + body.count(b"[") + body.count(b"{")
    if estimate > limits.max_values:
        return f"object has more than {limits.max_values:,} values"
    return None


def small_body_checks(body: bytes, limits: ObjectLimits, braces: int | None = None) -> bool:
    """Whether a body needs the full count of :func:`over_limits`, judged from its bytes; when
    not, only its nesting needs checking (:func:`too_deep`, microseconds instead of tens).

    Every container, term and expression is a JSON object (one ``{``) and every value follows a
    comma or a bracket, so when those counts are within the limits the object is too. That holds
    for any ordinary review (a pod has a few hundred braces); only unusual bodies pay for the
    full count. Nesting is checked separately because a few hundred bytes can nest deeply.
    ``braces``: the body's count of ``{`` when the caller has it (a pass over the body)."""
    if braces is None:
        braces = body.count(b"{")
    if braces > min(limits.max_containers, limits.max_terms, limits.max_expressions):
        return True
    if min(limits.max_values, limits.max_selector_values) >= len(body):
        return False  # every value takes at least a byte: no need to count them
    values = braces + body.count(b"[") + body.count(b",")
    return values > min(limits.max_values, limits.max_selector_values)


def nesting_bounded(body: bytes, braces: int | None = None) -> bool:
    """Whether ``body``'s bytes alone prove it nests no deeper than :data:`MAX_DEPTH` levels:
    every level opens with a ``{`` or a ``[``, so a body with at most that many of them (in
    strings too: an overestimate) cannot; then :func:`too_deep` need not serialise it.
    ``braces``: the body's count of ``{`` when the caller has it."""
    if braces is None:
        braces = body.count(b"{")
    return braces <= MAX_DEPTH and braces + body.count(b"[") <= MAX_DEPTH


def too_deep(obj: Any) -> str | None:
    """The nesting problem of ``obj``, or ``None``: orjson writes at most :data:`MAX_DEPTH`
    levels, so a successful (C-speed) serialisation proves the nesting is within the limit."""
    try:
        orjson.dumps(obj)
    except TypeError:  # orjson.JSONEncodeError; decoded JSON fails only by its nesting
        return f"object nested deeper than {MAX_DEPTH} levels"
    return None
