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
driver grows, so a driver in ``[lo, hi]`` has a class in ``[class(lo), class(hi)]``. On truthful
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

from cudasched.placement.normalform import and_bound, int_bounds, normal_terms, to_ranges
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


def class_bounded(terms: list[Term], kb: KnowledgeBase) -> list[Term]:
    """``terms`` (``cudasched`` scheme, in normal form) with the class bound each term's
    driver bounds imply ANDed in; terms without a driver bound are kept as they are."""
    out = []
    for ranges in to_ranges([t["matchExpressions"] for t in terms]):
        bounds = int_bounds(ranges, L.DRIVER_CODE)
        if bounds is not None:
            lo, hi = bounds
            low = _class_of(lo, kb) if lo is not None else None
            high = _class_of(hi, kb) if hi is not None else None
            if low is not None or high is not None:
                bounded = and_bound(ranges, L.CUDA_CODE, low, high)
                assert bounded is not None, (ranges, low, high)  # implied: never empty
                ranges = bounded
        out.append(ranges)
    return normal_terms(out)
