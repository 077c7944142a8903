"""The placement compiler: a workload requirement as node-selector terms in a label scheme.

The compiled terms select exactly the nodes :func:`cudasched.compat.engine.check` does not call
``incompatible``, for nodes whose labels were written by the scheme's publisher (our agent, or
GFD with both label generations in step). The compiler does not re-implement the rules: it asks
the engine's own helpers (:func:`~cudasched.compat.engine.arch_window_reason`,
:func:`~cudasched.compat.engine.framework_coverage`) about every compute capability the knowledge
base can answer for, and turns the answer into label expressions. The structure of the result is::

    OR over GPU groups g (same driver-branch cap, same framework coverage):
        compute capability in g  AND  driver branch <= cap(g)
        AND ( native  OR  forward-compat  OR  minor-version-compat )
        AND  the container toolkit's gate (when the requirement carries one)

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
``gpu.datacenter=true`` or GFD's ``gpu.product`` names a known data-center GPU.

How each piece is written (Kubernetes ``Gt``/``Lt`` take one base-10 integer and every value
must be a valid label value, so never a negative number: ``reference/kserve-k8s.md``):

* ``cudasched`` scheme: every bound is one ``Gt``/``Lt`` on an integer code: CUDA >= 12.4 is
  ``cudasched.io/cuda.code Gt 12039``; a compute-capability range is ``gpu.compute.code Gt lo-1``
  (``Lt hi+1``); the minor-compat floor is ``driver.code Gt floor-1``; a driver-branch cap is
  ``driver.code Lt (cap+1)*1000000``; forward compatibility is
  ``gpu.datacenter In [true]`` AND ``driver.branch In [535, ...]`` (plus ``driver.code`` bounds
  spanning those branches, so the branch label never stands in for a missing driver version).
* ``gfd`` scheme: CUDA >= M.m is ``(major Gt M) OR (major In [M] AND minor Gt m-1)``, a single
  ``major Gt M-1`` for M.0 (never ``Gt -1``); compute capabilities are ``major In [..]`` AND
  ``minor In [..]`` over ``nvidia.com/gpu.compute.major|minor`` (GFD prints plain integers);
  the driver floor is the lexicographic comparison over
  ``cuda.driver-version.major|minor|revision`` (deprecated: ``cuda.driver.major|minor|rev``),
  written with ``Gt``/``Lt`` only because GFD keeps leading zeros (``07``) that ``In`` would
  miss; a branch cap is ``driver major Lt cap+1``.

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

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched.compat.engine import (
    Coverage,
    arch_window_reason,
    effective_cuda,
    framework_coverage,
    gate_forward_compat_branches,
    resolve_policy,
)
from cudasched.nodes.scheme import GFD_KEYS, GfdKeys, GfdKeySet
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.requirecuda import ALL_BRANDS, DATACENTER_BRANDS, OTHER_BRANDS, Box, Gate
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import ComputeCapability, CudaVersion, DriverVersion

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase

__all__ = [
    "compile_requirement",
    "forward_compat_compiled",
]

Term = dict[str, Any]
Expr = dict[str, Any]

_MAX_MAJOR = 99  # compute-capability majors the knowledge base is asked about (code <= 999)


def forward_compat_compiled(scheme: LabelScheme | str) -> bool:
    """Whether forward-compat alternatives can be expressed in ``scheme`` (see module doc)."""
    return LabelScheme.parse(str(scheme)) is LabelScheme.CUDASCHED


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True, slots=True)
class _Alt:
    """One way the driver can run the toolkit."""

    kind: str  # "native" | "fc" | "mvc"
    cuda: CudaVersion | None = None
    floor: DriverVersion | None = None  # native: the driver floor of `cuda`; mvc: the series'
    branches: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class _Group:
    codes: tuple[int, ...]  # compute-capability codes, sorted
    cap: int | None  # last driver branch for these GPUs
    alts: tuple[_Alt, ...]


def _runs(values: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted integers as inclusive runs: [1,2,3,7] -> [(1,3),(7,7)]."""
    out: list[tuple[int, int]] = []
    for v in sorted(set(values)):
        if out and v == out[-1][1] + 1:
            out[-1] = (out[-1][0], v)
        else:
            out.append((v, v))
    return out


