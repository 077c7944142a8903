"""KServe's LLMInferenceService (``serving.kserve.io``, since KServe 0.16): the object, its
model-server pods, and the pod it asks for.

An LLMInferenceService runs llm-d: a Deployment (``<name>-kserve``, plus ``-prefill``) or, with
``worker`` set, a LeaderWorkerSet (``<name>-kserve-mn``). Their pods carry
``app.kubernetes.io/part-of=llminferenceservice``, ``app.kubernetes.io/name=<name>`` and an
``app.kubernetes.io/component`` naming the workload role (decode, prefill, leader, worker);
the router-scheduler and tokenizer pods carry the same part-of label with other components and
need no GPU. The model server is the container ``main``. Workers of a LeaderWorkerSet with a
leader template lack ``kserve.io/component``, so that label is never relied on. Facts:
``reference/ops-facts.md`` §2 (``pkg/constants/constants.go``, ``workload_single_node.go``,
``workload_multi_node.go`` at kserve/kserve@aaac4e29).

The image is usually not in the object: the controller merges the well-known
``LLMInferenceServiceConfig`` (``kserve-config-llm-template``: ``ghcr.io/llm-d/llm-d-cuda``),
then ``baseRefs``, then the spec. So a pod is judged by its own ``main`` container, and the
object by the image its ``template`` names (``worker``'s when there is no template: a
LeaderWorkerSet without a leader template runs every pod from it), else by the image a caller
resolved from the configs (``config_image``). This is the one reader of these objects and pods
(the webhook's resolution, ``explain``, ``audit`` and driver planning use it). Pure: plain API
dicts in, answers out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cudasched.vocab.kinds import KSERVE_GROUP
from cudasched.vocab.objects import (
    as_list,
    as_mapping,
    checked_labels,
    labels_of,
    metadata_of,
    namespace_of,
)
from cudasched.workloads.gpu import uses_gpu

__all__ = [
    "COMPONENT_LABEL",
    "LLMISVC_KIND",
    "MAIN_CONTAINER",
    "NAME_LABEL",
    "PART_OF_LABEL",
    "PART_OF_VALUE",
    "WORKLOAD_COMPONENTS",
    "is_llmisvc",
    "is_llmisvc_pod",
    "llmisvc_main_container",
    "llmisvc_name_in",
    "llmisvc_name_of",
    "llmisvc_of_pod",
    "llmisvc_pod",
    "llmisvc_pod_specs",
    "llmisvc_pods",
    "llmisvc_role",
    "llmisvc_uses_gpu",
    "model_server_labels",
]

LLMISVC_KIND = "LLMInferenceService"
PART_OF_LABEL = "app.kubernetes.io/part-of"
PART_OF_VALUE = "llminferenceservice"
NAME_LABEL = "app.kubernetes.io/name"
COMPONENT_LABEL = "app.kubernetes.io/component"
MAIN_CONTAINER = "main"
_WORKLOAD = "llminferenceservice-workload"
#: The components of pods that run the model server (and so may need a GPU), by role.
WORKLOAD_COMPONENTS: Mapping[str, str] = {
    _WORKLOAD: "decode",
    f"{_WORKLOAD}-prefill": "prefill",
    f"{_WORKLOAD}-leader": "leader",
    f"{_WORKLOAD}-worker": "worker",
    f"{_WORKLOAD}-leader-prefill": "leader",
    f"{_WORKLOAD}-worker-prefill": "worker",
}
_API_PREFIX = f"{KSERVE_GROUP}/"


def is_llmisvc(obj: Mapping[str, Any]) -> bool:
    """An LLMInferenceService (``v1alpha1`` or ``v1alpha2``)."""
    return obj.get("kind") == LLMISVC_KIND and str(obj.get("apiVersion", "")).startswith(
        _API_PREFIX
    )


def is_llmisvc_pod(pod: Mapping[str, Any]) -> bool:
    """A model-server pod of an LLMInferenceService (decode, prefill, leader or worker); not
    its router-scheduler or tokenizer."""
    return model_server_labels(checked_labels(pod))


def model_server_labels(labels: Mapping[str, Any]) -> bool:
    """:func:`is_llmisvc_pod` of a pod whose (checked) labels are ``labels``. A component
    that is not text names no role (a list would not even hash)."""
    component = labels.get(COMPONENT_LABEL)
    return (
        labels.get(PART_OF_LABEL) == PART_OF_VALUE
        and isinstance(component, str)
        and component in WORKLOAD_COMPONENTS
    )


def llmisvc_name_of(pod: Mapping[str, Any]) -> str | None:
    """The owning LLMInferenceService's name (``app.kubernetes.io/name``)."""
    return llmisvc_name_in(checked_labels(pod))


