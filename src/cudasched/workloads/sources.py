"""Where a workload's CUDA requirement comes from, in a fixed order of trust.

1. The object's own annotations (``cudasched.io/cuda-version``, ``min-compute-capability``,
   ``policy``, ``ships-cuda-compat``): the user said so.
2. The serving runtime's ``metadata`` annotations and labels: ``cudasched.io/*``, then Alauda's
   ``cpaas.io/accelerator-type`` + ``cpaas.io/cuda-version``. These never reach pods (KServe
   copies only the runtime's ``spec.labels``/``spec.annotations``), so the runtime object must
   be passed in. A runtime whose accelerator type is not NVIDIA yields no NVIDIA requirement.
3. The GPU container: its ``NVIDIA_REQUIRE_CUDA`` env, then its image in the image table.
   The env comes first because a pod-level value replaces the image's own and is exactly what
   the NVIDIA container toolkit enforces when the container starts.
4. Nothing: an empty requirement. For a workload that uses a GPU this is an *unknown*
   requirement (:func:`cudasched.workloads.resolution.unknown_pod_requirement` and its siblings
   say why, with a closed reason code, the image judged and the fix), which the webhook
   reports rather than guesses.

The first source that names a CUDA version or a compute capability wins as a whole, so every
answer has one ``source``. ``policy`` and ``ships-cuda-compat`` are modifiers: the object's
annotations win over the runtime's, whichever source gave the CUDA version.

:func:`resolve_pod`, :func:`resolve_isvc`, :func:`resolve_runtime`, :func:`resolve_container`,
:func:`resolve_llmisvc` and :func:`resolve_llmisvc_pod` take the sources in this order for each
kind of object. Steps 1 and 2 (and the accepted values of the annotations) are read by
:mod:`cudasched.workloads.declared`, step 3 by :mod:`cudasched.workloads.containercuda`; whether
the requirement constrains the workload, and why it is unknown, is
:mod:`cudasched.workloads.resolution`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from cudasched.knowledge.images import ImageTable, ReleaseFacts
from cudasched.vocab.errors import InputError
from cudasched.vocab.kserve import PREDICTOR_CONTAINER
from cudasched.vocab.objects import as_mapping
from cudasched.vocab.requirements import FrameworkBuild, Requirement
from cudasched.vocab.versions import ComputeCapability, CudaVersion
from cudasched.workloads.containercuda import ContainerFacts, from_container
from cudasched.workloads.declared import (
    annotation_source,
    from_runtime,
    merge_modifiers,
    read_cudasched,
    runtime_identity,
)
from cudasched.workloads.kserve import RuntimeChoice, predictor_container, runtime_containers
from cudasched.workloads.kserve.llm import (
    MAIN_CONTAINER,
    NAME_LABEL,
    is_llmisvc,
    llmisvc_main_container,
    llmisvc_pod,
)
from cudasched.workloads.view import PodView

__all__ = [
    "resolve_container",
    "resolve_isvc",
    "resolve_llmisvc",
    "resolve_llmisvc_pod",
    "resolve_pod",
    "resolve_runtime",
]


def _stricter(declared: Requirement, facts: ContainerFacts, who: str) -> tuple[Requirement, str]:
    """A runtime's declared requirement against what its image says: the stricter of each
    field, and the disagreement in words ("" when they agree, or when the image's CUDA is only
    a floor the declaration respects)."""
    if facts.cuda is None:
        return declared, ""
    cuda = declared.cuda
    if cuda is None or facts.cuda > cuda:
        cuda = facts.cuda
    low = declared.min_compute
    if facts.min_compute is not None and (low is None or facts.min_compute > low):
        low = facts.min_compute
    differs = declared.cuda is not None and (
        declared.cuda < facts.cuda or (declared.cuda > facts.cuda and not facts.lower_bound)
    )
    differs = differs or (facts.min_compute is not None and low != declared.min_compute)
    # The image's framework build (its kernel list) comes along when the image's CUDA is used.
    raised = declared.cuda is None or facts.cuda > declared.cuda
    framework = facts.framework if raised else declared.framework
    if not differs:
        return _with_found(declared, cuda, low, framework, declared.source), ""
    # The webhook's warning (at most 120 characters): what is used first, then who said
    # what; the image's name is in the requirement's source, recorded on the object.
    said = declared.describe()
    image = Requirement(cuda=facts.cuda, min_compute=facts.min_compute).describe()
    kept = Requirement(cuda=cuda, min_compute=low).describe()
    if kept == image:
        text = f"using {kept}, what its image needs: {who} says {said}"
    else:
        text = f"using {kept}: {who} says {said}, its image {image}"
    raised = raised or low != declared.min_compute
    source = f"{declared.source}; stricter {facts.source}" if raised else declared.source
    return _with_found(declared, cuda, low, framework, source), text


def _with_found(
    declared: Requirement,
    cuda: CudaVersion | None,
    low: ComputeCapability | None,
    framework: FrameworkBuild | None,
    source: str,
) -> Requirement:
    """``declared`` with what was found in place of its own fields (built directly: a
    ``dataclasses.replace`` costs microseconds, and every first-seen pod resolves)."""
    return Requirement(
        cuda=cuda,
        min_compute=low,
        policy=declared.policy,
        ships_cuda_compat=declared.ships_cuda_compat,
        framework=framework,
        source=source,
        gate=declared.gate,
        compat=declared.compat,
        toolkit=declared.toolkit,
        unknown_reason=declared.unknown_reason,
        disagreement=declared.disagreement,
    )


def _resolve(
    annotations: Mapping[str, Any],
    where: str,
    runtime: Mapping[str, Any] | RuntimeChoice | None,
    container: Mapping[str, Any] | None,
    images: ImageTable,
    kb: ReleaseFacts | None,
) -> Requirement:
    own = read_cudasched(annotations, where)
    answer = from_runtime(runtime)
    modifiers = merge_modifiers(own, answer.found)
    if answer.requirement is not None and answer.requirement.is_empty and not own.names_requirement:
        return answer.requirement  # a non-NVIDIA runtime: decided, no requirement
    facts = from_container(container, images, kb)
    ships = (
        modifiers.ships_cuda_compat
        if modifiers.ships_cuda_compat is not None
        else bool(facts.ships_cuda_compat)
    )
    # Each answer is built in one go (no ``dataclasses.replace`` chains: every first-seen pod
    # resolves, and each replace costs microseconds). Every one carries the terms the
    # container starts under: its gate, its image's compat library, the toolkit's mode.
    compat, toolkit = facts.compat, images.toolkit
    if own.names_requirement:
        return Requirement(
            cuda=own.cuda,
            min_compute=own.min_compute,
            policy=modifiers.policy,
            ships_cuda_compat=ships,
            source=annotation_source(own.keys),
            gate=facts.gate,
            compat=compat,
            toolkit=toolkit,
        )
    said = answer.requirement
    if said is not None:
        # What the runtime said (its CUDA and compute capability, never a framework build)
        # with the pod's modifiers and its container's gate.
        declared = Requirement(
            cuda=said.cuda,
            min_compute=said.min_compute,
            policy=modifiers.policy,
            ships_cuda_compat=ships,
            framework=said.framework,
            source=said.source,
            gate=facts.gate,
            compat=compat,
            toolkit=toolkit,
            unknown_reason=said.unknown_reason,
        )
        who = runtime_identity(runtime)[0] if runtime is not None else "the runtime"
        stricter, disagreement = _stricter(declared, facts, who)
        return replace(stricter, disagreement=disagreement) if disagreement else stricter
    if facts.cuda is not None:
        return Requirement(
            cuda=facts.cuda,
            min_compute=facts.min_compute,
            policy=modifiers.policy,
            ships_cuda_compat=ships,
            framework=facts.framework,
            source=facts.source,
            gate=facts.gate,
            compat=compat,
            toolkit=toolkit,
        )
    return Requirement(
        policy=modifiers.policy,
        ships_cuda_compat=bool(modifiers.ships_cuda_compat),
        toolkit=toolkit,
        unknown_reason=facts.why_unknown,
    )


def resolve_pod(
    view: PodView,
    runtime: Mapping[str, Any] | RuntimeChoice | None,
    images: ImageTable,
    kb: ReleaseFacts | None,
) -> Requirement:
    """The requirement of a pod (a KServe predictor or any GPU pod), first hit wins, from its
    view: its annotations, then ``runtime``, then its CUDA container. An unreadable pod is the
    view's :class:`InputError`."""
    view.checked()
    return _resolve(view.annotations, view.who, runtime, view.cuda_container, images, kb)


