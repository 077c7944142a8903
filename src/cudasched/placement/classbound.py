"""The CUDA class a term's driver bounds imply, written into the term as well.

In the ``cudasched`` scheme a compiled term says "runs CUDA X" with the driver version
(``cudasched.io/driver.code``): the driver floor of X natively, the CUDA major's floor under
minor-version compatibility, a branch range under forward compatibility, a branch cap for GPUs
a newer driver no longer supports. Kueue matches a workload's affinity only on the keys its
ResourceFlavors declare (kueue#15136), and a flavor declares the agent's CUDA class
(``cudasched.io/cuda.code``), never an exact driver version (it would strand admitted pods at
the next patch upgrade). So Kueue drops the CUDA part of such a term and admits a workload onto
a flavor whose nodes cannot run it.

:func:`class_bounded` adds to every term with a driver bound the class bound it implies: the
agent labels a node's class as the newest CUDA its driver runs
(:meth:`~cudasched.knowledge.KnowledgeBase.max_cuda_for_driver`), which never decreases as the
driver grows, so a driver in ``[lo, hi]`` has a class in ``[class(lo), class(hi)]``; a term
that lists driver branches (forward compatibility) gets the set of its branches' classes
instead, since the branches between the listed ones are not admitted. On truthful
labels the added bound admits exactly the nodes the term admitted (no verdict moves); on a node
whose class label disagrees with its driver it can only turn the node away (stricter, never
wider). The driver bounds stay: not every driver range is a class range (a forward-compat
branch list, a toolkit gate's driver range, a compat library's driver fall inside classes), and
the engine reads a node's CUDA from its driver, never from the class label.

Kept behind a setting (``placement.boundCudaClass``, off by default) because it changes every
injected affinity, and with it what admitted pods carry and the recorded answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cudasched.placement.normalform import (
    Ranges,
    and_bound,
    and_values,
    int_bounds,
    normal_terms,
    set_values,
    to_ranges,
)
from cudasched.vocab import labels as L
from cudasched.vocab.versions import DriverVersion

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.placement.schemeterms import Term

__all__ = ["class_bounded"]


def _class_of(driver_code: int, kb: KnowledgeBase) -> int | None:
    """The class code the agent labels a node running driver ``driver_code`` with; None when
    the driver is older than every toolkit the knowledge has (no class to bound by)."""
    cuda = kb.max_cuda_for_driver(DriverVersion.from_code(driver_code))
    return None if cuda is None else cuda.code


def _branch_classes(
    branches: frozenset[object], lo: int, hi: int | None, kb: KnowledgeBase
) -> set[int]:
    """The classes of the drivers in ``[lo, hi]`` of the listed branches: the class where each
    branch's part of the range starts, and wherever a toolkit's minimum driver inside it moves
    the class (the class only changes there)."""
    steps = sorted({m.code for row in kb.toolkits() if (m := row.effective_min_driver) is not None})
    out: set[int] = set()
    for branch in branches:
        if not isinstance(branch, int):
            continue
        start = max(lo, branch * 1_000_000)
        end = (branch + 1) * 1_000_000 - 1 if hi is None else min(hi, (branch + 1) * 1_000_000 - 1)
        if start > end:
            continue
        for code in [start, *(m for m in steps if start < m <= end)]:
            found = _class_of(code, kb)
            if found is not None:
                out.add(found)
    return out


def _bounded(ranges: Ranges, kb: KnowledgeBase) -> Ranges:
    """One term with the class bound its driver bounds imply; as it was where the term has no
    driver floor, or one older than every known toolkit (a node there may carry no class)."""
    lo, hi = int_bounds(ranges, L.DRIVER_CODE) or (None, None)
    low = _class_of(lo, kb) if lo is not None else None
    if lo is None or low is None:
        return ranges
    high = _class_of(hi, kb) if hi is not None else None
    bounded = and_bound(ranges, L.CUDA_CODE, low, high)
    branches = set_values(ranges, L.DRIVER_BRANCH)
    if bounded is not None and branches is not None:
        # a branch list (forward compatibility) is not a driver range: only its classes
        bounded = and_values(bounded, L.CUDA_CODE, _branch_classes(branches, lo, hi, kb))
    # Empty only where the term already admits no node (a branch list none of whose branches
    # meets the driver range): it stays as it was, which admits exactly as little.
    return ranges if bounded is None else bounded


def class_bounded(terms: list[Term], kb: KnowledgeBase) -> list[Term]:
    """``terms`` (``cudasched`` scheme, in normal form) with the class bound each term's
    driver bounds imply ANDed in; terms without a driver floor are kept as they are."""
    return normal_terms(
        [_bounded(r, kb) for r in to_ranges([t["matchExpressions"] for t in terms])]
    )
