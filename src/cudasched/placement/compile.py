"""The placement compiler: a workload requirement as node-selector terms in a label scheme.

The compiled terms select exactly the nodes :func:`cudasched.compat.engine.check` does not call
``incompatible``, for nodes whose labels were written by the scheme's publisher (our agent, or
GFD with both label generations in step). The compiler does not re-implement the rules: it asks
the engine's own helpers (:func:`~cudasched.compat.coverage.arch_window_reason`,
:func:`~cudasched.compat.coverage.framework_coverage`) about every compute capability the knowledge
base can answer for, and turns the answer into label expressions. The structure of the result is::

    OR over GPU groups g (same driver-branch cap, same framework coverage):
        compute capability in g  AND  driver branch <= cap(g)
        AND ( native  OR  forward-compat  OR  minor-version-compat )
        AND  the container toolkit's gate (when the requirement carries one; legacy mode)
        AND  where the image's compat libraries do not break CUDA (when it ships one)

with the disjunction expanded into terms (Kubernetes ORs terms and ANDs expressions in a term),
then put in a normal form: each label's expressions merged into one range, empty terms and terms
inside another dropped. Where the groups differ only in their cap, the same nodes are also
written by driver band (every GPU up to the lowest cap, then the GPUs still supported above
it, where the driver floor is implied) and the smaller form is kept: kube-scheduler parses every
term per pod and evaluates them on each node it filters (CUDA 12.4 over GFD: 5 terms, not 12).
"native" is the driver floor of that CUDA: the engine reads a node's CUDA from its driver
(``nodes.reconcile_cuda``), the CUDA labels only where no driver is labelled, and those nodes
are never admitted by a compiled selector (stricter, never wider). The gate's boxes
(``requirecuda.Gate.boxes``) are read per GPU class: data-center brands where
``gpu.datacenter=true`` or GFD's ``gpu.product`` names a known data-center GPU. How each piece
is written in each scheme: :mod:`cudasched.placement.schemeterms`.

**Scope of the guarantee.** Equality with the engine holds for nodes labelled the way the
publishers label them: our agent writes every ``cudasched.io/`` code, GFD writes each label
group (driver, CUDA, compute capability, in each key generation) whole. Where labels are missing
the selector stays on the safe side: it may skip a node whose facts the engine could derive
(CUDA from the driver, compute capability from the product name), it never admits a node the
engine rejects. Both properties are tested with generated label sets.

**Forward compatibility over GFD is not compiled.** It needs "this is a data-center GPU", which
GFD only carries as a product name (``nvidia.com/gpu.product``), and product names are neither
complete in any table nor stable (``-SHARED``, ``-MIG-1g.5gb`` suffixes, ``NVIDIA`` prefix that
depends on the driver). Over GFD a ``forward-compat`` requirement therefore compiles to its
native and minor-compat alternatives: the selector is stricter than the engine there (it never
admits a node the engine rejects), and the ``cudasched`` scheme, whose agent publishes
``cudasched.io/gpu.datacenter``, is the way to get forward-compat placement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cudasched.compat.compatlibs import supported_branches
from cudasched.compat.engine import effective_cuda, resolve_policy
from cudasched.nodes.scheme import GFD_KEYS, GfdKeys, GfdKeySet
from cudasched.placement.classbound import class_bounded
from cudasched.placement.groups import Group, plan_groups
from cudasched.placement.normalform import Ranges, and_ranges, normal_terms, to_ranges
from cudasched.placement.schemeterms import (
    Expr,
    Term,
    compat_terms,
    gate_terms,
    gfd_alt,
    gfd_compute,
    gt,
    lt,
    ours_alt,
    ours_cap,
    ours_compute,
)
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.requirements import Policy, Requirement, ToolkitMode

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase

__all__ = [
    "compile_requirement",
    "forward_compat_compiled",
]


def forward_compat_compiled(scheme: LabelScheme | str) -> bool:
    """Whether forward-compat alternatives can be expressed in ``scheme`` (see module doc)."""
    return LabelScheme.parse(str(scheme)) is LabelScheme.CUDASCHED


# --------------------------------------------------------------------------- driver bands


def _banded(groups: list[Group], scheme: LabelScheme, keys: GfdKeySet) -> list[list[Expr]] | None:
    """The groups' nodes again, split by driver branch instead of by GPU: a band runs from one
    last branch (``cap``) to the next; in it every GPU whose cap is at or above the band's top
    qualifies, and a band that starts above an alternative's driver floor needs no floor. For
    CUDA 12.4 over GFD (Pascal and Volta end at R580): (every GPU, driver floor to R580) OR (the
    GPUs after Volta, R581 and later) is 5 terms where one group per cap makes 12.

    None when the groups do not share their alternatives (the bands would mix them) or have
    no cap: the per-group terms are the only form then."""
    alts = groups[0].alts
    if any(g.alts != alts for g in groups) or any(a.kind == "fc" for a in alts):
        return None
    caps = sorted({g.cap for g in groups if g.cap is not None})
    if not caps or not alts:
        return None
    terms: list[list[Expr]] = []
    for low, high in zip([None, *caps], [*caps, None], strict=True):
        codes = sorted(
            code
            for g in groups
            if g.cap is None or (high is not None and g.cap >= high)
            for code in g.codes
        )
        if codes:
            terms += _band(Group(tuple(codes), None, alts), low, high, scheme, keys)
    return terms


def _band(
    group: Group, low: int | None, high: int | None, scheme: LabelScheme, keys: GfdKeySet
) -> list[list[Expr]]:
    """The terms of one band: the GPUs of ``group``, drivers after branch ``low`` up to branch
    ``high`` (open ends where None), and the alternatives' floors the band does not imply."""
    alts = group.alts
    band: list[Expr] = []
    if scheme is LabelScheme.CUDASCHED:
        if low is not None:
            band.append(gt(L.DRIVER_CODE, (low + 1) * 1_000_000 - 1))
        if high is not None:
            band += ours_cap(high)
        cc_terms = ours_compute(group, False)
    else:
        if low is not None:
            band.append(gt(keys.driver_major, low))
        if high is not None:
            band.append(lt(keys.driver_major, high + 1))
        cc_terms = gfd_compute(group, False)
    # every driver of the band meets some alternative's floor: no floor to write
    implied = low is not None and any(
        a.floor is not None and a.floor.code <= (low + 1) * 1_000_000 for a in alts
    )
    if implied:
        alt_terms: list[list[Expr]] = [[]]
    elif scheme is LabelScheme.CUDASCHED:
        alt_terms = [t for alt in alts for t in ours_alt(alt)]
    else:
        alt_terms = [t for alt in alts for t in gfd_alt(keys, alt)]
    return [[*cc, *band, *alt] for cc in cc_terms for alt in alt_terms]