def resolve_isvc(
    isvc: Mapping[str, Any],
    runtime: Mapping[str, Any] | RuntimeChoice | None,
    images: ImageTable,
    kb: ReleaseFacts | None,
) -> Requirement:
    """The requirement of an InferenceService's predictor, from the same sources its pods
    will show: the annotation set is KServe's union for predictor pods (runtime
    ``spec.annotations`` < InferenceService annotations < ``spec.predictor.annotations``),
    and the container is the predictor container KServe would build."""
    if not isinstance(isvc, Mapping):
        raise InputError(f"invalid InferenceService: expected a mapping, got {type(isvc)}")
    meta = as_mapping(isvc.get("metadata"), "InferenceService metadata")
    spec = as_mapping(isvc.get("spec"), "InferenceService spec")
    predictor = as_mapping(spec.get("predictor"), "spec.predictor")
    runtime_obj = runtime.obj if isinstance(runtime, RuntimeChoice) else runtime
    runtime_spec = as_mapping((runtime_obj or {}).get("spec"), "runtime spec")
    annotations = {
        **as_mapping(runtime_spec.get("annotations"), "runtime spec.annotations"),
        **as_mapping(meta.get("annotations"), "InferenceService annotations"),
        **as_mapping(predictor.get("annotations"), "spec.predictor.annotations"),
    }
    where = f"InferenceService {meta.get('name') or '?'}"
    container = predictor_container(isvc, runtime_obj)
    return _resolve(annotations, where, runtime, container, images, kb)


