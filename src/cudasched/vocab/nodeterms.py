"""Node-selector terms compiled, as Kubernetes parses them (``labels.Requirement``,
``nodeaffinity``'s term parsing): each ``matchExpressions`` entry becomes a small
:class:`LabelRequirement` with a precomputed set or int64 bound, each ``matchFields`` entry a
:class:`FieldRequirement`, and :func:`term_matches` matches one compiled term against a node's
labels, pre-parsed integer labels and name. :class:`CompileCache` lets a caller compile each
distinct expression once. The selectors built from these terms are in
:mod:`cudasched.vocab.nodeaffinity`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from cudasched.vocab.errors import InputError
from cudasched.vocab.labelsyntax import label_key_problem, label_value_problem, parse_int64

__all__ = [
    "ABSENT",
    "FIELD_OPERATORS",
    "NODE_NAME_FIELD",
    "OPERATORS",
    "CompileCache",
    "FieldRequirement",
    "LabelRequirement",
    "NodeSelectorError",
    "Term",
    "compile_term",
    "selector_list",
    "selector_mapping",
    "term_matches",
]

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
FIELD_OPERATORS = ("In", "NotIn")
NODE_NAME_FIELD = "metadata.name"

# Operator codes used by the compiled form; small ints compare faster than strings.
_IN, _NOT_IN, _EXISTS, _DOES_NOT_EXIST, _GT, _LT = range(6)
_OP_CODES = MappingProxyType(dict(zip(OPERATORS, range(6), strict=True)))


class _Absent:
    """Marker for a label the node does not carry; never equal to, nor in a set of, strings."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<absent>"


ABSENT = _Absent()


class NodeSelectorError(InputError):
    """A node selector (or preferred term list) that Kubernetes could not parse.

    ``errors`` lists every problem, each prefixed with the field path, so a user can fix them all
    in one go instead of one per round trip.
    """

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = tuple(errors)
        super().__init__("invalid node selector: " + "; ".join(self.errors))


class LabelRequirement(NamedTuple):
    """One compiled ``matchExpressions`` entry.

    ``arg`` is a frozenset of values for ``In``/``NotIn``, the int64 bound for ``Gt``/``Lt`` and
    ``None`` for ``Exists``/``DoesNotExist``. A NamedTuple rather than a dataclass because the
    match loop unpacks it, which is the cheapest access Python offers.
    """

    op: int
    key: str
    arg: frozenset[str] | int | None

    @property
    def operator(self) -> str:
        return OPERATORS[self.op]


class FieldRequirement(NamedTuple):
    """One compiled ``matchFields`` entry: ``In`` (equal) or ``NotIn`` (not equal) one value."""

    equal: bool
    key: str
    value: str


class Term(NamedTuple):
    labels: tuple[LabelRequirement, ...]
    fields: tuple[FieldRequirement, ...] | None
    errors: tuple[str, ...]


def selector_list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return list(value)
    raise NodeSelectorError([f"{where}: expected a list, got {value!r}"])


def selector_mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return value
    raise NodeSelectorError([f"{where}: expected a mapping, got {value!r}"])


def _expr_parts(expr: object, where: str) -> tuple[str, str, list[str]]:
    """Decode one requirement the way JSON decoding into the Go struct would: missing fields are
    empty, wrongly typed fields are a hard error (the API server could never have stored them)."""
    mapping = selector_mapping(expr, where)
    key = mapping.get("key", "")
    operator = mapping.get("operator", "")
    values = selector_list(mapping.get("values"), f"{where}.values")
    if key is None:
        key = ""
    if operator is None:
        operator = ""
    if not isinstance(key, str):
        raise NodeSelectorError([f"{where}.key: expected a string, got {key!r}"])
    if not isinstance(operator, str):
        raise NodeSelectorError([f"{where}.operator: expected a string, got {operator!r}"])
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise NodeSelectorError([f"{where}.values[{i}]: expected a string, got {value!r}"])
    return key, operator, values


def _compile_label_requirement(
    expr: object, where: str, errors: list[str]
) -> LabelRequirement | None:
    key, operator, values = _expr_parts(expr, where)
    op = _OP_CODES.get(operator)
    if op is None:
        errors.append(
            f"{where}.operator: unsupported value {operator!r}: expected one of "
            + ", ".join(OPERATORS)
        )
        return None
    before = len(errors)
    problem = label_key_problem(key)
    if problem is not None:
        errors.append(f"{where}.key: invalid label key {key!r}: {problem}")
    bound: int | None = None
    if op in (_IN, _NOT_IN):
        if not values:
            errors.append(f"{where}.values: must not be empty for operator {operator}")
    elif op in (_EXISTS, _DOES_NOT_EXIST):
        if values:
            errors.append(f"{where}.values: must be empty for operator {operator}")
    else:
        if len(values) != 1:
            errors.append(
                f"{where}.values: operator {operator} needs exactly one value, got {len(values)}"
            )
        for i, value in enumerate(values):
            number = parse_int64(value)
            if number is None:
                errors.append(
                    f"{where}.values[{i}]: invalid value {value!r}: operator {operator} "
                    "needs a base-10 64-bit integer"
                )
            elif len(values) == 1:
                bound = number
    for i, value in enumerate(values):
        problem = label_value_problem(value)
        if problem is not None:
            errors.append(f"{where}.values[{i}]: invalid label value {value!r}: {problem}")
    if len(errors) != before:
        return None
    if op in (_IN, _NOT_IN):
        return LabelRequirement(op, key, frozenset(values))
    if op in (_GT, _LT):
        return LabelRequirement(op, key, bound)
    return LabelRequirement(op, key, None)