def llmisvc_name_in(labels: Mapping[str, Any]) -> str | None:
    """:func:`llmisvc_name_of` of a pod whose (checked) labels are ``labels``."""
    value = labels.get(NAME_LABEL)
    return str(value) if value else None


def llmisvc_of_pod(pod: Mapping[str, Any]) -> str | None:
    """The LLMInferenceService whose model server ``pod`` runs; ``None`` for any other pod
    (the service's router scheduler and tokenizer included). Lenient, for reading a cluster:
    labels that are not strings make it no such pod."""
    labels = labels_of(pod)
    if labels.get(PART_OF_LABEL) != PART_OF_VALUE:
        return None
    if labels.get(COMPONENT_LABEL) not in WORKLOAD_COMPONENTS:
        return None
    return labels.get(NAME_LABEL) or None


def llmisvc_pods(
    pods: Iterable[Mapping[str, Any]], namespace: str, name: str
) -> list[Mapping[str, Any]]:
    """The model-server pods of the LLMInferenceService ``namespace/name``."""
    return [p for p in pods if namespace_of(p) == namespace and llmisvc_of_pod(p) == name]


def llmisvc_role(pod: Mapping[str, Any]) -> str | None:
    """``decode``, ``prefill``, ``leader`` or ``worker``; None for other pods."""
    if not is_llmisvc_pod(pod):
        return None
    return WORKLOAD_COMPONENTS[str(checked_labels(pod).get(COMPONENT_LABEL))]


def llmisvc_main_container(pod_spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The model-server container ``main`` of a pod spec, if there is one."""
    for container in as_list(pod_spec.get("containers"), "containers"):
        if isinstance(container, Mapping) and container.get("name") == MAIN_CONTAINER:
            return container
    return None


def _workload_spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(
        obj.get("spec"), f"spec of LLMInferenceService {metadata_of(obj).get('name')}"
    )


def llmisvc_pod_specs(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every pod spec the LLMInferenceService states: ``template`` and ``worker``, then the
    same two under ``prefill`` (absent ones left out)."""
    spec = _workload_spec(obj)
    prefill = as_mapping(spec.get("prefill"), "spec.prefill")
    return [
        as_mapping(part.get(key), f"spec.{where}{key}")
        for part, where in ((spec, ""), (prefill, "prefill."))
        for key in ("template", "worker")
        if part.get(key) is not None
    ]


def llmisvc_uses_gpu(obj: Mapping[str, Any]) -> bool:
    """Whether a pod spec the LLMInferenceService states requests an NVIDIA GPU. Its pods
    usually take their resources from the configs, so ``False`` says only that the object
    itself asks for none."""
    return any(uses_gpu(spec) for spec in llmisvc_pod_specs(obj))


def llmisvc_pod(obj: Mapping[str, Any], *, prefill: bool = False) -> dict[str, Any]:
    """The decode (or ``prefill``) pod the LLMInferenceService asks for, as far as the object
    says: its labels, the annotations of the object and of the workload (``spec.annotations``
    reach the pods), and the ``template`` pod spec, ``worker``'s when there is no template
    (empty when the image comes from the configs, with a ``main`` container named so readers
    find the model server)."""
    meta = metadata_of(obj)
    name = str(meta.get("name") or "")
    spec = _workload_spec(obj)
    workload = as_mapping(spec.get("prefill"), "spec.prefill") if prefill else spec
    key = "template" if workload.get("template") is not None else "worker"
    template = dict(as_mapping(workload.get(key), key))
    if llmisvc_main_container(template) is None:
        template["containers"] = [
            *as_list(template.get("containers"), "containers"),
            {"name": MAIN_CONTAINER},
        ]
    component = f"{_WORKLOAD}-prefill" if prefill else _WORKLOAD
    annotations = {
        **as_mapping(meta.get("annotations"), "annotations"),
        **as_mapping(workload.get("annotations"), "annotations"),
    }
    labels = {
        **as_mapping(workload.get("labels"), "labels"),
        PART_OF_LABEL: PART_OF_VALUE,
        NAME_LABEL: name,
        COMPONENT_LABEL: component,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-kserve" + ("-prefill" if prefill else ""),
            "namespace": meta.get("namespace") or "default",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": template,
    }
