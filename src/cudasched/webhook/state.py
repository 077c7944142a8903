"""An immutable snapshot of the cluster facts admission needs, with its lookups precomputed.

The webhook answers under a deadline of a few seconds while the API server waits, so every
question that depends only on the cluster (which label scheme do the GPU nodes carry? which
runtime serves this InferenceService? what is the newest CUDA any driver supports?) is answered
once, when the cache publishes a new snapshot, not per request. Snapshots are replaced whole and
never mutated, so a request always sees one consistent cluster even while the cache's watches
deliver changes concurrently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from cudasched.errors import InputError
from cudasched.kserve import ParsedRuntimes, RuntimeChoice, select_runtime
from cudasched.labels import LabelScheme
from cudasched.nodeaffinity import Node, NodeSelector
from cudasched.nodes import facts_from_labels, has_gpu_labels
from cudasched.objects import metadata_of as _meta
from cudasched.placement import GfdKeys, choose_gfd_keys, choose_scheme
from cudasched.versions import CudaVersion

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase

__all__ = ["ClusterState", "DriverSummary"]

_EMPTY: Mapping[Any, Any] = MappingProxyType({})


def _frozen() -> Mapping[Any, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class DriverSummary:
    """The best the cluster can offer right now, quoted in "no node can run it" warnings:
    the newest CUDA version any GPU node's driver supports and how many nodes offer it."""

    newest_cuda: CudaVersion | None = None
    nodes_with_newest: int = 0
    gpu_nodes: int = 0

    def describe(self) -> str:
        """``newest driver supports 12.4 (6 nodes)`` or ``no GPU node reports a CUDA version``."""
        if self.newest_cuda is None:
            return "no GPU node reports a CUDA version"
        n = self.nodes_with_newest
        return f"newest driver supports {self.newest_cuda} ({n} node{'s' if n != 1 else ''})"


def _name(obj: Mapping[str, Any]) -> str | None:
    name = _meta(obj).get("name")
    return name if isinstance(name, str) and name else None


