"""An immutable snapshot of the cluster facts admission needs, with its lookups precomputed.

The webhook answers under a deadline of a few seconds while the API server waits, so every
question that depends only on the cluster (which label scheme do the GPU nodes carry? which
runtime serves this InferenceService? what is the newest CUDA any driver supports?) is answered
once, when the cache publishes a new snapshot, not per request. Snapshots are replaced whole and
never mutated, so a request always sees one consistent cluster even while the cache's watches
deliver changes concurrently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from cudasched.cluster.fleet import DriverSummary, Fleet
from cudasched.explain.fit import Selection, runs_anywhere
from cudasched.nodes.scheme import GfdKeys
from cudasched.vocab.errors import InputError
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.nodeaffinity import Node
from cudasched.webhook.memo.bounded import BoundedMemo
from cudasched.workloads.kserve import RuntimeChoice

if TYPE_CHECKING:
    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.knowledge import KnowledgeBase
    from cudasched.nodes.facts import NodeFacts

__all__ = ["FIT_MEMO_BYTES", "ClusterState"]

#: Bytes of "does any node match" answers one snapshot remembers (a few thousand keys).
FIT_MEMO_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class ClusterState:
    """What admission knows about the cluster: the :class:`~cudasched.cluster.fleet.Fleet` of the
    cached objects (built tolerant of malformed objects), whether every initial list completed
    (``synced``; admission never warns or denies "no node fits" from an unsynced snapshot) and
    a per-snapshot memo of "does any node match these terms". Build it with
    :meth:`from_objects` or :meth:`empty`; the decision memo keys on the snapshot's identity."""

    fleet: Fleet
    synced: bool = False
    # Per-snapshot memo of "does any node match these terms", keyed by the caller's key for
    # the terms (small: the caller leaves request-sized parts out). A snapshot is never
    # mutated otherwise; this only saves recomputation.
    _fit_memo: BoundedMemo[Any, bool] = field(
        default_factory=lambda: BoundedMemo(FIT_MEMO_BYTES), repr=False
    )

    @classmethod
    def empty(cls, kb: KnowledgeBase | None = None) -> ClusterState:
        """The snapshot before the cache has listed anything (``synced`` false). Without nodes
        the knowledge base is never consulted, so none is loaded when ``kb`` is omitted."""
        return cls(fleet=Fleet((), cast("KnowledgeBase", kb), tolerant=True), synced=False)

    @classmethod
    def from_objects(
        cls,
        nodes: Iterable[Mapping[str, Any]],
        inference_services: Iterable[Mapping[str, Any]],
        serving_runtimes: Iterable[Mapping[str, Any]],
        cluster_serving_runtimes: Iterable[Mapping[str, Any]],
        *,
        llm_inference_services: Iterable[Mapping[str, Any]] = (),
        kb: KnowledgeBase | None = None,
        synced: bool = True,
    ) -> ClusterState:
        """Index the listed objects; malformed ones are skipped rather than failing the
        snapshot. ``kb`` turns driver-only node labels into CUDA versions for the summary;
        when omitted the bundled knowledge base is loaded (callers that rebuild often pass
        it)."""
        if kb is None:
            from cudasched.knowledge import KnowledgeBase

            kb = KnowledgeBase.load()
        fleet = Fleet(
            nodes,
            kb,
            inference_services=inference_services,
            serving_runtimes=serving_runtimes,
            cluster_serving_runtimes=cluster_serving_runtimes,
            llm_inference_services=llm_inference_services,
            tolerant=True,
        )
        # Resolved now, off the request path (the snapshot is built in a worker thread).
        fleet.resolve_scheme(LabelScheme.AUTO)
        _ = fleet.gfd_keys
        return cls(fleet=fleet, synced=synced)

    @classmethod
    def from_snapshot(
        cls, snapshot: ClusterSnapshot, *, kb: KnowledgeBase | None = None
    ) -> ClusterState:
        """The synced snapshot of a cluster dump (:mod:`cudasched.cluster.snapshot`): what
        ``cudasched mutate`` and ``cudasched webhook --cluster`` decide against."""
        return cls.from_objects(
            snapshot.nodes,
            snapshot.inference_services,
            snapshot.serving_runtimes,
            snapshot.cluster_serving_runtimes,
            llm_inference_services=snapshot.llm_inference_services,
            kb=kb,
        )

    @property
    def nodes(self) -> tuple[Node, ...]:
        return self.fleet.nodes

    @property
    def gfd_keys(self) -> GfdKeys:
        return self.fleet.gfd_keys

    @property
    def drivers(self) -> DriverSummary:
        return self.fleet.drivers

    def scheme(self, configured: LabelScheme) -> LabelScheme:
        """The label scheme to compile for: the configured one, or for ``auto`` the one every
        GPU node of this snapshot carries."""
        return self.fleet.resolve_scheme(configured)

    def fits(self, key: Any, selection: Callable[[], Selection]) -> bool:
        """Whether any node of this snapshot can run a workload of the :class:`Selection`
        that ``selection()`` builds (:func:`~cudasched.explain.fit.runs_anywhere`, the rule
        ``explain`` and the audit decide by); ``key`` must identify it. Memoised per snapshot,
        bounded: the selection is only built when the answer is not remembered."""
        remembered = self._fit_memo.get(key)
        if remembered is not None:
            return remembered[0]
        found = runs_anywhere(self.fleet, selection())
        self._fit_memo.put(key, found, 0)
        return found

    def known_fit(self, key: Any) -> bool | None:
        """What :meth:`fits` answered for ``key`` in this snapshot, ``None`` when it has not
        been asked (or the answer was evicted)."""
        remembered = self._fit_memo.get(key)
        return None if remembered is None else remembered[0]

    def inference_service(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.fleet.inference_service(namespace, name)

    def llm_inference_service(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.fleet.llm_inference_service(namespace, name)

    def facts_of(self, node: str) -> NodeFacts | None:
        """The GPU facts of the node named ``node`` (``None``: not in the cache)."""
        for member, _, facts in self.fleet.members():
            if member.name == node:
                return facts
        return None

    def runtime_of(self, namespace: str, isvc_name: str) -> RuntimeChoice | None:
        """The runtime serving a cached InferenceService (status, spec, then KServe's own
        selection), or ``None`` when the service or its runtime is unknown."""
        return self.fleet.runtime_of(namespace, isvc_name)

    def select_runtime_for(self, isvc: Mapping[str, Any]) -> RuntimeChoice | None:
        """Runtime selection for an InferenceService that is being admitted (not yet cached);
        ``None`` when it uses no runtime or the objects involved cannot be read."""
        try:
            return self.fleet.select_runtime(isvc)
        except InputError:
            return None
