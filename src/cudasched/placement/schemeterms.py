"""A plan's pieces written as node-selector expressions in each label scheme: GPU groups,
driver-branch caps, the alternatives (native, forward compatibility, minor-version
compatibility), the container toolkit's gate and where an image's compat libraries do not
break CUDA.

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
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from cudasched.nodes.scheme import GfdKeySet
from cudasched.placement.groups import Alt, Group, runs
from cudasched.vocab import labels as L
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.requirecuda import ALL_BRANDS, DATACENTER_BRANDS, OTHER_BRANDS, Box, Gate
from cudasched.vocab.requirements import CompatLibrary, ToolkitMode
from cudasched.vocab.versions import ComputeCapability, CudaVersion, DriverVersion

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase

__all__ = [
    "Expr",
    "Term",
    "between",
    "compat_terms",
    "eq_int",
    "gate_terms",
    "gfd_alt",
    "gfd_compute",
    "gt",
    "in_",
    "lt",
    "ours_alt",
    "ours_cap",
    "ours_compute",
]

Term = dict[str, Any]
Expr = dict[str, Any]


def gt(key: str, bound: int) -> Expr:
    """``key > bound``; callers never pass a negative bound (not a valid label value)."""
    assert bound >= 0, (key, bound)
    return {"key": key, "operator": "Gt", "values": [str(bound)]}


def lt(key: str, bound: int) -> Expr:
    assert bound >= 1, (key, bound)
    return {"key": key, "operator": "Lt", "values": [str(bound)]}


def in_(key: str, values: Iterable[int | str]) -> Expr:
    return {"key": key, "operator": "In", "values": [str(v) for v in values]}


def between(key: str, lo: int, hi: int | None) -> list[Expr]:
    """``lo <= key <= hi`` over integer labels (``hi`` None: unbounded)."""
    out = [gt(key, lo - 1)] if lo >= 1 else []
    if hi is not None:
        out.append(lt(key, hi + 1))
    return out


def eq_int(key: str, value: int) -> list[Expr]:
    """``key == value`` numerically, so ``07`` equals 7 (GFD keeps leading zeros)."""
    return between(key, value, value)


# --------------------------------------------------------------------------- cudasched scheme


def ours_compute(group: Group, open_ended: bool) -> list[list[Expr]]:
    if open_ended:
        return [[gt(L.COMPUTE_CODE, group.codes[0] - 1)]]
    return [between(L.COMPUTE_CODE, lo, hi) for lo, hi in runs(group.codes)]


def ours_alt(alt: Alt) -> list[list[Expr]]:
    if alt.kind == "native":
        assert alt.floor is not None
        return [[gt(L.DRIVER_CODE, alt.floor.code - 1)]]
    if alt.kind == "fc":
        # The branch list is the readable part; the code bounds tie it to the driver version
        # the engine reads, so a node whose driver code is missing is never admitted.
        low, high = min(alt.branches), max(alt.branches)
        return [
            [
                in_(L.GPU_DATACENTER, ["true"]),
                in_(L.DRIVER_BRANCH, alt.branches),
                *between(L.DRIVER_CODE, low * 1_000_000, (high + 1) * 1_000_000 - 1),
            ]
        ]
    assert alt.floor is not None
    return [[gt(L.DRIVER_CODE, alt.floor.code - 1)]]


def ours_cap(cap: int) -> list[Expr]:
    return [lt(L.DRIVER_CODE, (cap + 1) * 1_000_000)]


# --------------------------------------------------------------------------- gfd scheme


def gfd_compute(group: Group, open_ended: bool) -> list[list[Expr]]:
    major_key, minor_key = L.GFD_COMPUTE_MAJOR, L.GFD_COMPUTE_MINOR
    if open_ended:
        low = ComputeCapability.from_code(group.codes[0])
        if low.minor == 0:
            return [[gt(major_key, low.major - 1)]]
        return [
            [gt(major_key, low.major)],
            [in_(major_key, [low.major]), gt(minor_key, low.minor - 1)],
        ]
    minors: dict[int, set[int]] = {}
    for code in group.codes:
        minors.setdefault(code // 10, set()).add(code % 10)
    # Majors that allow the same minors share one term. GFD prints both as plain integers
    # (`%d`), so `In` is exact here and keeps a sparse set of minors in a single expression.
    by_minors: dict[tuple[int, ...], list[int]] = {}
    for major, allowed in minors.items():
        by_minors.setdefault(tuple(sorted(allowed)), []).append(major)
    out: list[list[Expr]] = []
    for ms, majors in sorted(by_minors.items(), key=lambda kv: min(kv[1])):
        exprs = [in_(major_key, sorted(majors))]
        if ms != tuple(range(10)):
            exprs.append(in_(minor_key, ms))
        out.append(exprs)
    return out


def _gfd_driver_at_least(keys: GfdKeySet, floor: DriverVersion) -> list[list[Expr]]:
    """``driver >= floor`` as a lexicographic comparison over the three GFD components."""
    a, b, c = floor.major, floor.minor, floor.revision
    if b == 0 and c == 0:
        return [[gt(keys.driver_major, a - 1)]]
    terms = [[gt(keys.driver_major, a)]]
    same_major = eq_int(keys.driver_major, a)
    if c == 0:
        terms.append([*same_major, gt(keys.driver_minor, b - 1)])
    else:
        terms.append([*same_major, gt(keys.driver_minor, b)])
        terms.append([*same_major, *eq_int(keys.driver_minor, b), gt(keys.driver_rev, c - 1)])
    return terms


def gfd_alt(keys: GfdKeySet, alt: Alt) -> list[list[Expr]]:
    if alt.kind == "native":
        assert alt.floor is not None
        return _gfd_driver_at_least(keys, alt.floor)
    assert alt.kind == "mvc" and alt.floor is not None  # fc is never planned for GFD
    return _gfd_driver_at_least(keys, alt.floor)


def _gfd_driver_below(keys: GfdKeySet, bound: DriverVersion) -> list[list[Expr]]:
    """``driver < bound``, lexicographic over the three GFD components."""
    a, b, c = bound.major, bound.minor, bound.revision
    terms = [[lt(keys.driver_major, a)]] if a >= 1 else []
    if b == 0 and c == 0:
        return terms
    same_major = eq_int(keys.driver_major, a)
    if c == 0:
        terms.append([*same_major, lt(keys.driver_minor, b)])
    else:
        if b >= 1:
            terms.append([*same_major, lt(keys.driver_minor, b)])
        terms.append([*same_major, *eq_int(keys.driver_minor, b), lt(keys.driver_rev, c)])
    return terms


def _pair_at_least(major_key: str, minor_key: str, major: int, minor: int) -> list[list[Expr]]:
    """``(major, minor) >= (M, m)`` over two plainly printed integer labels."""
    if minor == 0:
        return [[gt(major_key, major - 1)]] if major >= 1 else [[]]
    return [[gt(major_key, major)], [in_(major_key, [major]), gt(minor_key, minor - 1)]]


def _pair_at_most(major_key: str, minor_key: str, major: int, minor: int) -> list[list[Expr]]:
    """``(major, minor) <= (M, m)`` over two plainly printed integer labels."""
    terms = [[lt(major_key, major)]] if major >= 1 else []
    return [*terms, [in_(major_key, [major]), lt(minor_key, minor + 1)]]


def _and(left: list[list[Expr]], right: list[list[Expr]]) -> list[list[Expr]]:
    """The conjunction of two ORs of terms, as an OR of terms."""
    return [[*a, *b] for a in left for b in right]


# --------------------------------------------------------------------------- the toolkit gate


def _ours_box(box: Box, kb: KnowledgeBase) -> list[list[Expr]] | None:
    """A gate box over our codes; None when no labelled node can be inside it."""
    exprs: list[Expr] = []
    lo, hi = box.cuda
    if lo is not None:
        floor = kb.driver_floor(CudaVersion.from_code(lo))
        if floor is None:
            return None
        exprs.append(gt(L.DRIVER_CODE, floor.code - 1))
    if hi is not None:
        if hi < 0:
            return None
        ceiling = kb.driver_floor_above(CudaVersion.from_code(hi))
        if ceiling is not None:  # the node's CUDA (its driver's) is <= hi below this driver
            exprs.append(lt(L.DRIVER_CODE, ceiling.code))
    for key, (low, high) in ((L.DRIVER_CODE, box.driver), (L.COMPUTE_CODE, box.arch)):
        if high is not None and high < 0:
            return None
        exprs += between(key, low if low is not None else 0, high)
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


def gate_terms(
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
            (DATACENTER_BRANDS, [in_(L.GPU_DATACENTER, ["true"])]),
            (OTHER_BRANDS, [in_(L.GPU_DATACENTER, ["false"])]),
        ]
    else:
        # No OTHER class over GFD: real images never list every non-data-center brand (nvs
        # among them), so its region is the any-brand one and would only add long lists.
        classes.append((DATACENTER_BRANDS, [in_(L.GFD_PRODUCT, kb.product_labels(True))]))
    out: list[list[Expr]] = []
    for brands, marker in classes:
        for box in gate.boxes(brands):
            found = (
                _ours_box(box, kb) if scheme is LabelScheme.CUDASCHED else _gfd_box(box, keys, kb)
            )
            out += [[*marker, *t] for t in found or []]
    return out


# --------------------------------------------------------------------------- compat libraries


def _branch_runs(branches: Iterable[int], scheme: LabelScheme, keys: GfdKeySet) -> list[list[Expr]]:
    """``driver branch in branches``, one term per run of consecutive branches."""
    if scheme is LabelScheme.CUDASCHED:
        return [
            between(L.DRIVER_CODE, lo * 1_000_000, (hi + 1) * 1_000_000 - 1)
            for lo, hi in runs(branches)
        ]
    return [between(keys.driver_major, lo, hi) for lo, hi in runs(branches)]


def compat_terms(
    lib: CompatLibrary,
    mode: ToolkitMode,
    supported: Iterable[int],
    scheme: LabelScheme,
    keys: GfdKeySet,
    kb: KnowledgeBase,
) -> list[list[Expr]]:
    """Where an image's compat library does not break CUDA
    (:mod:`cudasched.compat.compatlibs`): the toolkit leaves it unused there, or uses it on a
    data-center GPU whose branch it supports (``supported``). Unused: in legacy mode (and in
    CDI mode without a note) a driver of its major or newer; in CDI mode with a note, a branch
    the note does not list, or a driver at or above the compat driver. A data-center GPU is
    read as the gate reads it: ``gpu.datacenter=true``, or a GFD ``gpu.product`` naming a known
    data-center GPU."""
    top = lib.driver.major
    if scheme is LabelScheme.CUDASCHED:
        datacenter = [in_(L.GPU_DATACENTER, ["true"])]
    else:
        datacenter = [in_(L.GFD_PRODUCT, kb.product_labels(True))]
    works = [[*datacenter, *t] for t in _branch_runs(supported, scheme, keys)]
    if mode is ToolkitMode.CDI and lib.branches is not None:
        listed = set(lib.branches)
        if not listed:  # the hook uses it on no branch
            return [[]]
        if scheme is LabelScheme.CUDASCHED:
            at_least = [[gt(L.DRIVER_CODE, lib.driver.code - 1)]]
            above = [[gt(L.DRIVER_CODE, (max(listed) + 1) * 1_000_000 - 1)]]
        else:
            at_least = _gfd_driver_at_least(keys, lib.driver)
            above = [[gt(keys.driver_major, max(listed))]]
        gaps = _branch_runs((b for b in range(max(listed)) if b not in listed), scheme, keys)
        return [*at_least, *gaps, *above, *works]
    if scheme is LabelScheme.CUDASCHED:
        unused = [[gt(L.DRIVER_CODE, top * 1_000_000 - 1)]]
    else:
        unused = [[gt(keys.driver_major, top - 1)]]
    return [*unused, *works]
