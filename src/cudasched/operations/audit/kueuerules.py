"""Rules about Kueue ResourceFlavors, over the flavors and the nodes their ``nodeLabels``
select (a node matches when it carries every declared label, as Kueue reads a flavor):

* ``kueue-flavor-without-cuda-key``: a flavor whose nodes include GPU nodes and whose
  ``nodeLabels`` do not declare the agent's CUDA class label (``cudasched.io/cuda.code``).
  Kueue matches a workload's node affinity only on the keys a flavor declares (kueue#15136),
  so it admits a workload there whatever CUDA it needs, and the pod then waits for a node;
* ``kueue-flavor-spans-cuda-classes``: the GPU nodes a flavor selects run several CUDA
  versions, so one quota stands for nodes that run different workloads.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from cudasched.operations.audit.findings import (
    KUEUE_FLAVOR_SPANS_CUDA,
    KUEUE_FLAVOR_WITHOUT_CUDA_KEY,
    Finding,
)
from cudasched.operations.refs import object_ref
from cudasched.vocab import labels as L

if TYPE_CHECKING:
    from cudasched.cluster.fleet import Fleet
    from cudasched.cluster.snapshot import ClusterSnapshot

__all__ = ["kueue_findings"]

_GROUP = "kueue.x-k8s.io/"
_FIX = (
    "declare the CUDA class on the flavor: one flavor per class, spec.nodeLabels "
    f"{{{L.CUDA_CODE}: <code>}} (`cudasched kueue` prints them from the cluster's nodes)"
)


def _flavors(snapshot: ClusterSnapshot) -> list[Mapping[str, Any]]:
    return [
        o
        for o in snapshot.other
        if str(o.get("apiVersion", "")).startswith(_GROUP) and o.get("kind") == "ResourceFlavor"
    ]


def kueue_findings(snapshot: ClusterSnapshot, fleet: Fleet) -> Iterator[Finding]:
    gpu_nodes = [(node, facts) for node, _, facts in fleet.members() if facts.has_gpu]
    for flavor in _flavors(snapshot):
        declared = (flavor.get("spec") or {}).get("nodeLabels") or {}
        selected = [
            (node, facts)
            for node, facts in gpu_nodes
            if all(node.labels.get(k) == str(v) for k, v in declared.items())
        ]
        if not selected:
            continue
        cudas = sorted({str(f.cuda) for _, f in selected if f.cuda is not None})
        ref = object_ref(flavor)
        if L.CUDA_CODE not in declared:
            yield Finding(
                KUEUE_FLAVOR_WITHOUT_CUDA_KEY,
                ref,
                f"its nodeLabels select {len(selected)} GPU node(s) (CUDA "
                f"{', '.join(cudas) or 'unknown'}) but do not declare {L.CUDA_CODE}: Kueue "
                "ignores a workload's CUDA requirement on keys a flavor does not declare, so "
                "it admits any GPU workload here",
                fix=_FIX,
            )
        if len(cudas) > 1:
            yield Finding(
                KUEUE_FLAVOR_SPANS_CUDA,
                ref,
                f"its {len(selected)} GPU node(s) run CUDA {', '.join(cudas)}: one quota for "
                "nodes that run different workloads",
                fix=_FIX,
            )