def _plan(
    req: Requirement, pol: Policy, scheme: LabelScheme, kb: KnowledgeBase
) -> list[_Group] | None:
    """The scheme-independent shape of the answer; ``None`` when nothing needs constraining."""
    if req.is_empty:
        return None
    cuda = effective_cuda(req)
    if req.framework is not None and cuda is None:
        raise InputError(
            f"{req.framework.name} {req.framework.version} does not say which CUDA it was built "
            "with: give the CUDA version explicitly"
        )
    if cuda is None:
        # Only a compute-capability floor: no toolkit, hence no architecture window or driver.
        assert req.min_compute is not None
        return [_Group((req.min_compute.code,), None, ())]
    if kb.toolkit(cuda) is None:
        raise InputError(
            f"unknown CUDA toolkit {cuda}: not a release in the knowledge base (NVIDIA Table 3), "
            "so no node can be judged able to run it"
        )
    # A node runs it natively when its driver is one NVIDIA's tables read as supporting it: the
    # engine reads a node's CUDA from its driver (nodes.reconcile_cuda).
    # With NVIDIA's minimum unknown (13.5) there is no native alternative at all.
    native_floor = kb.driver_floor(cuda) if kb.min_driver(cuda) is not None else None

    members: dict[tuple[int | None, bool], list[int]] = {}
    for major in range(1, _MAX_MAJOR + 1):
        # The knowledge base answers a missing minor from the nearest lower one of the same
        # major, so when X.9 has no answer, no X.y has one.
        if kb.arch(ComputeCapability(major, 9)) is None:
            continue
        for minor in range(10):
            cc = ComputeCapability(major, minor)
            arch = kb.arch(cc)
            if arch is None or arch_window_reason(kb, arch, cc, cuda, req.framework) is not None:
                continue
            if req.min_compute is not None and cc < req.min_compute:
                continue
            coverage = framework_coverage(req.framework, cc)
            if coverage is Coverage.NONE:
                continue
            key = (arch.last_driver_branch, coverage is Coverage.PTX)
            members.setdefault(key, []).append(cc.code)
    if not members:
        raise InputError(
            f"no GPU can run {req.describe()}: no compute capability the knowledge base knows is "
            f"both supported by CUDA {cuda} and accepted by the requirement"
        )

    floor = kb.minor_compat_floor(cuda.major)
    fc_branches = tuple(
        sorted(kb.forward_compat_branches(cuda) | gate_forward_compat_branches(req))
    )
    # GPUs that end up with the same cap and the same alternatives share terms (PTX-only GPUs
    # differ from the others only where minor-version compat is on the table).
    merged: dict[tuple[int | None, tuple[_Alt, ...]], list[int]] = {}
    for (cap, ptx_only), codes in members.items():
        alts = [_Alt("native", cuda=cuda, floor=native_floor)] if native_floor is not None else []
        if (
            pol is Policy.FORWARD_COMPAT
            and req.ships_cuda_compat
            and scheme is LabelScheme.CUDASCHED
        ):
            usable = tuple(b for b in fc_branches if cap is None or b <= cap)
            if usable:
                alts.append(_Alt("fc", branches=usable))
        # Minor-version compatibility has no PTX JIT: never for PTX-only GPUs.
        if (
            pol in (Policy.MINOR_COMPAT, Policy.FORWARD_COMPAT)
            and floor is not None
            and not ptx_only
        ):
            alts.append(_Alt("mvc", floor=floor))
        if alts:
            merged.setdefault((cap, tuple(alts)), []).extend(codes)
    if not merged:
        raise InputError(
            f"no node can run {req.describe()} under {pol.value}: NVIDIA's minimum driver for "
            f"CUDA {cuda} is not in the knowledge base, so native support is never assumed"
        )
    groups = [_Group(tuple(sorted(codes)), cap, alts) for (cap, alts), codes in merged.items()]
    return sorted(groups, key=lambda g: g.codes[0])