def resolve_runtime(
    runtime: Mapping[str, Any] | RuntimeChoice, images: ImageTable, kb: ReleaseFacts | None
) -> Requirement:
    """The requirement a ServingRuntime or ClusterServingRuntime gives a predictor that adds
    nothing of its own: the annotations the runtime passes to its pods (``spec.annotations``),
    then the runtime's own labels and annotations, then its ``kserve-container`` (first
    container otherwise). This is :func:`resolve_isvc` for an InferenceService that only names
    the runtime, so ``audit`` and ``report`` judge runtimes by the webhook's rules."""
    who, obj = runtime_identity(runtime)
    spec = as_mapping(obj.get("spec"), f"{who} spec")
    annotations = as_mapping(spec.get("annotations"), f"{who} spec.annotations")
    containers = runtime_containers(obj)
    container = next(
        (c for c in containers if c.get("name") == PREDICTOR_CONTAINER),
        containers[0] if containers else None,
    )
    return _resolve(annotations, who, runtime, container, images, kb)


def resolve_container(
    annotations: Mapping[str, Any],
    where: str,
    container: Mapping[str, Any] | None,
    images: ImageTable,
    kb: ReleaseFacts | None,
) -> Requirement:
    """The requirement of an object whose pods cudasched does not build itself (a KServe
    LLMInferenceService, say): its own ``cudasched.io/*`` annotations, then ``container``'s
    ``NVIDIA_REQUIRE_CUDA`` env or image. The same steps as :func:`resolve_pod`, without a
    runtime; ``where`` names the object in error messages."""
    return _resolve(annotations, where, None, container, images, kb)


def _llmisvc_annotations(llmisvc: Mapping[str, Any] | None) -> dict[str, Any]:
    """The annotations an LLMInferenceService declares for its model server: its own, then
    those of its workload spec (which reach the pods)."""
    if llmisvc is None:
        return {}
    meta = as_mapping(llmisvc.get("metadata"), "LLMInferenceService metadata")
    spec = as_mapping(llmisvc.get("spec"), "LLMInferenceService spec")
    return {
        **as_mapping(meta.get("annotations"), "LLMInferenceService annotations"),
        **as_mapping(spec.get("annotations"), "LLMInferenceService spec.annotations"),
    }


def resolve_llmisvc(
    llmisvc: Mapping[str, Any],
    images: ImageTable,
    kb: ReleaseFacts | None,
    config_image: str | None = None,
) -> Requirement:
    """The requirement of an LLMInferenceService's model server: its ``cudasched.io/*``
    annotations, then the image of its ``main`` container (the ``template``'s, else
    ``config_image``, the image the caller resolved from the LLMInferenceServiceConfigs). With
    neither, the requirement is empty and ``unknown_reason`` says where the image lives."""
    if not isinstance(llmisvc, Mapping) or not is_llmisvc(llmisvc):
        raise InputError(f"invalid LLMInferenceService: expected one, got {type(llmisvc)}")
    pod = llmisvc_pod(llmisvc)
    main = dict(llmisvc_main_container(pod["spec"]) or {"name": MAIN_CONTAINER})
    if not main.get("image") and config_image:
        main["image"] = config_image
    where = f"LLMInferenceService {pod['metadata']['labels'][NAME_LABEL] or '?'}"
    req = _resolve(_llmisvc_annotations(llmisvc), where, None, main, images, kb)
    if req.is_empty and not main.get("image"):
        return replace(
            req,
            unknown_reason=(
                f"{where} names no image in spec.template: its pods take it from the "
                "LLMInferenceServiceConfigs (kserve-config-llm-template, baseRefs); set "
                "cudasched.io/cuda-version on it or let its pods be judged by their image"
            ),
        )
    return req


def resolve_llmisvc_pod(
    view: PodView,
    llmisvc: Mapping[str, Any] | None,
    images: ImageTable,
    kb: ReleaseFacts | None,
) -> Requirement:
    """The requirement of an LLMInferenceService's model-server pod (``view``): the service's
    ``cudasched.io/*`` annotations (when the object is at hand) under the pod's own, then the
    image of the pod's model server (the view's CUDA container: ``main``, what KServe's
    config templates name it, else the GPU container of a pod built otherwise), the one the
    configs resolved. An unreadable pod is the view's :class:`InputError`."""
    view.checked()
    annotations = {**_llmisvc_annotations(llmisvc), **view.annotations}
    return _resolve(annotations, view.who, None, view.cuda_container, images, kb)
