"""A faithful Python port of Kubernetes' node-affinity matching.

cudasched promises that the affinity it writes selects exactly the nodes the compatibility engine
allows. That promise can only be checked (and ``explain`` can only be honest) if we evaluate
affinity the way the scheduler does, quirks included. The reference is the Go code in
``k8s.io/component-helpers/scheduling/corev1/nodeaffinity`` and ``k8s.io/apimachinery``'s
``labels.Requirement``:

* terms are ORed, expressions inside a term ANDed; a term with neither ``matchExpressions`` nor
  ``matchFields`` matches nothing, and so does a selector with zero terms;
* a required term that fails to parse is skipped (its errors are kept in ``errors``), the way
  ``NewLazyErrorNodeSelector`` does; a preferred term that fails to parse makes the whole list
  fail, the way ``NewPreferredSchedulingTerms`` does;
* ``NotIn`` matches a node without the key, ``Gt``/``Lt`` never match a missing key or a node
  value that is not a base-10 int64;
* ``matchFields`` know ``metadata.name`` only (a missing field reads as ``""``) and are ignored
  altogether for a node without a name;
* ``spec.nodeSelector`` is an exact match on every key, ANDed with the required affinity.

Selectors are parsed once into tuples of small requirement records with precomputed sets and
integers, and nodes carry their integer-valued labels pre-parsed, so matching one selector
against thousands of nodes does no parsing at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from cudasched.vocab.errors import InputError

__all__ = [
    "OPERATORS",
    "CompileCache",
    "FieldRequirement",
    "LabelRequirement",
    "Node",
    "NodeSelector",
    "NodeSelectorError",
    "PreferredTerms",
    "RequiredNodeAffinity",
    "label_key_ok",
    "label_value_ok",
    "parse_int64",
]

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
FIELD_OPERATORS = ("In", "NotIn")
NODE_NAME_FIELD = "metadata.name"

# Operator codes used by the compiled form; small ints compare faster than strings.
_IN, _NOT_IN, _EXISTS, _DOES_NOT_EXIST, _GT, _LT = range(6)
_OP_CODES = MappingProxyType(dict(zip(OPERATORS, range(6), strict=True)))

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_INT_RE = re.compile(r"[+-]?[0-9]+")
_LABEL_VALUE_RE = re.compile(r"(?:(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_QUALIFIED_NAME_RE = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN_RE = re.compile(
    r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
)
_LABEL_VALUE_MAX = 63
_NAME_MAX = 63
_PREFIX_MAX = 253


class _Absent:
    """Marker for a label the node does not carry; never equal to, nor in a set of, strings."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<absent>"


_ABSENT = _Absent()


class NodeSelectorError(InputError):
    """A node selector (or preferred term list) that Kubernetes could not parse.

    ``errors`` lists every problem, each prefixed with the field path, so a user can fix them all
    in one go instead of one per round trip.
    """

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = tuple(errors)
        super().__init__("invalid node selector: " + "; ".join(self.errors))


# --------------------------------------------------------------------------- syntax helpers


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


def label_key_ok(key: str) -> bool:
    """Whether ``key`` is a valid label key (apimachinery ``IsQualifiedName``): an optional
    DNS-1123 subdomain prefix of at most 253 characters and ``/``, then a name of 1 to 63
    characters, alphanumeric at both ends with ``-``, ``_`` and ``.`` inside."""
    return isinstance(key, str) and _label_key_problem(key) is None


