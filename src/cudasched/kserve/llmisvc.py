"""KServe LLMInferenceService pods: which pods run an LLMInferenceService's model server.

KServe (>= 0.16) builds an LLMInferenceService into Deployments or LeaderWorkerSets whose pods
carry ``app.kubernetes.io/part-of: llminferenceservice``, ``app.kubernetes.io/name: <name>`` and
a component naming the role (``pkg/constants/constants.go``; ``workload_single_node.go``,
``workload_multi_node.go``). The model-server pods (decode, prefill, multi-node leader and
worker) are the ones that use GPUs; the router scheduler and the tokenizer are left out. The
image is usually not in the LLMInferenceService itself (it comes from merged
LLMInferenceServiceConfigs), so the pods are what tells the CUDA a service needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cudasched.objects import labels_of, namespace_of

__all__ = [
    "LLMISVC_COMPONENT_LABEL",
    "LLMISVC_NAME_LABEL",
    "LLMISVC_PART_OF",
    "LLMISVC_PART_OF_LABEL",
    "WORKLOAD_COMPONENTS",
    "llmisvc_name_of",
    "llmisvc_pods",
]

LLMISVC_PART_OF_LABEL = "app.kubernetes.io/part-of"
LLMISVC_PART_OF = "llminferenceservice"
LLMISVC_NAME_LABEL = "app.kubernetes.io/name"
LLMISVC_COMPONENT_LABEL = "app.kubernetes.io/component"

#: Components of the model-server pods (single node, prefill, multi-node leader and worker).
WORKLOAD_COMPONENTS = frozenset(
    {
        "llminferenceservice-workload",
        "llminferenceservice-workload-prefill",
        "llminferenceservice-workload-leader",
        "llminferenceservice-workload-worker",
        "llminferenceservice-workload-leader-prefill",
        "llminferenceservice-workload-worker-prefill",
    }
)


def llmisvc_name_of(pod: Mapping[str, Any]) -> str | None:
    """The LLMInferenceService whose model server ``pod`` runs, or ``None`` (another pod, or
    the service's router scheduler or tokenizer)."""
    labels = labels_of(pod)
    if labels.get(LLMISVC_PART_OF_LABEL) != LLMISVC_PART_OF:
        return None
    if labels.get(LLMISVC_COMPONENT_LABEL) not in WORKLOAD_COMPONENTS:
        return None
    return labels.get(LLMISVC_NAME_LABEL) or None


def llmisvc_pods(
    pods: Iterable[Mapping[str, Any]], namespace: str, name: str
) -> list[Mapping[str, Any]]:
    """The model-server pods of the LLMInferenceService ``namespace/name``."""
    return [p for p in pods if namespace_of(p) == namespace and llmisvc_name_of(p) == name]
