"""The fleet: one index of a cluster's nodes and KServe objects, built once, read by everyone.

Admission, ``explain`` and the operations commands all ask the same questions of a cluster:
what GPU facts does each node have, which label scheme do the GPU nodes carry, what is the
newest CUDA any driver supports, which runtimes does a namespace see, which runtime serves an
InferenceService. :class:`Fleet` answers them from plain API objects:

* nodes are parsed once (:class:`~cudasched.vocab.nodeaffinity.Node` pre-parses integer labels) and
  nodes with the same GPU labels share one :class:`~cudasched.nodes.facts.NodeFacts` (a pool is read
  once, not once per node);
* the auto label scheme and GFD key generation are resolved for the whole fleet;
* InferenceServices and LLMInferenceServices are indexed by (namespace, name), so a pod is
  judged with the service it belongs to;
* ServingRuntimes are indexed by namespace (``default`` when unset, see
  :func:`cudasched.vocab.objects.namespace_of`) and sorted by name as the API lists them;
  each InferenceService's runtime is chosen once (each runtime parsed once for all of them);
* :meth:`Fleet.partition` groups nodes that no selector reading a given set of label keys can
  tell apart, so ``explain`` decides once per group instead of once per node.

Two attitudes to malformed objects: ``tolerant=True`` (the webhook: one broken object must not
stop admission for everything else) skips nameless objects, drops non-string label values and
remembers runtime selection errors as "runtime unknown"; the default raises
:class:`~cudasched.vocab.errors.InputError` naming the object (the command line: bad input).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched.nodes.facts import NodeFacts, facts_from_labels, has_gpu_labels
from cudasched.nodes.scheme import GfdKeys, choose_gfd_keys, choose_scheme
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.nodeaffinity import Node
from cudasched.vocab.objects import labels_of, name_of, namespace_of
from cudasched.vocab.versions import CudaVersion
from cudasched.workloads.gpu import node_gpu_resources
from cudasched.workloads.kserve import ParsedRuntimes, RuntimeChoice, select_runtime

if TYPE_CHECKING:
    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.knowledge import KnowledgeBase

__all__ = ["DriverSummary", "Fleet", "Partition"]

KubeObject = Mapping[str, Any]

# Label keys that can change a node's GPU facts: everything under our prefix and NVIDIA's,
# except volatile keys such as GFD's refresh timestamp (meaningless for compatibility).
_FACT_PREFIXES = (L.PREFIX, "nvidia.com/")


def _facts_signature(labels: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    return frozenset(
        (k, v)
        for k, v in labels.items()
        if k.startswith(_FACT_PREFIXES) and k not in L.VOLATILE_KEYS
    )


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


def _node(obj: KubeObject | Node, tolerant: bool) -> Node | None:
    if isinstance(obj, Node):
        return obj
    if tolerant:
        name = name_of(obj) if isinstance(obj, Mapping) else ""
        return Node(name, labels_of(obj)) if name else None
    node = Node.from_k8s(obj)
    if not node.name:
        raise InputError("a Node has no metadata.name")
    return node


class Fleet:
    """A cluster's nodes and KServe objects, indexed once (see the module docstring)."""

    __slots__ = (
        "_auto_scheme",
        "_canonical",
        "_choices",
        "_facts",
        "_facts_of",
        "_gfd_keys",
        "_gpu_resources",
        "_isvcs",
        "_llmisvcs",
        "_partitions",
        "_runtimes",
        "cluster_serving_runtimes",
        "drivers",
        "gpu_nodes",
        "kb",
        "nodes",
        "tolerant",
    )

    def __init__(
        self,
        nodes: Iterable[KubeObject | Node],
        kb: KnowledgeBase,
        *,
        inference_services: Iterable[KubeObject] = (),
        serving_runtimes: Iterable[KubeObject] = (),
        cluster_serving_runtimes: Iterable[KubeObject] = (),
        llm_inference_services: Iterable[KubeObject] = (),
        tolerant: bool = False,
    ) -> None:
        self.kb = kb
        self.tolerant = tolerant
        kept: list[Node] = []
        offered: list[frozenset[str] | None] = []
        for item in nodes:
            node = _node(item, tolerant)
            if node is not None:
                kept.append(node)
                offered.append(None if isinstance(item, Node) else node_gpu_resources(item))
        self.nodes: tuple[Node, ...] = tuple(kept)
        self._index_facts(offered)
        self._auto_scheme: L.LabelScheme | None = None
        self._gfd_keys: GfdKeys | None = None
        self._partitions: dict[tuple[str, ...], Partition] = {}
        self._canonical: dict[tuple[tuple[int, ...], ...], Partition] = {}
        self._index_kserve(inference_services, serving_runtimes, cluster_serving_runtimes)
        self._llmisvcs = _by_name(llm_inference_services)

    @classmethod
    def from_snapshot(
        cls, snapshot: ClusterSnapshot, kb: KnowledgeBase, *, tolerant: bool = False
    ) -> Fleet:
        """The fleet of a cluster snapshot (its nodes and KServe objects)."""
        return cls(
            snapshot.nodes,
            kb,
            inference_services=snapshot.inference_services,
            serving_runtimes=snapshot.serving_runtimes,
            cluster_serving_runtimes=snapshot.cluster_serving_runtimes,
            llm_inference_services=snapshot.llm_inference_services,
            tolerant=tolerant,
        )

    # ------------------------------------------------------------------ nodes

    def _index_facts(self, offered: list[frozenset[str] | None]) -> None:
        # Nodes share a facts group when their GPU labels and the GPU resources they offer
        # are the same (a pod asking for nvidia.com/gpu fits only where it is offered).
        index: dict[tuple[frozenset[tuple[str, str]], frozenset[str] | None], int] = {}
        facts: list[NodeFacts] = []
        facts_of: list[int] = []
        resources: list[frozenset[str] | None] = []
        gpu_nodes: list[Node] = []
        cudas: list[CudaVersion] = []
        for node, gpus in zip(self.nodes, offered, strict=True):
            signature = (_facts_signature(node.labels), gpus)
            number = index.get(signature)
            if number is None:
                number = index[signature] = len(facts)
                facts.append(facts_from_labels(node.name, node.labels, self.kb))
                resources.append(gpus)
            facts_of.append(number)
            found = facts[number]
            if found.has_gpu or has_gpu_labels(node.labels):
                gpu_nodes.append(node)
                if found.cuda is not None:
                    cudas.append(found.cuda)
        self._facts: tuple[NodeFacts, ...] = tuple(facts)
        self._facts_of: tuple[int, ...] = tuple(facts_of)
        self._gpu_resources: tuple[frozenset[str] | None, ...] = tuple(resources)
        self.gpu_nodes: tuple[Node, ...] = tuple(gpu_nodes)
        newest = max(cudas) if cudas else None
        self.drivers = DriverSummary(
            newest_cuda=newest,
            nodes_with_newest=sum(1 for c in cudas if c == newest),
            gpu_nodes=len(gpu_nodes),
        )

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def group_count(self) -> int:
        """How many distinct GPU-fact label sets the fleet has (node pools, roughly)."""
        return len(self._facts)

    def members(self) -> Iterator[tuple[Node, int, NodeFacts]]:
        """Each node with its facts group number and facts, in input order. The facts' ``name``
        is the first node of the group; use the node's own name for display."""
        for node, number in zip(self.nodes, self._facts_of, strict=True):
            yield node, number, self._facts[number]

    def group_resources(self, number: int) -> frozenset[str] | None:
        """The GPU resources offered by the nodes of facts group ``number``."""
        return self._gpu_resources[number]

    def facts_at(self, position: int) -> NodeFacts:
        """The GPU facts of the node at ``position`` (named after its group's first node)."""
        return self._facts[self._facts_of[position]]

    def gpu_resources_at(self, position: int) -> frozenset[str] | None:
        """The NVIDIA GPU resources the node at ``position`` offers (``None``: not known, the
        node was given without its status)."""
        return self._gpu_resources[self._facts_of[position]]

    def resolve_scheme(self, scheme: L.LabelScheme | str) -> L.LabelScheme:
        """``auto`` becomes what every GPU node of this fleet carries."""
        chosen = scheme if isinstance(scheme, L.LabelScheme) else L.LabelScheme.parse(scheme)
        if chosen is not L.LabelScheme.AUTO:
            return chosen
        if self._auto_scheme is None:
            self._auto_scheme = choose_scheme(self.nodes)
        return self._auto_scheme

    @property
    def gfd_keys(self) -> GfdKeys:
        """The GFD key generation every GPU node carries (new keys only if all have them)."""
        if self._gfd_keys is None:
            self._gfd_keys = choose_gfd_keys(self.nodes)
        return self._gfd_keys

    def partition(self, keys: tuple[str, ...]) -> Partition:
        """Nodes grouped by (facts group, values of ``keys``), computed once per key set:
        workloads whose selectors read the same label keys share it, so the per-node signature
        work is paid once per key set instead of once per workload."""
        # Keys that take part in the facts signature add nothing: their values are already
        # fixed by the facts group. Dropping them lets most workloads share a few partitions.
        keys = tuple(
            k for k in keys if not (k.startswith(_FACT_PREFIXES) and k not in L.VOLATILE_KEYS)
        )
        found = self._partitions.get(keys)
        if found is None:
            # Key sets that split the fleet the same way share one partition object, so the
            # answers built per group are shared by their workloads too.
            built = Partition.build(self, keys)
            found = self._partitions[keys] = self._canonical.setdefault(built.members, built)
        return found

    # ------------------------------------------------------------------ KServe

    def _index_kserve(
        self,
        inference_services: Iterable[KubeObject],
        serving_runtimes: Iterable[KubeObject],
        cluster_serving_runtimes: Iterable[KubeObject],
    ) -> None:
        isvcs = _by_name(inference_services)
        by_ns: dict[str, list[KubeObject]] = {}
        for obj in serving_runtimes:
            if name_of(obj) or not self.tolerant:
                by_ns.setdefault(namespace_of(obj), []).append(obj)
        self._isvcs = isvcs
        # Sorted by name, as the API server lists them (the sort is stable: among objects of
        # one name, the first given stays first).
        self._runtimes = {ns: tuple(sorted(rts, key=name_of)) for ns, rts in by_ns.items()}
        self.cluster_serving_runtimes: tuple[KubeObject, ...] = tuple(
            sorted(
                (o for o in cluster_serving_runtimes if name_of(o) or not self.tolerant),
                key=name_of,
            )
        )
        choices: dict[tuple[str, str], RuntimeChoice | InputError | None] = {}
        parsed: ParsedRuntimes = {}  # each runtime parsed once for all InferenceServices
        for key, isvc in isvcs.items():
            try:
                choices[key] = select_runtime(
                    isvc,
                    self._runtimes.get(key[0], ()),
                    self.cluster_serving_runtimes,
                    parsed=parsed,
                )
            except InputError as exc:
                choices[key] = exc
        self._choices = choices

    @property
    def inference_services(self) -> Mapping[tuple[str, str], KubeObject]:
        """The InferenceServices by (namespace, name)."""
        return self._isvcs

    def inference_service(self, namespace: str, name: str) -> KubeObject | None:
        return self._isvcs.get((namespace, name))

    @property
    def llm_inference_services(self) -> Mapping[tuple[str, str], KubeObject]:
        """The LLMInferenceServices by (namespace, name)."""
        return self._llmisvcs

    def llm_inference_service(self, namespace: str, name: str) -> KubeObject | None:
        """The LLMInferenceService ``namespace/name`` (its pods are judged with its
        ``cudasched.io/*`` annotations), or ``None``."""
        return self._llmisvcs.get((namespace, name))

    def serving_runtimes(self, namespace: str) -> tuple[KubeObject, ...]:
        """The ServingRuntimes of ``namespace`` (what an InferenceService there can use)."""
        return self._runtimes.get(namespace, ())

    def all_serving_runtimes(self) -> Iterator[KubeObject]:
        """Every ServingRuntime of every namespace."""
        for runtimes in self._runtimes.values():
            yield from runtimes

    def runtime_of(self, namespace: str, isvc_name: str) -> RuntimeChoice | None:
        """The runtime serving an indexed InferenceService (status, spec, then KServe's own
        selection); ``None`` when the service, its runtime or the objects involved are unknown
        or unreadable."""
        found = self._choices.get((namespace, isvc_name))
        return found if isinstance(found, RuntimeChoice) else None

    def select_runtime(self, isvc: KubeObject) -> RuntimeChoice | None:
        """The runtime KServe would use for ``isvc`` (indexed or not); raises
        :class:`InputError` when the objects involved cannot be read."""
        key = (namespace_of(isvc), name_of(isvc))
        if self._isvcs.get(key) is isvc:
            found = self._choices[key]
            if isinstance(found, InputError):
                raise found
            return found
        return select_runtime(isvc, self._runtimes.get(key[0], ()), self.cluster_serving_runtimes)