def _label_key_problem(key: str) -> str | None:
    parts = key.split("/")
    if len(parts) > 2:
        return "a label key has at most one '/' (an optional DNS prefix, then a name)"
    if len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return "the prefix before '/' must not be empty"
        if len(prefix) > _PREFIX_MAX or _DNS1123_SUBDOMAIN_RE.fullmatch(prefix) is None:
            return (
                "the prefix must be a lowercase DNS-1123 subdomain of at most "
                f"{_PREFIX_MAX} characters (e.g. 'example.com')"
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


def _label_value_problem(value: str) -> str | None:
    if len(value) > _LABEL_VALUE_MAX:
        return f"a label value must be at most {_LABEL_VALUE_MAX} characters"
    if _LABEL_VALUE_RE.fullmatch(value) is None:
        return (
            "a label value must be empty or start and end with a letter or digit and contain "
            "only letters, digits, '-', '_' and '.'"
        )
    return None


# --------------------------------------------------------------------------- nodes


@dataclass(frozen=True, slots=True)
class Node:
    """The part of a Kubernetes Node that affinity looks at: its name and its labels.

    The labels are copied into a read-only mapping, and every label value that parses as a Go
    int64 is parsed once here, so ``Gt``/``Lt`` cost one dict lookup per node on the hot path.
    """

    name: str
    labels: Mapping[str, str]
    int_labels: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise InputError(f"invalid node name {self.name!r}: expected a string")
        if not isinstance(self.labels, Mapping):
            raise InputError(
                f"invalid labels {self.labels!r} on node {self.name!r}: expected a mapping"
            )
        labels: dict[str, str] = {}
        ints: dict[str, int] = {}
        for key, value in self.labels.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise InputError(
                    f"invalid label {key!r}: {value!r} on node {self.name!r}: "
                    "expected string keys and string values"
                )
            labels[key] = value
            number = parse_int64(value)
            if number is not None:
                ints[key] = number
        object.__setattr__(self, "labels", MappingProxyType(labels))
        object.__setattr__(self, "int_labels", MappingProxyType(ints))

    def __hash__(self) -> int:
        # Explicit because the label mapping itself is unhashable; equal nodes hash equal.
        return hash((self.name, frozenset(self.labels.items())))

    @classmethod
    def from_k8s(cls, obj: Mapping[str, Any]) -> Node:
        """Build from a Node object exactly as the API returns it (``metadata.name/labels``)."""
        if not isinstance(obj, Mapping):
            raise InputError(f"invalid node {obj!r}: expected a Node object (a mapping)")
        meta = obj.get("metadata") or {}
        if not isinstance(meta, Mapping):
            raise InputError(f"invalid node metadata {meta!r}: expected a mapping")
        return cls(name=meta.get("name") or "", labels=meta.get("labels") or {})


# --------------------------------------------------------------------------- compiled form


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


class _Term(NamedTuple):
    labels: tuple[LabelRequirement, ...]
    fields: tuple[FieldRequirement, ...] | None
    errors: tuple[str, ...]


def _as_list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return list(value)
    raise NodeSelectorError([f"{where}: expected a list, got {value!r}"])


def _as_mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return value
    raise NodeSelectorError([f"{where}: expected a mapping, got {value!r}"])


def _expr_parts(expr: object, where: str) -> tuple[str, str, list[str]]:
    """Decode one requirement the way JSON decoding into the Go struct would: missing fields are
    empty, wrongly typed fields are a hard error (the API server could never have stored them)."""
    mapping = _as_mapping(expr, where)
    key = mapping.get("key", "")
    operator = mapping.get("operator", "")
    values = _as_list(mapping.get("values"), f"{where}.values")
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
    problem = _label_key_problem(key)
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
        problem = _label_value_problem(value)
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


def _is_empty_term(term: Mapping[str, Any]) -> bool:
    return not term.get("matchExpressions") and not term.get("matchFields")


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


def _compile_term(term: Mapping[str, Any], where: str, cache: CompileCache | None = None) -> _Term:
    errors: list[str] = []
    reqs: list[LabelRequirement] = []
    compile_one = _compile_label_requirement if cache is None else cache.compile_expression
    for i, expr in enumerate(_as_list(term.get("matchExpressions"), f"{where}.matchExpressions")):
        req = compile_one(expr, f"{where}.matchExpressions[{i}]", errors)
        if req is not None:
            reqs.append(req)
    fields: list[FieldRequirement] | None = None
    raw_fields = _as_list(term.get("matchFields"), f"{where}.matchFields")
    if raw_fields:
        fields = []
        for i, expr in enumerate(raw_fields):
            freq = _compile_field_requirement(expr, f"{where}.matchFields[{i}]", errors)
            if freq is not None:
                fields.append(freq)
    if errors:
        return _Term((), None, tuple(errors))
    return _Term(tuple(reqs), None if fields is None else tuple(fields), ())


def _term_matches(
    reqs: tuple[LabelRequirement, ...],
    fields: tuple[FieldRequirement, ...] | None,
    labels: Mapping[str, str],
    ints: Mapping[str, int],
    name: str,
) -> bool:
    """One parsed term against one node. Kept as a flat if-chain over int codes: this is the
    innermost loop of every fleet-wide evaluation."""
    for op, key, arg in reqs:
        if op == _IN:
            if labels.get(key, _ABSENT) not in arg:  # type: ignore[operator]
                return False
        elif op == _NOT_IN:
            if labels.get(key, _ABSENT) in arg:  # type: ignore[operator]
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


# --------------------------------------------------------------------------- selectors


class NodeSelector:
    """A compiled ``v1.NodeSelector`` with lazy-error semantics (``NewLazyErrorNodeSelector``).

    Empty terms are dropped (they match nothing), terms that fail to parse are dropped too and
    their messages kept in ``errors``; matching ORs what is left. Construct with
    ``NodeSelector(obj)`` or ``NodeSelector.compile(obj)``, where ``obj`` is the mapping
    ``{"nodeSelectorTerms": [...]}``. ``cache`` shares compiled expressions with other
    selectors compiled by the same caller (see :class:`CompileCache`).
    """

    __slots__ = ("_terms", "errors")

    def __init__(
        self,
        node_selector: Mapping[str, Any],
        *,
        path: str = "",
        cache: CompileCache | None = None,
    ) -> None:
        if node_selector is None:
            raise NodeSelectorError([f"{path or 'nodeSelector'}: expected a mapping, got None"])
        selector = _as_mapping(node_selector, path or "nodeSelector")
        prefix = f"{path}.nodeSelectorTerms" if path else "nodeSelectorTerms"
        terms: list[tuple[tuple[LabelRequirement, ...], tuple[FieldRequirement, ...] | None]] = []
        errors: list[str] = []
        for i, raw in enumerate(_as_list(selector.get("nodeSelectorTerms"), prefix)):
            term = _as_mapping(raw, f"{prefix}[{i}]")
            if _is_empty_term(term):
                continue
            compiled = _compile_term(term, f"{prefix}[{i}]", cache)
            if compiled.errors:
                errors.extend(compiled.errors)
            else:
                terms.append((compiled.labels, compiled.fields))
        self._terms = tuple(terms)
        self.errors: tuple[str, ...] = tuple(errors)

    @classmethod
    def compile(cls, node_selector: Mapping[str, Any]) -> NodeSelector:
        return cls(node_selector)

    @classmethod
    def from_terms(
        cls, terms: Sequence[Mapping[str, Any]], *, cache: CompileCache | None = None
    ) -> NodeSelector:
        """Compile a bare list of node selector terms (what the placement compiler emits)."""
        return cls({"nodeSelectorTerms": list(terms)}, cache=cache)

    @property
    def term_count(self) -> int:
        """How many terms can match at all (non-empty and parsed without error)."""
        return len(self._terms)

    def match(self, node: Node) -> bool:
        labels = node.labels
        ints = node.int_labels
        name = node.name
        # A plain loop, not any(<generator>): it avoids a generator frame per node.
        for reqs, fields in self._terms:  # noqa: SIM110
            if _term_matches(reqs, fields, labels, ints, name):
                return True
        return False

    def filter(self, nodes: Iterable[Node]) -> list[Node]:
        """The nodes this selector matches, in input order."""
        return [node for node in nodes if self.match(node)]

    def __repr__(self) -> str:
        return f"NodeSelector(terms={len(self._terms)}, errors={len(self.errors)})"


class PreferredTerms:
    """Compiled preferred node-affinity terms, as ``NewPreferredSchedulingTerms`` builds them.

    Terms of weight 0 and empty preferences are skipped; any other term that fails to parse raises
    :class:`NodeSelectorError` at compile time, because the scheduler fails the whole scoring
    step for such a pod rather than ignoring the term.
    """

    __slots__ = ("_terms",)

    def __init__(
        self,
        terms: Sequence[Mapping[str, Any]] | None,
        *,
        path: str = "",
        cache: CompileCache | None = None,
    ) -> None:
        prefix = path or "preferredDuringSchedulingIgnoredDuringExecution"
        compiled: list[
            tuple[int, tuple[LabelRequirement, ...], tuple[FieldRequirement, ...] | None]
        ] = []
        errors: list[str] = []
        for i, raw in enumerate(_as_list(terms, prefix)):
            where = f"{prefix}[{i}]"
            item = _as_mapping(raw, where)
            weight = item.get("weight", 0)
            if weight is None:
                weight = 0
            if isinstance(weight, bool) or not isinstance(weight, int):
                raise NodeSelectorError([f"{where}.weight: expected an integer, got {weight!r}"])
            preference = _as_mapping(item.get("preference"), f"{where}.preference")
            if weight == 0 or _is_empty_term(preference):
                continue
            term = _compile_term(preference, f"{where}.preference", cache)
            if term.errors:
                errors.extend(term.errors)
            else:
                compiled.append((weight, term.labels, term.fields))
        if errors:
            raise NodeSelectorError(errors)
        self._terms = tuple(compiled)

    @classmethod
    def compile(cls, terms: Sequence[Mapping[str, Any]] | None) -> PreferredTerms:
        return cls(terms)

    @classmethod
    def from_pod_spec(
        cls, spec: Mapping[str, Any], *, cache: CompileCache | None = None
    ) -> PreferredTerms:
        """The preferred node-affinity terms of a pod spec (none when absent)."""
        node_affinity = _node_affinity_of(spec)
        return cls(
            node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution"),
            path="spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution",
            cache=cache,
        )

    def score(self, node: Node) -> int:
        """Sum of the weights of the terms that match ``node`` (before normalisation)."""
        labels = node.labels
        ints = node.int_labels
        name = node.name
        total = 0
        for weight, reqs, fields in self._terms:
            if _term_matches(reqs, fields, labels, ints, name):
                total += weight
        return total

    def __len__(self) -> int:
        return len(self._terms)

    def __repr__(self) -> str:
        return f"PreferredTerms(terms={len(self._terms)})"


def _node_affinity_of(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(spec, Mapping):
        raise InputError(f"invalid pod spec {spec!r}: expected a mapping")
    affinity = _as_mapping(spec.get("affinity"), "spec.affinity")
    return _as_mapping(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")


class RequiredNodeAffinity:
    """Everything that must hold for a pod to land on a node: ``spec.nodeSelector`` (exact match
    on every key) AND the required node affinity, as ``GetRequiredNodeAffinity`` builds it."""

    __slots__ = ("_node_selector", "affinity")

    def __init__(
        self,
        node_selector: Mapping[str, str] | None = None,
        affinity: NodeSelector | None = None,
    ) -> None:
        pairs: list[tuple[str, str]] = []
        for key, value in _as_mapping(node_selector, "spec.nodeSelector").items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise NodeSelectorError(
                    [f"spec.nodeSelector: expected string keys and values, got {key!r}: {value!r}"]
                )
            pairs.append((key, value))
        self._node_selector = tuple(pairs)
        self.affinity = affinity

    @classmethod
    def from_pod_spec(
        cls, spec: Mapping[str, Any], *, cache: CompileCache | None = None
    ) -> RequiredNodeAffinity:
        node_affinity = _node_affinity_of(spec)
        required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        affinity = None
        if required is not None:
            affinity = NodeSelector(
                required,
                path="spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
                cache=cache,
            )
        return cls(spec.get("nodeSelector"), affinity)

    @property
    def node_selector(self) -> Mapping[str, str]:
        return MappingProxyType(dict(self._node_selector))

    @property
    def errors(self) -> tuple[str, ...]:
        """Parse errors of skipped required terms (empty when there are none)."""
        return () if self.affinity is None else self.affinity.errors

    def match(self, node: Node) -> bool:
        labels = node.labels
        for key, value in self._node_selector:
            if labels.get(key, _ABSENT) != value:
                return False
        return True if self.affinity is None else self.affinity.match(node)

    def filter(self, nodes: Iterable[Node]) -> list[Node]:
        """The nodes the pod may land on as far as node affinity goes, in input order."""
        return [node for node in nodes if self.match(node)]

    def __repr__(self) -> str:
        selector = len(self._node_selector)
        return f"RequiredNodeAffinity(node_selector={selector}, affinity={self.affinity!r})"
