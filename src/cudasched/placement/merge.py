"""Merging cudasched's node-selector terms into a pod spec's own node affinity.

This is the pod-spec half of the placement compiler (``placement`` re-exports it). Kubernetes
ORs node-selector terms and ANDs the expressions inside one, so adding "and the node must run
CUDA >= X" to a pod that already has required terms means ANDing our alternatives into *every*
existing term: the cross product. Anything else either widens the user's constraint (appending
terms) or replaces it.

**The user's constraints are never dropped.** Every expression the user wrote stays, whatever
its key (a ``nvidia.com/cuda.runtime.major In [12]`` of their own is ANDed with ours, not
replaced by it), so the nodes a pod may use after the merge are always a subset of the nodes
it allowed before. Only cudasched's own earlier injection is replaced, which keeps the merge
idempotent (the webhook may be invoked twice on one object, an InferenceService's affinity
reaches its pods) and lets a changed requirement replace the old one.

**How our injection is recognised: a marker.** Each term cudasched writes carries the
expression ``cudasched.io/injected DoesNotExist`` (:data:`MARKER`), followed by cudasched's
own expressions; the user's part of the term comes before it. Before merging, the marker and
everything after it is removed from each term, and a term that held nothing else is dropped.
No node carries the ``cudasched.io/injected`` label (the agent never writes it, and nobody
should), so the marker matches every node and changes no answer. Recognising our terms by
their keys instead would strip the user's own expressions on those keys, which is how a pod's
own CUDA 12 constraint used to be lost; recognising them by recomputing what we would compile
fails as soon as the requirement or the cluster's label scheme changes. Terms written by a
cudasched without the marker are treated as the user's: they stay and are ANDed with the new
ones, which can only narrow the pod's nodes. Every result is a new dict; the input is never
mutated.

What comes out is always acceptable to the API server, because a JSON patch that fails to apply
fails the request even under ``failurePolicy: Ignore``: no empty term list, ``Gt``/``Lt`` with
exactly one integer that is a valid label value, weights in 1..100.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

import orjson

from cudasched.vocab.errors import InputError
from cudasched.vocab.jsontree import copy_json
from cudasched.vocab.labels import OWNED_KEYS
from cudasched.vocab.nodeaffinity import NodeSelector
from cudasched.vocab.nodeterms import NodeSelectorError

__all__ = [
    "INJECTED_KEY",
    "MARKER",
    "MAX_MERGED_TERMS",
    "PREFERRED_KEY",
    "REQUIRED_KEY",
    "AffinityMode",
    "CheckedTerms",
    "checked_terms",
    "merge_preferred",
    "merge_required",
    "node_affinity",
]

REQUIRED_KEY = "requiredDuringSchedulingIgnoredDuringExecution"
#: The node label key of the marker; no node carries it.
INJECTED_KEY = "cudasched.io/injected"
#: The expression that starts cudasched's part of a term (see the module docstring).
MARKER: dict[str, Any] = {"key": INJECTED_KEY, "operator": "DoesNotExist"}
PREFERRED_KEY = "preferredDuringSchedulingIgnoredDuringExecution"

# The cross product of a pod's terms with our alternatives grows multiplicatively. Past this many
# terms (and only when the merge itself made the list grow past it) we refuse rather than emit an
# affinity nobody can read or silently drop alternatives. A CUDA floor over GFD's split labels
# compiles to up to ~30 terms (compute-capability groups x CUDA label x the driver floor the
# engine checks the label against), so this leaves room for four user terms.
MAX_MERGED_TERMS = 128


class AffinityMode(StrEnum):
    """Whether cudasched's terms are a hard constraint or a scheduling preference."""

    REQUIRED = "required"
    PREFERRED = "preferred"

    @classmethod
    def parse(cls, value: str | AffinityMode) -> AffinityMode:
        if isinstance(value, AffinityMode):
            return value
        if isinstance(value, str):
            try:
                return cls(value.strip().lower())
            except ValueError:
                pass
        allowed = ", ".join(m.value for m in cls)
        raise InputError(f"invalid affinity mode {value!r}: expected one of {allowed}")


# --------------------------------------------------------------------------- our terms


