"""What the workloads of one ``explain`` call have in common, computed once per call and
dropped with it (no cache outlives the call): :class:`Shared`, and the readers that consult it
(``*_once``): declared requirements, requirement reprs, the requirement's compiled terms and
those terms checked for merging.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

import orjson

from cudasched.compat.verdict import Reason
from cudasched.explain.selectors import Selectors
from cudasched.nodes.scheme import GfdKeys
from cudasched.placement.compile import compile_requirement
from cudasched.placement.merge import checked_terms
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.nodeaffinity import NodeSelector
from cudasched.vocab.nodeterms import CompileCache
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.workloads import declared as declarations
from cudasched.workloads.gpu import GpuMemo

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase

__all__ = [
    "Shared",
    "checked_once",
    "declared_once",
    "repr_once",
    "requirement_terms_once",
]

# The annotations resolution's reader looks at: what a declared requirement depends on.
_DECLARING = (L.ANN_CUDA_VERSION, L.ANN_MIN_COMPUTE, L.ANN_POLICY, L.ANN_SHIPS_CUDA_COMPAT)


def declared_once(annotations: Mapping[str, Any], who: str, shared: Shared) -> Requirement | None:
    """:func:`cudasched.explain.eligibility.requirement_from_annotations`, parsed once per
    distinct set of values in a call (thousands of replicas declare the same few). Only answers
    are kept: a bad value raises for every workload that carries it, naming that workload."""
    get = annotations.get
    values = (get(_DECLARING[0]), get(_DECLARING[1]), get(_DECLARING[2]), get(_DECLARING[3]))
    # Types are part of the key: True == 1 == 1.0 in Python, but not as annotation values.
    key = (*values, *map(type, values))
    try:
        found = shared.annotated.get(key, _MISSING)
    except TypeError:  # an unhashable value (a list): read it every time
        return declarations.requirement_from_annotations(annotations, who)
    if found is _MISSING:
        found = shared.annotated[key] = declarations.requirement_from_annotations(annotations, who)
    return found


class _Memo(Enum):
    """The memo's miss: an enum member, so that ``is`` narrows what a look-up returned."""

    MISSING = 0


_MISSING = _Memo.MISSING


def repr_once(req: Requirement | None, shared: Shared) -> str:
    """``repr(req)``, once per requirement object of a call (workloads that declare the same
    requirement share one object; a dataclass repr formats every field)."""
    if req is None:
        return "None"
    found = shared.reprs.get(id(req))
    if found is None or found[0] is not req:
        found = shared.reprs[id(req)] = (req, repr(req))
    return found[1]


