"""KServe LLMInferenceServices, as small as the audit needs them (a fuller model of their pods
comes with the webhook's support for them).

Facts (reference/ops-facts.md §2): the service's pods come from ``spec.template`` (single node,
or the leader of a multi-node setup), ``spec.worker`` (multi-node workers) and the same two under
``spec.prefill``; the model server is the container named ``main``; the controller labels every
workload pod ``app.kubernetes.io/part-of=llminferenceservice`` and
``app.kubernetes.io/name=<service>``. The image usually comes from an LLMInferenceServiceConfig
merged in by the controller, so a service that does not name it in its own spec has no
knowable requirement unless it is annotated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cudasched.objects import as_list, as_mapping, labels_of, name_of
from cudasched.requirements import Requirement
from cudasched.resolution import declared_by_annotation, resolve_container
from cudasched.resources import uses_gpu

if TYPE_CHECKING:
    from cudasched.images import ImageTable
    from cudasched.knowledge import KnowledgeBase

__all__ = ["MAIN_CONTAINER", "llm_service_of_pod", "resolve_llm_service"]

MAIN_CONTAINER = "main"
_PART_OF = "app.kubernetes.io/part-of"
_NAME = "app.kubernetes.io/name"
_PART_OF_VALUE = "llminferenceservice"


def llm_service_of_pod(pod: Mapping[str, Any]) -> str | None:
    """The LLMInferenceService a pod belongs to, from the labels its controller sets."""
    labels = labels_of(pod)
    if labels.get(_PART_OF) != _PART_OF_VALUE:
        return None
    return labels.get(_NAME) or None


def resolve_llm_service(
    obj: Mapping[str, Any], images: ImageTable, kb: KnowledgeBase
) -> tuple[Requirement, bool, str | None]:
    """``(requirement, uses a GPU, image of main)`` for an LLMInferenceService.

    The requirement is read as for any workload (:func:`cudasched.resolution.resolve_container`):
    the service's ``cudasched.io/*`` annotations (``metadata`` and the pod annotations of
    ``spec.annotations``), else the ``main`` container's ``NVIDIA_REQUIRE_CUDA`` or image. As
    the webhook does for InferenceServices, a requirement found in the image counts only when a
    pod of the service requests a GPU; an annotated one always counts.
    """
    who = f"LLMInferenceService {name_of(obj) or '?'}"
    meta = as_mapping(obj.get("metadata"), f"{who} metadata")
    spec = as_mapping(obj.get("spec"), f"{who} spec")
    annotations = {
        **as_mapping(meta.get("annotations"), f"{who} annotations"),
        **as_mapping(spec.get("annotations"), f"{who} spec.annotations"),
    }
    prefill = as_mapping(spec.get("prefill"), f"{who} spec.prefill")
    pod_specs = [
        as_mapping(part.get(key), f"{who} spec.{key}")
        for part in (spec, prefill)
        for key in ("template", "worker")
    ]
    gpu = any(uses_gpu(pod_spec) for pod_spec in pod_specs)
    main = next(
        (
            as_mapping(c, f"{who} container")
            for pod_spec in pod_specs
            for c in as_list(pod_spec.get("containers"), f"{who} containers")
            if isinstance(c, Mapping) and c.get("name") == MAIN_CONTAINER
        ),
        None,
    )
    image = main.get("image") if main is not None else None
    req = resolve_container(annotations, who, main, images, kb)
    if not req.is_empty and not (gpu or declared_by_annotation(req)):
        req = Requirement()
    return req, gpu, image if isinstance(image, str) else None