def _checked_terms(terms: Sequence[Mapping[str, Any]], *, owned_only: bool) -> list[dict[str, Any]]:
    """Validate the terms we are about to write and return deep copies, duplicates removed.

    Our terms must stand on their own in front of the API server and the scheduler: each has at
    least one expression, no ``matchFields``, and parses without error. With ``owned_only`` every
    key must be an owned key, otherwise a second merge could not recognise and strip them and
    the merge would stop being idempotent.
    """
    if isinstance(terms, str | bytes) or not isinstance(terms, Sequence):
        raise InputError(f"invalid node selector terms {terms!r}: expected a list of terms")
    checked: list[dict[str, Any]] = []
    for i, term in enumerate(terms):
        where = f"terms[{i}]"
        if not isinstance(term, Mapping):
            raise InputError(f"invalid {where} {term!r}: expected a node selector term (mapping)")
        unknown = set(term) - {"matchExpressions", "matchFields"}
        if unknown:
            raise InputError(
                f"invalid {where}: unknown field(s) {sorted(unknown)}: expected matchExpressions"
            )
        if term.get("matchFields"):
            raise InputError(
                f"invalid {where}: cudasched terms select by labels only, got matchFields "
                f"{term['matchFields']!r}"
            )
        exprs = term.get("matchExpressions")
        if not isinstance(exprs, list | tuple) or not exprs:
            raise InputError(
                f"invalid {where}: expected a non-empty matchExpressions list, got {exprs!r} "
                "(an empty term matches no node)"
            )
        errors = NodeSelector({"nodeSelectorTerms": [term]}).errors
        if errors:
            prefix = "nodeSelectorTerms[0]"
            raise NodeSelectorError([where + e.removeprefix(prefix) for e in errors])
        if owned_only:
            for j, expr in enumerate(exprs):
                if not _owned(expr):
                    raise InputError(
                        f"invalid {where}.matchExpressions[{j}].key {expr.get('key')!r}: "
                        "cudasched only writes expressions on the keys it owns "
                        "(cudasched.vocab.labels.OWNED_KEYS)"
                    )
        clean = {"matchExpressions": [_clean_expression(expr) for expr in exprs]}
        if clean not in checked:
            checked.append(clean)
    return checked


class CheckedTerms(tuple[dict[str, Any], ...]):
    """Terms :func:`checked_terms` validated and copied: the merges take them as they are."""

    __slots__ = ()


def checked_terms(terms: Sequence[Mapping[str, Any]]) -> CheckedTerms:
    """``terms`` validated for :func:`merge_required` and :func:`merge_preferred` once (the
    check of a large compiled selector costs more than the merge): pass the result to them as
    often as needed. Raises :class:`InputError` as the merges would."""
    return CheckedTerms(_checked_terms(terms, owned_only=True))


def _ours(terms: Sequence[Mapping[str, Any]]) -> Sequence[dict[str, Any]]:
    if isinstance(terms, CheckedTerms):
        return terms
    return _checked_terms(terms, owned_only=True)


def _clean_expression(expr: Mapping[str, Any]) -> dict[str, Any]:
    """A fresh copy in the canonical shape: ``values`` only when there are any."""
    out: dict[str, Any] = {"key": expr["key"], "operator": expr["operator"]}
    values = expr.get("values")
    if values:
        out["values"] = list(values)
    return out


def _weight(weight: int) -> int:
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
        raise InputError(f"invalid weight {weight!r}: expected an integer from 1 to 100")
    return weight


# --------------------------------------------------------------------------- pod-spec plumbing


def _copy_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(spec, Mapping):
        raise InputError(f"invalid pod spec {spec!r}: expected a mapping")
    copied: dict[str, Any] = copy_json(spec)
    return copied


def _node_affinity(spec: dict[str, Any], *, create: bool) -> dict[str, Any] | None:
    """``spec.affinity.nodeAffinity`` of our private copy, created on demand."""
    affinity = spec.get("affinity")
    if affinity is None:
        if not create:
            return None
        affinity = spec["affinity"] = {}
    elif not isinstance(affinity, dict):
        raise InputError(f"invalid spec.affinity {affinity!r}: expected a mapping")
    node_affinity = affinity.get("nodeAffinity")
    if node_affinity is None:
        if not create:
            return None
        node_affinity = affinity["nodeAffinity"] = {}
    elif not isinstance(node_affinity, dict):
        raise InputError(
            f"invalid spec.affinity.nodeAffinity {node_affinity!r}: expected a mapping"
        )
    return node_affinity


def _drop(spec: dict[str, Any], key: str) -> None:
    """Remove ``nodeAffinity[key]`` and any container that removal left empty, so stripping our
    only constraint yields the spec the user would have written without it."""
    affinity = spec["affinity"]
    node_affinity = affinity["nodeAffinity"]
    del node_affinity[key]
    if not node_affinity:
        del affinity["nodeAffinity"]
        if not affinity:
            del spec["affinity"]