class Shared:
    """What the workloads of one ``explain`` / ``explain_many`` call have in common,
    computed once per call and dropped with it (no cache outlives the call).

    Thousands of workloads usually state a few dozen requirements and a few dozen selector
    shapes, so: requirement terms are compiled once per (requirement, policy, scheme, GFD keys);
    merges and compiled selectors once per (selectors, requirement terms); and every
    ``matchExpressions`` entry once per distinct expression (:class:`CompileCache`), since a
    merged affinity repeats the requirement's expressions in every term it crosses them into.
    Only compiled results are kept, not the merged pod specs they came from: those are many
    small dicts that would only feed the garbage collector.
    """

    __slots__ = (
        "annotated",
        "checked",
        "class_bound",
        "compiled",
        "declared",
        "fits",
        "gpu",
        "reprs",
        "requirement_selectors",
        "requirements",
        "selectors",
        "terms",
        "verdicts",
    )

    def __init__(self, *, class_bound: bool = False) -> None:
        # compile requirements with the CUDA class bound (placement.boundCudaClass), as the
        # webhook configured with it injects them
        self.class_bound = class_bound
        self.compiled = CompileCache()
        # the values (and their types) of the annotations a requirement is read from -> it
        self.annotated: dict[tuple[Any, ...], Requirement | None] = {}
        # requirement repr -> the first equal requirement read from annotations in this call
        self.declared: dict[str, Requirement] = {}
        # the JSON of the containers' resources -> the GPU resources they request (the pod
        # view's reading, kept for the call: replicas ask for the same)
        self.gpu: GpuMemo = {}
        # id of a requirement -> it and its repr (kept with it, so the id cannot be reused)
        self.reprs: dict[int, tuple[Requirement, str]] = {}
        # (what the compiler reads of a requirement, policy, scheme, GFD keys) -> (terms,
        # requirement error); see requirement_terms_once
        self.requirements: dict[Any, tuple[tuple[Any, ...], str | None]] = {}
        # the JSON of a terms tuple -> the first equal tuple compiled in this call
        self.terms: dict[bytes, tuple[Any, ...]] = {}
        # id of a terms tuple held in ``requirements`` -> its compiled selector
        # and whether it matches the node at each fleet position asked so far (shared by every
        # spec merged with these terms)
        self.requirement_selectors: dict[int, tuple[NodeSelector, dict[int, bool]]] = {}
        # (selector identity, has a requirement, id of its terms) -> compiled selectors
        self.selectors: dict[tuple[bytes, bool, int], Selectors] = {}
        # (requirement repr, policy, id of a fleet's facts group) -> the engine's verdict
        # status and its reasons with their fixes: they depend on nothing else, so workloads
        # with other selectors but the same requirement share them
        self.verdicts: dict[tuple[str, Policy, int], tuple[bool, tuple[Reason, ...]]] = {}
        # id of a terms tuple held in ``requirements`` -> the terms checked for merging once
        # (the merge reports invalid terms itself: those are passed as they are)
        self.checked: dict[int, Sequence[Any]] = {}
        # (selector identity, id of a terms tuple, GPU requests) -> whether any node of the
        # fleet can run such a pod (explain/fit.requirement_runs_anywhere)
        self.fits: dict[tuple[bytes, int, frozenset[str]], bool] = {}


def checked_once(terms: tuple[Any, ...], shared: Shared) -> Sequence[Any]:
    """``terms`` checked for merging once per call (``terms`` is the very tuple the call's
    requirement cache holds, so its id names it)."""
    found = shared.checked.get(id(terms))
    if found is None:
        try:
            found = checked_terms(terms)
        except InputError:
            found = terms  # the merge says why, as it always did
        shared.checked[id(terms)] = found
    return found


def requirement_terms_once(
    req: Requirement,
    effective: Policy,
    chosen: L.LabelScheme,
    gfd_keys: GfdKeys,
    kb: KnowledgeBase,
    shared: Shared,
) -> tuple[tuple[Any, ...], str | None]:
    """The requirement's node-selector terms (or why there are none), once per call."""
    # What the compiler reads of the requirement: its rule-relevant fields (``needs``) and the
    # CUDA versions as written (an unknown toolkit's message quotes the patch level), never
    # its source; requirements that differ only in wording compile once.
    framework_cuda = req.framework.cuda if req.framework is not None else None
    key = (
        req.needs,
        None if req.cuda is None else str(req.cuda),
        None if framework_cuda is None else str(framework_cuda),
        effective,
        chosen,
        gfd_keys,
    )
    found = shared.requirements.get(key)
    if found is None:
        try:
            terms = tuple(
                compile_requirement(
                    req, effective, chosen, kb, gfd_keys, class_bound=shared.class_bound
                )
            )
        except InputError as exc:
            # No selector can express "no node": the webhook refuses such a pod, so no node is
            # eligible; the engine's per-node reasons say why.
            found = ((), str(exc))
        else:
            # Requirements that differ only in wording (their source) compile to equal terms:
            # one tuple for all of them lets their workloads share merges and selectors.
            found = (shared.terms.setdefault(orjson.dumps(terms), terms), None)
        shared.requirements[key] = found
    return found