# --------------------------------------------------------------------------- expressions


def _gt(key: str, bound: int) -> Expr:
    """``key > bound``; callers never pass a negative bound (not a valid label value)."""
    assert bound >= 0, (key, bound)
    return {"key": key, "operator": "Gt", "values": [str(bound)]}


def _lt(key: str, bound: int) -> Expr:
    assert bound >= 1, (key, bound)
    return {"key": key, "operator": "Lt", "values": [str(bound)]}


def _in(key: str, values: Iterable[int | str]) -> Expr:
    return {"key": key, "operator": "In", "values": [str(v) for v in values]}


def _between(key: str, lo: int, hi: int | None) -> list[Expr]:
    """``lo <= key <= hi`` over integer labels (``hi`` None: unbounded)."""
    out = [_gt(key, lo - 1)] if lo >= 1 else []
    if hi is not None:
        out.append(_lt(key, hi + 1))
    return out


def _eq_int(key: str, value: int) -> list[Expr]:
    """``key == value`` numerically, so ``07`` equals 7 (GFD keeps leading zeros)."""
    return _between(key, value, value)


# --------------------------------------------------------------------------- cudasched scheme


def _ours_compute(group: _Group, open_ended: bool) -> list[list[Expr]]:
    if open_ended:
        return [[_gt(L.COMPUTE_CODE, group.codes[0] - 1)]]
    return [_between(L.COMPUTE_CODE, lo, hi) for lo, hi in _runs(group.codes)]


def _ours_alt(alt: _Alt) -> list[list[Expr]]:
    if alt.kind == "native":
        assert alt.floor is not None
        return [[_gt(L.DRIVER_CODE, alt.floor.code - 1)]]
    if alt.kind == "fc":
        # The branch list is the readable part; the code bounds tie it to the driver version
        # the engine reads, so a node whose driver code is missing is never admitted.
        low, high = min(alt.branches), max(alt.branches)
        return [
            [
                _in(L.GPU_DATACENTER, ["true"]),
                _in(L.DRIVER_BRANCH, alt.branches),
                *_between(L.DRIVER_CODE, low * 1_000_000, (high + 1) * 1_000_000 - 1),
            ]
        ]
    assert alt.floor is not None
    return [[_gt(L.DRIVER_CODE, alt.floor.code - 1)]]


def _ours_cap(cap: int) -> list[Expr]:
    return [_lt(L.DRIVER_CODE, (cap + 1) * 1_000_000)]


# --------------------------------------------------------------------------- gfd scheme