def _expressions(term: Mapping[str, Any], where: str) -> list[Mapping[str, Any]]:
    exprs = term.get("matchExpressions")
    if exprs is None:
        return []
    if not isinstance(exprs, list):
        raise InputError(f"invalid {where}.matchExpressions {exprs!r}: expected a list")
    for j, expr in enumerate(exprs):
        if not isinstance(expr, Mapping):
            raise InputError(
                f"invalid {where}.matchExpressions[{j}] {expr!r}: expected a node selector "
                "requirement (mapping)"
            )
    return exprs


def _owned(expr: Mapping[str, Any]) -> bool:
    """Whether an expression is on a key cudasched owns (a non-string key never is: it is the
    user's malformed input, left for the API server to judge)."""
    key = expr.get("key")
    return isinstance(key, str) and key in OWNED_KEYS


def _is_marker(expr: Mapping[str, Any]) -> bool:
    return expr.get("key") == INJECTED_KEY


def _user_part(exprs: list[Mapping[str, Any]]) -> list[Mapping[str, Any]] | None:
    """The expressions before our marker, or None when the term has no marker."""
    for i, expr in enumerate(exprs):
        if _is_marker(expr):
            return exprs[:i]
    return None


def _identity(term: Any) -> bytes:
    """A hashable identity of a term (canonical JSON), so de-duplication is linear."""
    try:
        return orjson.dumps(term, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise InputError(f"invalid node selector term {term!r}: not JSON ({exc})") from None


def _is_empty_term(term: Mapping[str, Any]) -> bool:
    return not term.get("matchExpressions") and not term.get("matchFields")


# --------------------------------------------------------------------------- required


def _strip_required(terms: list[Any]) -> list[tuple[Any, bool]]:
    """Remove our earlier injection (the marker and what follows it) from the pod's terms.

    Returns ``(term, crossable)`` pairs. A term left empty by stripping held nothing but our
    constraint and is dropped; a stripped term equal to an earlier one is a leftover of an
    earlier cross product and is dropped too. Terms the user wrote empty (they match no node)
    are kept verbatim and never crossed: ANDing our expressions into them would make them match.
    """
    where = f"spec.affinity.nodeAffinity.{REQUIRED_KEY}.nodeSelectorTerms"
    result: list[tuple[Any, bool]] = []
    seen: set[bytes] = set()
    for i, term in enumerate(terms):
        if term is None:
            result.append((term, False))
            continue
        if not isinstance(term, dict):
            raise InputError(f"invalid {where}[{i}] {term!r}: expected a node selector term")
        exprs = _expressions(term, f"{where}[{i}]")
        user = _user_part(exprs)
        kept = exprs if user is None else user
        if user is None:
            result.append((term, not _is_empty_term(term)))
            seen.add(_identity(term))
            continue
        stripped = {k: v for k, v in term.items() if k != "matchExpressions"}
        if kept:
            stripped["matchExpressions"] = kept
        if _is_empty_term(stripped):
            continue
        identity = _identity(stripped)
        if identity in seen:
            continue
        seen.add(identity)
        result.append((stripped, True))
    return result


def _and_terms(term: Mapping[str, Any], ours: Mapping[str, Any]) -> dict[str, Any]:
    """``term`` (copied) AND one of our alternatives. Our expressions are shared, not copied:
    they come from checked terms (:func:`checked_terms`, or :func:`_ours`' fresh copies), which
    nothing edits, and a large cluster's alternatives crossed into every term of the pod were
    most of a merge's cost. A result is read or serialised, never edited in place."""
    anded: dict[str, Any] = copy_json(term)
    anded["matchExpressions"] = [
        *(anded.get("matchExpressions") or []),
        dict(MARKER),
        *ours["matchExpressions"],
    ]
    return anded


def merge_required(spec: Mapping[str, Any], terms: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Return a new pod spec whose required node affinity is the pod's own AND ``terms``.

    ``terms`` are ORed alternatives over owned keys; ``[]`` means "no constraint", in which case
    only our earlier injection is removed. Every expression the user wrote is kept, so the
    result never admits a node the pod's own affinity refuses. ``spec.nodeSelector`` and every
    other part of the affinity are left as they are.
    """
    ours = _ours(terms)
    out = _copy_spec(spec)
    node_affinity = _node_affinity(out, create=bool(ours))
    required = None if node_affinity is None else node_affinity.get(REQUIRED_KEY)
    if required is None:
        if ours:
            assert node_affinity is not None
            node_affinity[REQUIRED_KEY] = {"nodeSelectorTerms": [_and_terms({}, t) for t in ours]}
        return out
    where = f"spec.affinity.nodeAffinity.{REQUIRED_KEY}"
    if not isinstance(required, dict):
        raise InputError(f"invalid {where} {required!r}: expected a node selector (mapping)")
    existing = required.get("nodeSelectorTerms")
    if not isinstance(existing, list) or not existing:
        raise InputError(
            f"invalid {where}.nodeSelectorTerms {existing!r}: expected at least one term "
            "(the API server rejects an empty list, and the scheduler matches no node with it)"
        )
    kept = _strip_required(existing)
    if not kept:
        if ours:
            required["nodeSelectorTerms"] = [_and_terms({}, t) for t in ours]
        else:
            _drop(out, REQUIRED_KEY)
        return out
    if not ours:
        required["nodeSelectorTerms"] = [term for term, _ in kept]
        return out
    # The limit applies only when the merge itself grows the pod past it, and is checked while
    # crossing, so a pod with thousands of terms costs at most one pass over them.
    limit = max(MAX_MERGED_TERMS, len(existing))
    merged: list[Any] = []
    crossed: set[bytes] = set()
    for term, crossable in kept:
        if not crossable:
            merged.append(term)
            continue
        for alternative in ours:
            anded = _and_terms(term, alternative)
            identity = _identity(anded)
            if identity not in crossed:
                crossed.add(identity)
                merged.append(anded)
        if len(merged) > limit:
            raise InputError(
                f"merging {len(ours)} CUDA alternative(s) into {len(kept)} required node "
                f"selector term(s) gives more than the limit of {MAX_MERGED_TERMS} terms: simplify "
                "the pod's node affinity or set the requirement by annotation"
            )
    required["nodeSelectorTerms"] = merged
    return out


# --------------------------------------------------------------------------- preferred


def _is_ours_preferred(item: Any) -> bool:
    """A preferred term is ours when its expressions start with our marker."""
    if not isinstance(item, Mapping):
        return False
    preference = item.get("preference")
    if not isinstance(preference, Mapping) or preference.get("matchFields"):
        return False
    exprs = preference.get("matchExpressions")
    if not isinstance(exprs, list) or not exprs:
        return False
    return isinstance(exprs[0], Mapping) and _is_marker(exprs[0])


def merge_preferred(
    spec: Mapping[str, Any], terms: Sequence[Mapping[str, Any]], weight: int = 100
) -> dict[str, Any]:
    """Return a new pod spec with our preferred terms (replacing earlier ones) at ``weight``.

    Preferred terms we wrote before are recognised by our marker and replaced; the user's
    preferred terms, whatever keys they use, keep their order and come first.
    """
    weight = _weight(weight)
    ours = _ours(terms)
    out = _copy_spec(spec)
    node_affinity = _node_affinity(out, create=bool(ours))
    existing = None if node_affinity is None else node_affinity.get(PREFERRED_KEY)
    if existing is None:
        existing = []
    elif not isinstance(existing, list):
        raise InputError(
            f"invalid spec.affinity.nodeAffinity.{PREFERRED_KEY} {existing!r}: expected a list"
        )
    kept = [item for item in existing if not _is_ours_preferred(item)]
    merged = kept + [{"weight": weight, "preference": _and_terms({}, term)} for term in ours]
    if merged:
        assert node_affinity is not None
        node_affinity[PREFERRED_KEY] = merged
    elif len(kept) != len(existing):
        _drop(out, PREFERRED_KEY)
    return out


# --------------------------------------------------------------------------- bare object


def node_affinity(
    terms: Sequence[Mapping[str, Any]], mode: str | AffinityMode, weight: int = 100
) -> dict[str, Any]:
    """The bare ``nodeAffinity`` object for ``terms``, for users who paste it into their own
    manifests (``cudasched affinity``). ``[]`` (no constraint) gives ``{}``."""
    mode = AffinityMode.parse(mode)
    weight = _weight(weight)
    checked = _checked_terms(terms, owned_only=False)
    if not checked:
        return {}
    if mode is AffinityMode.REQUIRED:
        return {REQUIRED_KEY: {"nodeSelectorTerms": checked}}
    return {PREFERRED_KEY: [{"weight": weight, "preference": term} for term in checked]}
