"""What part of a cluster a command looks at: ``-n/--namespace``, ``-A/--all-namespaces`` and
``-l/--selector``, with kubectl's meaning.

* ``-n NS`` narrows namespaced objects (pods, controllers, InferenceServices, ServingRuntimes,
  LLMInferenceServices) to one namespace; cluster-scoped ones (nodes, ClusterServingRuntimes)
  are not in any namespace and stay, as ``kubectl get -n NS pods,nodes`` lists every node.
* ``-l SELECTOR`` narrows every object, namespaced or not, to those whose labels match.
* Without either, every object counts (``-A``, the default of the cluster-wide commands).

A scope only ever chooses what is *reported*; it never hides from the engine an object a
reported one depends on (a pod's InferenceService and serving runtime, every node): each
command asks :meth:`Scope.admits` of its output, so a scoped answer about an object is the
unscoped answer about it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cudasched.cluster.snapshot import ClusterSnapshot
from cudasched.vocab.objects import labels_of, namespace_of
from cudasched.vocab.selectors import Selector

__all__ = ["CLUSTER_SCOPED_KINDS", "Scope"]

#: Kinds cudasched reads that live in no namespace.
CLUSTER_SCOPED_KINDS = frozenset(
    {"Node", "ClusterServingRuntime", "NVIDIADriver", "Namespace", "NodePool", "ImageFacts"}
)


@dataclass(frozen=True, slots=True)
class Scope:
    """A namespace (``None``: all) and a label selector (empty: all)."""

    namespace: str | None = None
    selector: Selector = field(default_factory=Selector)

    @property
    def is_everything(self) -> bool:
        return self.namespace is None and self.selector.is_empty

    def admits(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` is in scope (see the module docstring)."""
        if not self.selector.matches(labels_of(obj)):
            return False
        if self.namespace is None or str(obj.get("kind")) in CLUSTER_SCOPED_KINDS:
            return True
        return namespace_of(obj) == self.namespace

    def admits_namespace(self, namespace: str | None) -> bool:
        """Whether an object of ``namespace`` (``None``: cluster-scoped) can be in scope."""
        return self.namespace is None or namespace is None or namespace == self.namespace

    def workloads(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """``snapshot`` with only the workloads in scope (pods, controllers, InferenceServices,
        LLMInferenceServices); ServingRuntimes of other namespaces go too (no workload in scope
        can use them); nodes, ClusterServingRuntimes and everything else stay. For commands
        whose answer sums over workloads (a driver plan's demand)."""
        if self.is_everything:
            return snapshot

        def keep(objs: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
            return tuple(o for o in objs if self.admits(o))

        return replace(
            snapshot,
            pods=keep(snapshot.pods),
            workloads=keep(snapshot.workloads),
            inference_services=keep(snapshot.inference_services),
            llm_inference_services=keep(snapshot.llm_inference_services),
            serving_runtimes=tuple(
                o for o in snapshot.serving_runtimes if self.admits_namespace(namespace_of(o))
            ),
        )

    def describe(self) -> str:
        """``namespace team-nlp, selector app=x``; empty when everything is in scope."""
        parts = []
        if self.namespace is not None:
            parts.append(f"namespace {self.namespace}")
        if not self.selector.is_empty:
            parts.append(f"selector {self.selector}")
        return ", ".join(parts)
