"""The knowledge the agent labels with, read at each use so that a followed bundle swapped in
between two probes is the one the next probe's labels come from.

The agent reads little of the knowledge: a GPU's compute capability and data-center class
when the driver did not report them (:func:`~cudasched.nodes.labelers.enrich`) and the
architecture's family words for the ``family`` labels. A new GPU generation is exactly what a
published bundle adds first, so an agent started with ``cudasched --knowledge REF agent``
follows the reference (:class:`~cudasched.registry.following.BundleFollower`, its own thread)
and reads the knowledge through :class:`FollowedCatalog`, which asks the follower each time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cudasched.knowledge import ArchInfo, KnowledgeBase
    from cudasched.vocab.versions import ComputeCapability

__all__ = ["FollowedCatalog"]


class FollowedCatalog:
    """The GPU and architecture rows of whatever knowledge ``current`` returns now (the
    follower's: never waits for a check in flight). What the discovery and the labelers read
    as their ``GpuCatalog`` and ``ArchCatalog``, and what tells a cut-off GPU name from a
    product (``truncated_product``, which the product label asks for by name)."""

    def __init__(self, current: Callable[[], KnowledgeBase]) -> None:
        self._current = current

    def gpu(self, name: str) -> Any:
        return self._current().gpu(name)

    def arch(self, cc: ComputeCapability) -> ArchInfo | None:
        return self._current().arch(cc)

    def truncated_product(self, name: str) -> bool:
        return self._current().truncated_product(name)