def _compile_field_requirement(
    expr: object, where: str, errors: list[str]
) -> FieldRequirement | None:
    key, operator, values = _expr_parts(expr, where)
    if operator not in FIELD_OPERATORS:
        errors.append(
            f"{where}.operator: unsupported value {operator!r} for a field: expected In or NotIn"
        )
        return None
    if len(values) != 1:
        errors.append(f"{where}.values: a field requirement needs exactly one value")
        return None
    return FieldRequirement(operator == "In", key, values[0])


class CompileCache:
    """Compiled ``matchExpressions`` entries, shared by the selectors of one batch of work.

    A caller that compiles many selectors built from the same few expressions (``explain`` over
    thousands of workloads: every workload's merged affinity repeats its requirement's
    expressions, crossed with each of its own terms) passes one cache to all of them, so each
    distinct expression is parsed and validated once. The cache belongs to the caller and lives
    as long as the caller keeps it: there is no process-wide cache to grow or to go stale.

    Only expressions that compile without error are kept, under their ``(key, operator,
    values)`` content (the only fields compilation reads), so a hit gives exactly what compiling
    would have given. Anything unhashable or erroneous is compiled every time, as without a cache.
    """

    __slots__ = ("_labels",)

    def __init__(self) -> None:
        self._labels: dict[tuple[Any, Any, Any], LabelRequirement] = {}

    def __len__(self) -> int:
        return len(self._labels)

    def compile_expression(
        self, expr: object, where: str, errors: list[str]
    ) -> LabelRequirement | None:
        """:func:`_compile_label_requirement` through the cache (same result, same errors)."""
        identity = _expression_identity(expr)
        if identity is not None:
            try:
                found = self._labels.get(identity)
            except TypeError:  # an unhashable value: not cacheable
                identity = found = None
            if found is not None:
                return found
        before = len(errors)
        compiled = _compile_label_requirement(expr, where, errors)
        if identity is not None and compiled is not None and len(errors) == before:
            self._labels[identity] = compiled
        return compiled


def _expression_identity(expr: object) -> tuple[Any, Any, Any] | None:
    """What compiling ``expr`` depends on, as a hashable key, or ``None`` when it has none.

    Only plain dicts with a list (or tuple, or no) ``values`` qualify (a missing ``values``
    compiles like an empty list). A hit needs equality with a key that compiled cleanly, whose
    parts are all strings, and builtin values equal such a key only when they are the same
    strings. The key may still be unhashable (a list among the values): the caller checks.
    """
    if type(expr) is not dict:
        return None
    values = expr.get("values")
    if values is None:
        frozen: tuple[Any, ...] = ()
    elif type(values) is list or type(values) is tuple:
        frozen = tuple(values)
    else:
        return None
    return (expr.get("key"), expr.get("operator"), frozen)


def compile_term(term: Mapping[str, Any], where: str, cache: CompileCache | None = None) -> Term:
    errors: list[str] = []
    reqs: list[LabelRequirement] = []
    compile_one = _compile_label_requirement if cache is None else cache.compile_expression
    for i, expr in enumerate(
        selector_list(term.get("matchExpressions"), f"{where}.matchExpressions")
    ):
        req = compile_one(expr, f"{where}.matchExpressions[{i}]", errors)
        if req is not None:
            reqs.append(req)
    fields: list[FieldRequirement] | None = None
    raw_fields = selector_list(term.get("matchFields"), f"{where}.matchFields")
    if raw_fields:
        fields = []
        for i, expr in enumerate(raw_fields):
            freq = _compile_field_requirement(expr, f"{where}.matchFields[{i}]", errors)
            if freq is not None:
                fields.append(freq)
    if errors:
        return Term((), None, tuple(errors))
    return Term(tuple(reqs), None if fields is None else tuple(fields), ())


def term_matches(
    reqs: tuple[LabelRequirement, ...],
    fields: tuple[FieldRequirement, ...] | None,
    labels: Mapping[str, str],
    ints: Mapping[str, int],
    name: str,
) -> bool:
    """One parsed term against one node. Kept as a flat if-chain over int codes: this is the
    innermost loop of every fleet-wide evaluation. ``arg``'s type follows ``op``
    (:class:`LabelRequirement`), which mypy cannot see: the comparisons below say so with
    ``type: ignore[operator]`` rather than pay an ``isinstance`` per expression."""
    for op, key, arg in reqs:
        if op == _IN:
            if labels.get(key, ABSENT) not in arg:  # type: ignore[operator]
                return False
        elif op == _NOT_IN:
            if labels.get(key, ABSENT) in arg:  # type: ignore[operator]
                return False
        elif op == _EXISTS:
            if key not in labels:
                return False
        elif op == _DOES_NOT_EXIST:
            if key in labels:
                return False
        else:
            number = ints.get(key)
            if number is None:
                return False
            if op == _GT:
                if number <= arg:  # type: ignore[operator]
                    return False
            elif number >= arg:  # type: ignore[operator]
                return False
    if fields is not None and name:
        for equal, key, value in fields:
            actual = name if key == NODE_NAME_FIELD else ""
            if (actual == value) != equal:
                return False
    return True
