"""Where the webhook reads the cluster snapshot from: the :class:`StateSource` the server asks
once per request (the watch cache in production, :mod:`cudasched.webhook.background.watchcache`) and
:class:`StaticStateSource`, a fixed snapshot for the demo, the e2e tests and offline runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.webhook.state.clusterstate import ClusterState

__all__ = ["KnowledgeUser", "StateSource", "StaticStateSource"]


@runtime_checkable
class StateSource(Protocol):
    """Where the current cluster snapshot comes from.

    ``state`` must be cheap (an attribute read): it is called once per request. ``start`` and
    ``stop`` run on the server's event loop at start-up and shutdown.
    """

    @property
    def state(self) -> ClusterState: ...

    @property
    def synced(self) -> bool: ...

    @property
    def not_ready_reason(self) -> str: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@runtime_checkable
class KnowledgeUser(Protocol):
    """A source whose snapshots are built with the knowledge (a node's CUDA read from its
    driver, its GPU's architecture): told of a new one when the webhook swaps it in (any
    thread), it builds its snapshot with it from then on."""

    def use_knowledge(self, kb: KnowledgeBase) -> None: ...


class StaticStateSource:
    """A fixed snapshot, always synced: the demo, e2e tests and offline use. With ``rebuild``
    (the snapshot's objects judged with other knowledge) it follows a knowledge swap."""

    def __init__(
        self,
        state: ClusterState,
        rebuild: Callable[[KnowledgeBase], ClusterState] | None = None,
    ) -> None:
        self._state = state
        self._rebuild = rebuild

    def use_knowledge(self, kb: KnowledgeBase) -> None:
        if self._rebuild is not None:
            self._state = self._rebuild(kb)

    @property
    def state(self) -> ClusterState:
        return self._state

    @property
    def synced(self) -> bool:
        return True

    @property
    def not_ready_reason(self) -> str:
        return ""

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None
