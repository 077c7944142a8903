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
integers (:mod:`cudasched.vocab.nodeterms`), and nodes carry their integer-valued labels
pre-parsed, so matching one selector against thousands of nodes does no parsing at all. Label
keys and values are checked as apimachinery does (:mod:`cudasched.vocab.labelsyntax`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from cudasched.vocab.errors import InputError
from cudasched.vocab.labelsyntax import parse_int64
from cudasched.vocab.nodeterms import (
    ABSENT,
    CompileCache,
    FieldRequirement,
    LabelRequirement,
    NodeSelectorError,
    compile_term,
    selector_list,
    selector_mapping,
    term_matches,
)

__all__ = [
    "Node",
    "NodeSelector",
    "PreferredTerms",
    "RequiredNodeAffinity",
]


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


def _is_empty_term(term: Mapping[str, Any]) -> bool:
    return not term.get("matchExpressions") and not term.get("matchFields")


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
        selector = selector_mapping(node_selector, path or "nodeSelector")
        prefix = f"{path}.nodeSelectorTerms" if path else "nodeSelectorTerms"
        terms: list[tuple[tuple[LabelRequirement, ...], tuple[FieldRequirement, ...] | None]] = []
        errors: list[str] = []
        for i, raw in enumerate(selector_list(selector.get("nodeSelectorTerms"), prefix)):
            term = selector_mapping(raw, f"{prefix}[{i}]")
            if _is_empty_term(term):
                continue
            compiled = compile_term(term, f"{prefix}[{i}]", cache)
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
            if term_matches(reqs, fields, labels, ints, name):
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
        for i, raw in enumerate(selector_list(terms, prefix)):
            where = f"{prefix}[{i}]"
            item = selector_mapping(raw, where)
            weight = item.get("weight", 0)
            if weight is None:
                weight = 0
            if isinstance(weight, bool) or not isinstance(weight, int):
                raise NodeSelectorError([f"{where}.weight: expected an integer, got {weight!r}"])
            preference = selector_mapping(item.get("preference"), f"{where}.preference")
            if weight == 0 or _is_empty_term(preference):
                continue
            term = compile_term(preference, f"{where}.preference", cache)
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
            if term_matches(reqs, fields, labels, ints, name):
                total += weight
        return total

    def __len__(self) -> int:
        return len(self._terms)

    def __repr__(self) -> str:
        return f"PreferredTerms(terms={len(self._terms)})"


def _node_affinity_of(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(spec, Mapping):
        raise InputError(f"invalid pod spec {spec!r}: expected a mapping")
    affinity = selector_mapping(spec.get("affinity"), "spec.affinity")
    return selector_mapping(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")


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
        for key, value in selector_mapping(node_selector, "spec.nodeSelector").items():
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
            if labels.get(key, ABSENT) != value:
                return False
        return True if self.affinity is None else self.affinity.match(node)

    def filter(self, nodes: Iterable[Node]) -> list[Node]:
        """The nodes the pod may land on as far as node affinity goes, in input order."""
        return [node for node in nodes if self.match(node)]

    def __repr__(self) -> str:
        selector = len(self._node_selector)
        return f"RequiredNodeAffinity(node_selector={selector}, affinity={self.affinity!r})"