def _by_name(objects: Iterable[KubeObject]) -> dict[tuple[str, str], KubeObject]:
    """Named objects by (namespace, name). The first of two objects with one name wins
    (objects given next to a workload are listed before the cluster's)."""
    found: dict[tuple[str, str], KubeObject] = {}
    for obj in objects:
        name = name_of(obj)
        if name:
            found.setdefault((namespace_of(obj), name), obj)
    return found


class Partition:
    """A fleet split into groups of nodes that no selector reading ``keys`` can tell apart.

    ``first`` holds each group's first node, ``members`` each group's nodes (positions in fleet
    order). :meth:`gather` turns one block of answers per group (in member order) back into
    fleet order with one C-level pass (``operator.itemgetter``), so assembling a workload's
    5,000 answers costs no Python-level work per node.
    """

    __slots__ = ("_getter", "first", "members", "size")

    def __init__(
        self, first: tuple[int, ...], members: tuple[tuple[int, ...], ...], size: int
    ) -> None:
        self.first = first
        self.members = members
        self.size = size
        offset_of = [0] * size
        offset = 0
        for group in members:
            for position in group:
                offset_of[position] = offset
                offset += 1
        self._getter = operator.itemgetter(*offset_of) if size > 1 else None

    @classmethod
    def build(cls, fleet: Fleet, keys: tuple[str, ...]) -> Partition:
        index: dict[tuple[Any, ...], int] = {}
        members: list[list[int]] = []
        for position, (node, facts_no) in enumerate(zip(fleet.nodes, fleet._facts_of, strict=True)):
            labels = node.labels
            signature = (facts_no, *[labels.get(k) for k in keys])
            number = index.get(signature)
            if number is None:
                number = index[signature] = len(members)
                members.append([])
            members[number].append(position)
        return cls(
            tuple(group[0] for group in members),
            tuple(tuple(group) for group in members),
            len(fleet.nodes),
        )

    def gather(self, blocks: Sequence[tuple[Any, ...]]) -> tuple[Any, ...]:
        joined = tuple(itertools.chain.from_iterable(blocks))
        return self._getter(joined) if self._getter is not None else joined