def _size(terms: list[Term]) -> tuple[int, int]:
    return len(terms), sum(len(t["matchExpressions"]) for t in terms)


# --------------------------------------------------------------------------- compile


def _start_terms(
    req: Requirement, scheme: LabelScheme, keys: GfdKeySet, kb: KnowledgeBase
) -> tuple[list[Ranges] | None, list[Ranges] | None]:
    """Where the container starts and CUDA works once it has, as ranges to AND in: the
    container toolkit's gate (legacy mode only; ``None``: nothing to check) and where the
    image's compat libraries do not break CUDA (``None``: it ships none known)."""
    gate = None
    if req.gate is not None and req.toolkit is ToolkitMode.LEGACY:
        gate = to_ranges(gate_terms(req.gate, scheme, keys, kb))
    compat = None
    if req.compat is not None:
        supported = supported_branches(req.compat, kb)
        compat = to_ranges(compat_terms(req.compat, req.toolkit, supported, scheme, keys, kb))
    return gate, compat


def _no_node(req: Requirement, *, gated: bool) -> InputError:
    """Why the start terms (the gate or the compat libraries) left no node."""
    why = (
        f"the container toolkit's NVIDIA_REQUIRE_CUDA ({req.gate.text}) holds on no node "
        "the requirement allows"
        if gated and req.gate is not None
        else "the image's compat libraries break CUDA on every node the requirement allows"
    )
    return InputError(f"no node can run {req.describe()}: {why}")


def compile_requirement(
    req: Requirement,
    policy: Policy | str,
    scheme: LabelScheme | str,
    kb: KnowledgeBase,
    gfd_keys: GfdKeys | str = GfdKeys.NEW,
    *,
    class_bound: bool = False,
) -> list[Term]:
    """Node-selector terms (ORed) that admit exactly the nodes able to run ``req``.

    ``[]`` means "no constraint" (an empty requirement). ``scheme`` must be concrete: resolve
    ``auto`` with :func:`choose_scheme` (and :func:`choose_gfd_keys`) first. Raises
    :class:`InputError` for a requirement no node could ever satisfy (an unknown toolkit, a
    compute-capability floor beyond every architecture the toolkit builds for, a framework whose
    CUDA is unknown): there is no selector for "nothing", and the caller must tell the user.
    The requirement's own ``policy`` overrides ``policy``. ``class_bound`` (the
    ``placement.boundCudaClass`` setting) also bounds the agent's CUDA class label in every
    term that bounds the driver, as that bound implies (:mod:`cudasched.placement.classbound`:
    what Kueue's flavors let it see); it changes nothing in the ``gfd`` scheme, which has no
    class label.
    """
    pol = resolve_policy(req, policy)
    scheme = LabelScheme.parse(str(scheme))
    if scheme is LabelScheme.AUTO:
        raise InputError(
            "label scheme 'auto' must be resolved against the cluster's nodes first "
            "(placement.choose_scheme): expected cudasched or gfd"
        )
    keys = GFD_KEYS[GfdKeys.parse(gfd_keys)]
    groups = plan_groups(req, pol, scheme, kb)
    if groups is None:
        return []
    open_ended = effective_cuda(req) is None

    terms: list[list[Expr]] = []
    for group in groups:
        if scheme is LabelScheme.CUDASCHED:
            cc_terms = ours_compute(group, open_ended)
            cap = ours_cap(group.cap) if group.cap is not None else []
            alt_terms = [t for alt in group.alts for t in ours_alt(alt)]
        else:
            cc_terms = gfd_compute(group, open_ended)
            cap = [lt(keys.driver_major, group.cap + 1)] if group.cap is not None else []
            alt_terms = [t for alt in group.alts for t in gfd_alt(keys, alt)]
        for cc_exprs in cc_terms:
            for alt_exprs in alt_terms or [[]]:
                terms.append([*cc_exprs, *cap, *alt_exprs])
    gate, compat = _start_terms(req, scheme, keys, kb)

    def normal(terms: list[list[Expr]]) -> list[Term]:
        ranges = to_ranges(terms)
        for other in (gate, compat):
            if other is not None:
                ranges = and_ranges(ranges, other)
        return normal_terms(ranges)

    out = normal(terms)
    # The same nodes split by driver band instead, when that is smaller (the scheduler parses
    # every term of every pod and evaluates them on every node it filters).
    banded = None if open_ended else _banded(groups, scheme, keys)
    if banded is not None:
        smaller = normal(banded)
        if _size(smaller) < _size(out):
            out = smaller
    if not out:
        raise _no_node(req, gated=gate is not None)
    if class_bound and scheme is LabelScheme.CUDASCHED:
        out = class_bounded(out, kb)
    return out