def _gfd_compute(group: _Group, open_ended: bool) -> list[list[Expr]]:
    major_key, minor_key = L.GFD_COMPUTE_MAJOR, L.GFD_COMPUTE_MINOR
    if open_ended:
        low = ComputeCapability.from_code(group.codes[0])
        if low.minor == 0:
            return [[_gt(major_key, low.major - 1)]]
        return [
            [_gt(major_key, low.major)],
            [_in(major_key, [low.major]), _gt(minor_key, low.minor - 1)],
        ]
    minors: dict[int, set[int]] = {}
    for code in group.codes:
        minors.setdefault(code // 10, set()).add(code % 10)
    # Majors that allow the same minors share one term. GFD prints both as plain integers
    # (`%d`), so `In` is exact here and keeps a sparse set of minors in a single expression.
    by_minors: dict[tuple[int, ...], list[int]] = {}
    for major, ms in minors.items():
        by_minors.setdefault(tuple(sorted(ms)), []).append(major)
    out: list[list[Expr]] = []
    for ms, majors in sorted(by_minors.items(), key=lambda kv: min(kv[1])):
        exprs = [_in(major_key, sorted(majors))]
        if ms != tuple(range(10)):
            exprs.append(_in(minor_key, ms))
        out.append(exprs)
    return out


def _gfd_driver_at_least(keys: GfdKeySet, floor: DriverVersion) -> list[list[Expr]]:
    """``driver >= floor`` as a lexicographic comparison over the three GFD components."""
    a, b, c = floor.major, floor.minor, floor.revision
    if b == 0 and c == 0:
        return [[_gt(keys.driver_major, a - 1)]]
    terms = [[_gt(keys.driver_major, a)]]
    same_major = _eq_int(keys.driver_major, a)
    if c == 0:
        terms.append([*same_major, _gt(keys.driver_minor, b - 1)])
    else:
        terms.append([*same_major, _gt(keys.driver_minor, b)])
        terms.append([*same_major, *_eq_int(keys.driver_minor, b), _gt(keys.driver_rev, c - 1)])
    return terms


def _gfd_alt(keys: GfdKeySet, alt: _Alt) -> list[list[Expr]]:
    if alt.kind == "native":
        assert alt.floor is not None
        return _gfd_driver_at_least(keys, alt.floor)
    assert alt.kind == "mvc" and alt.floor is not None  # fc is never planned for GFD
    return _gfd_driver_at_least(keys, alt.floor)


def _gfd_driver_below(keys: GfdKeySet, bound: DriverVersion) -> list[list[Expr]]:
    """``driver < bound``, lexicographic over the three GFD components."""
    a, b, c = bound.major, bound.minor, bound.revision
    terms = [[_lt(keys.driver_major, a)]] if a >= 1 else []
    if b == 0 and c == 0:
        return terms
    same_major = _eq_int(keys.driver_major, a)
    if c == 0:
        terms.append([*same_major, _lt(keys.driver_minor, b)])
    else:
        if b >= 1:
            terms.append([*same_major, _lt(keys.driver_minor, b)])
        terms.append([*same_major, *_eq_int(keys.driver_minor, b), _lt(keys.driver_rev, c)])
    return terms


def _pair_at_least(major_key: str, minor_key: str, major: int, minor: int) -> list[list[Expr]]:
    """``(major, minor) >= (M, m)`` over two plainly printed integer labels."""
    if minor == 0:
        return [[_gt(major_key, major - 1)]] if major >= 1 else [[]]
    return [[_gt(major_key, major)], [_in(major_key, [major]), _gt(minor_key, minor - 1)]]


def _pair_at_most(major_key: str, minor_key: str, major: int, minor: int) -> list[list[Expr]]:
    """``(major, minor) <= (M, m)`` over two plainly printed integer labels."""
    terms = [[_lt(major_key, major)]] if major >= 1 else []
    return [*terms, [_in(major_key, [major]), _lt(minor_key, minor + 1)]]


def _and(left: list[list[Expr]], right: list[list[Expr]]) -> list[list[Expr]]:
    """The conjunction of two ORs of terms, as an OR of terms."""
    return [[*a, *b] for a in left for b in right]


# --------------------------------------------------------------------------- driver bands


def _banded(groups: list[_Group], scheme: LabelScheme, keys: GfdKeySet) -> list[list[Expr]] | None:
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
        if not codes:
            continue
        band: list[Expr] = []
        if scheme is LabelScheme.CUDASCHED:
            if low is not None:
                band.append(_gt(L.DRIVER_CODE, (low + 1) * 1_000_000 - 1))
            if high is not None:
                band += _ours_cap(high)
            cc_terms = _ours_compute(_Group(tuple(codes), None, alts), False)
        else:
            if low is not None:
                band.append(_gt(keys.driver_major, low))
            if high is not None:
                band.append(_lt(keys.driver_major, high + 1))
            cc_terms = _gfd_compute(_Group(tuple(codes), None, alts), False)
        # every driver of the band meets some alternative's floor: no floor to write
        implied = low is not None and any(
            a.floor is not None and a.floor.code <= (low + 1) * 1_000_000 for a in alts
        )
        if implied:
            alt_terms: list[list[Expr]] = [[]]
        elif scheme is LabelScheme.CUDASCHED:
            alt_terms = [t for alt in alts for t in _ours_alt(alt)]
        else:
            alt_terms = [t for alt in alts for t in _gfd_alt(keys, alt)]
        terms += [[*cc, *band, *alt] for cc in cc_terms for alt in alt_terms]
    return terms


def _size(terms: list[Term]) -> tuple[int, int]:
    return len(terms), sum(len(t["matchExpressions"]) for t in terms)


# --------------------------------------------------------------------------- the toolkit gate


def _ours_box(box: Box, kb: KnowledgeBase) -> list[list[Expr]] | None:
    """A gate box over our codes; None when no labelled node can be inside it."""
    exprs: list[Expr] = []
    lo, hi = box.cuda
    if lo is not None:
        floor = kb.driver_floor(CudaVersion.from_code(lo))
        if floor is None:
            return None
        exprs.append(_gt(L.DRIVER_CODE, floor.code - 1))
    if hi is not None:
        if hi < 0:
            return None
        ceiling = kb.driver_floor_above(CudaVersion.from_code(hi))
        if ceiling is not None:  # the node's CUDA (its driver's) is <= hi below this driver
            exprs.append(_lt(L.DRIVER_CODE, ceiling.code))
    for key, (low, high) in ((L.DRIVER_CODE, box.driver), (L.COMPUTE_CODE, box.arch)):
        if high is not None and high < 0:
            return None
        exprs += _between(key, low if low is not None else 0, high)
    return [exprs]


def _gfd_box(box: Box, keys: GfdKeySet, kb: KnowledgeBase) -> list[list[Expr]] | None:
    """A gate box over GFD's split labels (lexicographic comparisons)."""
    terms: list[list[Expr]] = [[]]
    lo, hi = box.cuda
    if lo is not None:
        floor = kb.driver_floor(CudaVersion.from_code(lo))
        if floor is None:
            return None
        terms = _and(terms, _gfd_driver_at_least(keys, floor))
    if hi is not None:
        if hi < 1000:
            return None
        ceiling = kb.driver_floor_above(CudaVersion.from_code(hi))
        if ceiling is not None:  # the node's CUDA (its driver's) is <= hi below this driver
            terms = _and(terms, _gfd_driver_below(keys, ceiling))
    low, high = box.driver
    if low is not None and low > 0:
        terms = _and(terms, _gfd_driver_at_least(keys, DriverVersion.from_code(low)))
    if high is not None:
        if high < 0:
            return None
        terms = _and(terms, _gfd_driver_below(keys, DriverVersion.from_code(high + 1)))
    low, high = box.arch
    cc_major, cc_minor = L.GFD_COMPUTE_MAJOR, L.GFD_COMPUTE_MINOR
    if low is not None and low > 0:
        terms = _and(terms, _pair_at_least(cc_major, cc_minor, *divmod(low, 10)))
    if high is not None:
        if high < 10:
            return None
        terms = _and(terms, _pair_at_most(cc_major, cc_minor, *divmod(high, 10)))
    return terms


def _gate_terms(
    gate: Gate, scheme: LabelScheme, keys: GfdKeySet, kb: KnowledgeBase
) -> list[list[Expr]]:
    """Where the container toolkit would start the container, as terms. The brand is read
    from the GPU class, as the engine reads it: any brand on a node that does not say its
    class; data-center brands on ``gpu.datacenter=true`` (our labels) or a GFD
    ``gpu.product`` naming a known data-center GPU; the others on ``gpu.datacenter=false``.
    A GFD product the list does not spell (a MIG profile) gets the any-brand reading:
    the selector is then stricter than the engine, never wider."""
    classes: list[tuple[frozenset[str], list[Expr]]] = [(ALL_BRANDS, [])]
    if scheme is LabelScheme.CUDASCHED:
        classes += [
            (DATACENTER_BRANDS, [_in(L.GPU_DATACENTER, ["true"])]),
            (OTHER_BRANDS, [_in(L.GPU_DATACENTER, ["false"])]),
        ]
    else:
        # No OTHER class over GFD: real images never list every non-data-center brand (nvs
        # among them), so its region is the any-brand one and would only add long lists.
        classes.append((DATACENTER_BRANDS, [_in(L.GFD_PRODUCT, kb.product_labels(True))]))
    out: list[list[Expr]] = []
    for brands, marker in classes:
        for box in gate.boxes(brands):
            found = (
                _ours_box(box, kb) if scheme is LabelScheme.CUDASCHED else _gfd_box(box, keys, kb)
            )
            out += [[*marker, *t] for t in found or []]
    return out


# --------------------------------------------------------------------------- normal form


@dataclass(frozen=True, slots=True)
class _Range:  # hashable: terms are de-duplicated by their ranges
    """What a term asks of one label: an integer range (inclusive, None unbounded) or a set."""

    lo: int | None = None
    hi: int | None = None
    values: frozenset[Any] | None = None

    def __and__(self, other: _Range) -> _Range | None:
        if self.values is not None or other.values is not None:
            sets = [r.values for r in (self, other) if r.values is not None]
            values = frozenset.intersection(*sets)
            ranges = [r for r in (self, other) if r.values is None]
            values = frozenset(v for v in values if all(r.holds(v) for r in ranges))
            return _Range(values=values) if values else None
        lo = max((b for b in (self.lo, other.lo) if b is not None), default=None)
        hi = min((b for b in (self.hi, other.hi) if b is not None), default=None)
        if lo is not None and hi is not None and lo > hi:
            return None
        if hi is not None and hi < 0:
            return None
        return _Range(lo, hi)

    def holds(self, value: Any) -> bool:
        if self.values is not None:
            return value in self.values
        if not isinstance(value, int):
            return False
        return (self.lo is None or value >= self.lo) and (self.hi is None or value <= self.hi)

    def within(self, other: _Range) -> bool:
        if self.values is not None:
            return all(other.holds(v) for v in self.values)
        if other.values is not None:
            return False
        low = other.lo is None or (self.lo is not None and self.lo >= other.lo)
        high = other.hi is None or (self.hi is not None and self.hi <= other.hi)
        return low and high


def _range_of(expr: Expr) -> _Range:
    op, values = expr["operator"], expr["values"]
    if op == "Gt":
        return _Range(lo=int(values[0]) + 1)
    if op == "Lt":
        return _Range(hi=int(values[0]) - 1)
    assert op == "In", expr
    parsed = [int(v) if v.isdigit() else v for v in values]
    return _Range(values=frozenset(parsed))


def _term_ranges(exprs: list[Expr]) -> dict[str, _Range] | None:
    """A term as one range per key, in the order keys first appear; None when it is empty."""
    out: dict[str, _Range] = {}
    for expr in exprs:
        mine = _range_of(expr)
        have = out.get(expr["key"])
        both = mine if have is None else have & mine
        if both is None:
            return None
        out[expr["key"]] = both
    return out


def _emit(ranges: dict[str, _Range]) -> list[Expr]:
    exprs: list[Expr] = []
    for key, r in ranges.items():
        if r.values is not None:
            ints = sorted(v for v in r.values if isinstance(v, int))
            strs = sorted(v for v in r.values if not isinstance(v, int))
            exprs.append(_in(key, [*ints, *strs]))
            continue
        exprs += _between(key, r.lo if r.lo is not None else 0, r.hi)
    return exprs


def _within(small: dict[str, _Range], big: dict[str, _Range]) -> bool:
    return all(key in small and small[key].within(r) for key, r in big.items())


Ranges = dict[str, _Range]


def _ranges(terms: list[list[Expr]]) -> list[Ranges]:
    """Each term as one range per key; empty terms dropped, equal ones once."""
    out: list[Ranges] = []
    seen: set[frozenset[tuple[str, _Range]]] = set()
    for exprs in terms:
        ranges = _term_ranges(exprs)
        if ranges is None:
            continue
        identity = frozenset(ranges.items())
        if identity not in seen:
            seen.add(identity)
            out.append(ranges)
    return out


def _and_ranges(left: list[Ranges], right: list[Ranges]) -> list[Ranges]:
    """The conjunction of two ORs of terms, empty and repeated products dropped."""
    out: list[Ranges] = []
    seen: set[frozenset[tuple[str, _Range]]] = set()
    for a in left:
        for b in right:
            both: Ranges | None = dict(a)
            for key, r in b.items():
                have = both.get(key)
                merged = r if have is None else have & r
                if merged is None:
                    both = None
                    break
                both[key] = merged
            if both is None:
                continue
            identity = frozenset(both.items())
            if identity not in seen:
                seen.add(identity)
                out.append(both)
    return out


def _normal_terms(terms: list[Ranges]) -> list[Term]:
    """Terms with each key's expressions merged (already), terms that lie inside another one
    dropped (their nodes are admitted anyway); first-seen order is kept."""
    kept: list[tuple[Ranges, frozenset[str]]] = []
    for ranges in terms:
        keys = frozenset(ranges)
        # A term can only lie inside one whose keys are a subset of its own.
        if any(k <= keys and _within(ranges, r) for r, k in kept):
            continue
        kept = [(r, k) for r, k in kept if not (keys <= k and _within(r, ranges))]
        kept.append((ranges, keys))
    out: list[Term] = []
    for ranges, _keys in kept:
        term = {"matchExpressions": _emit(ranges)}
        if term not in out:
            out.append(term)
    return out


# --------------------------------------------------------------------------- compile


def compile_requirement(
    req: Requirement,
    policy: Policy | str,
    scheme: LabelScheme | str,
    kb: KnowledgeBase,
    gfd_keys: GfdKeys | str = GfdKeys.NEW,
) -> list[Term]:
    """Node-selector terms (ORed) that admit exactly the nodes able to run ``req``.

    ``[]`` means "no constraint" (an empty requirement). ``scheme`` must be concrete: resolve
    ``auto`` with :func:`choose_scheme` (and :func:`choose_gfd_keys`) first. Raises
    :class:`InputError` for a requirement no node could ever satisfy (an unknown toolkit, a
    compute-capability floor beyond every architecture the toolkit builds for, a framework whose
    CUDA is unknown): there is no selector for "nothing", and the caller must tell the user.
    The requirement's own ``policy`` overrides ``policy``.
    """
    pol = resolve_policy(req, policy)
    scheme = LabelScheme.parse(str(scheme))
    if scheme is LabelScheme.AUTO:
        raise InputError(
            "label scheme 'auto' must be resolved against the cluster's nodes first "
            "(placement.choose_scheme): expected cudasched or gfd"
        )
    keys = GFD_KEYS[GfdKeys.parse(gfd_keys)]
    groups = _plan(req, pol, scheme, kb)
    if groups is None:
        return []
    open_ended = effective_cuda(req) is None

    terms: list[list[Expr]] = []
    for group in groups:
        if scheme is LabelScheme.CUDASCHED:
            cc_terms = _ours_compute(group, open_ended)
            cap = _ours_cap(group.cap) if group.cap is not None else []
            alt_terms = [t for alt in group.alts for t in _ours_alt(alt)]
        else:
            cc_terms = _gfd_compute(group, open_ended)
            cap = [_lt(keys.driver_major, group.cap + 1)] if group.cap is not None else []
            alt_terms = [t for alt in group.alts for t in _gfd_alt(keys, alt)]
        for cc_exprs in cc_terms:
            for alt_exprs in alt_terms or [[]]:
                terms.append([*cc_exprs, *cap, *alt_exprs])
    gate = _ranges(_gate_terms(req.gate, scheme, keys, kb)) if req.gate is not None else None

    def normal(terms: list[list[Expr]]) -> list[Term]:
        ranges = _ranges(terms)
        return _normal_terms(ranges if gate is None else _and_ranges(ranges, gate))

    out = normal(terms)
    # The same nodes split by driver band instead, when that is smaller (the scheduler parses
    # every term of every pod and evaluates them on every node it filters).
    banded = None if open_ended else _banded(groups, scheme, keys)
    if banded is not None:
        smaller = normal(banded)
        if _size(smaller) < _size(out):
            out = smaller
    if not out:
        raise InputError(
            f"no node can run {req.describe()}: the container toolkit's NVIDIA_REQUIRE_CUDA "
            f"({req.gate.text if req.gate else ''}) holds on no node the requirement allows"
        )
    return out