def _namespace(obj: Mapping[str, Any]) -> str:
    ns = _meta(obj).get("namespace")
    return ns if isinstance(ns, str) else ""


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    labels = _meta(obj).get("labels")
    if not isinstance(labels, Mapping):
        return {}
    return {str(k): str(v) for k, v in labels.items() if isinstance(v, str)}


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class ClusterState:
    """What admission knows about the cluster. Build it with :meth:`from_objects` (plain dicts
    as the API returns them) or :meth:`empty`; ``synced`` is false until every initial list
    completed, and admission never warns or denies "no node fits" from an unsynced snapshot."""

    nodes: tuple[Node, ...] = ()
    gpu_nodes: tuple[Node, ...] = ()
    auto_scheme: LabelScheme = LabelScheme.CUDASCHED
    gfd_keys: GfdKeys = GfdKeys.NEW
    drivers: DriverSummary = field(default_factory=DriverSummary)
    inference_services: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=_frozen)
    serving_runtimes: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=_frozen)
    cluster_serving_runtimes: tuple[Mapping[str, Any], ...] = ()
    runtime_choices: Mapping[tuple[str, str], RuntimeChoice | None] = field(default_factory=_frozen)
    synced: bool = False
    # Per-snapshot memo of "does any node match these terms", keyed by the caller's key for
    # the terms. A snapshot is never mutated otherwise; this only saves recomputation.
    _fit_memo: dict[Any, bool] = field(default_factory=dict, repr=False)

    def fits(self, key: Any, terms: Sequence[Mapping[str, Any]]) -> bool:
        """Whether any node of this snapshot matches the node-selector ``terms``; ``key`` must
        identify ``terms`` (memoised per snapshot, bounded)."""
        found = self._fit_memo.get(key)
        if found is None:
            selector = NodeSelector.compile({"nodeSelectorTerms": list(terms)})
            found = any(selector.match(node) for node in self.nodes)
            if len(self._fit_memo) >= 4096:
                self._fit_memo.clear()
            self._fit_memo[key] = found
        return found

    @classmethod
    def empty(cls) -> ClusterState:
        """The snapshot before the cache has listed anything (``synced`` false)."""
        return cls()

    @classmethod
    def from_objects(
        cls,
        nodes: Iterable[Mapping[str, Any]],
        inference_services: Iterable[Mapping[str, Any]],
        serving_runtimes: Iterable[Mapping[str, Any]],
        cluster_serving_runtimes: Iterable[Mapping[str, Any]],
        *,
        kb: KnowledgeBase | None = None,
        synced: bool = True,
    ) -> ClusterState:
        """Index the listed objects. Malformed objects (no name) are skipped rather than
        failing the snapshot: one broken object must not stop admission for everything else.

        ``kb`` turns driver-only node labels into CUDA versions for the summary; when omitted
        the bundled knowledge base is loaded (callers that rebuild often should pass it).
        """
        if kb is None:
            from cudasched.knowledge import KnowledgeBase

            kb = KnowledgeBase.load()

        node_list: list[Node] = []
        gpu_list: list[Node] = []
        cudas: list[CudaVersion] = []
        for obj in nodes:
            name = _name(obj)
            if name is None:
                continue
            node = Node(name, _labels(obj))
            node_list.append(node)
            facts = facts_from_labels(name, node.labels, kb)
            if facts.has_gpu or has_gpu_labels(node.labels):
                gpu_list.append(node)
                if facts.cuda is not None:
                    cudas.append(facts.cuda)
        newest = max(cudas) if cudas else None
        summary = DriverSummary(
            newest_cuda=newest,
            nodes_with_newest=sum(1 for c in cudas if c == newest),
            gpu_nodes=len(gpu_list),
        )

        isvcs: dict[tuple[str, str], Mapping[str, Any]] = {}
        for obj in inference_services:
            name = _name(obj)
            if name is not None:
                isvcs[(_namespace(obj), name)] = obj

        by_ns: dict[str, list[Mapping[str, Any]]] = {}
        for obj in serving_runtimes:
            if _name(obj) is not None:
                by_ns.setdefault(_namespace(obj), []).append(obj)
        srs = {ns: tuple(sorted(rts, key=lambda o: _name(o) or "")) for ns, rts in by_ns.items()}
        csrs = tuple(
            sorted(
                (o for o in cluster_serving_runtimes if _name(o) is not None),
                key=lambda o: _name(o) or "",
            )
        )

        choices: dict[tuple[str, str], RuntimeChoice | None] = {}
        parsed: ParsedRuntimes = {}  # each runtime parsed once for all InferenceServices
        for key, isvc in isvcs.items():
            try:
                choices[key] = select_runtime(isvc, srs.get(key[0], ()), csrs, parsed=parsed)
            except InputError:
                # A half-written InferenceService: treat it as "runtime unknown"; the pod is
                # then judged by its annotations and image alone.
                choices[key] = None

        return cls(
            nodes=tuple(node_list),
            gpu_nodes=tuple(gpu_list),
            auto_scheme=choose_scheme(node_list),
            gfd_keys=choose_gfd_keys(node_list),
            drivers=summary,
            inference_services=MappingProxyType(isvcs),
            serving_runtimes=MappingProxyType(srs),
            cluster_serving_runtimes=csrs,
            runtime_choices=MappingProxyType(choices),
            synced=synced,
        )

    def scheme(self, configured: LabelScheme) -> LabelScheme:
        """The label scheme to compile for: the configured one, or for ``auto`` the one every
        GPU node of this snapshot carries."""
        return self.auto_scheme if configured is LabelScheme.AUTO else configured

    def inference_service(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.inference_services.get((namespace, name))

    def runtime_of(self, namespace: str, isvc_name: str) -> RuntimeChoice | None:
        """The runtime serving a cached InferenceService (status, spec, then KServe's own
        selection), or ``None`` when the service or its runtime is unknown."""
        return self.runtime_choices.get((namespace, isvc_name))

    def select_runtime_for(self, isvc: Mapping[str, Any]) -> RuntimeChoice | None:
        """Runtime selection for an InferenceService that is being admitted (not yet cached);
        ``None`` when it uses no runtime or the objects involved cannot be read."""
        ns = _namespace(isvc)
        try:
            return select_runtime(
                isvc, self.serving_runtimes.get(ns, ()), self.cluster_serving_runtimes
            )
        except InputError:
            return None
