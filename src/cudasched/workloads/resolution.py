"""What admission enforces for a workload, and why when it cannot: the need.

A workload's requirement is resolved from its sources (:mod:`cudasched.workloads.sources`);
then it constrains the workload only when there is something to constrain and the workload
declares it by annotation or runs a GPU workload (:func:`wants_constraint`,
:func:`isvc_wants_constraint`). A GPU workload whose sources name nothing has an *unknown*
requirement (:func:`unknown_pod_requirement` and its siblings say why, with a closed reason
code, the image judged and the fix), which the webhook reports rather than guesses.
:class:`WorkloadNeed` is the one answer (known, unknown or none) every command and the webhook
take, through :func:`pod_need`, :func:`isvc_need`, :func:`llmisvc_need`,
:func:`runtime_need` and :func:`workload_need` (:func:`resolve_workload`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from cudasched.knowledge.images import ImageTable, ReleaseFacts
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.kserve import PREDICTOR_CONTAINER
from cudasched.vocab.objects import annotations_of, namespace_of
from cudasched.vocab.requirements import RECORD_SOURCE_CHARS, Requirement
from cudasched.workloads.declared import declared_by_annotation, runtime_identity
from cudasched.workloads.gpu import uses_gpu
from cudasched.workloads.kserve import (
    RuntimeChoice,
    isvc_uses_gpu,
    predictor_container,
    runtime_containers,
    runtime_refused,
)
from cudasched.workloads.kserve.llm import is_llmisvc, llmisvc_main_container, llmisvc_pod
from cudasched.workloads.pods import is_inference_service, is_skipped, pod_of
from cudasched.workloads.sources import (
    resolve_isvc,
    resolve_llmisvc,
    resolve_llmisvc_pod,
    resolve_pod,
    resolve_runtime,
)
from cudasched.workloads.view import PodView, Role, view_pod

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase


class RuntimeIndex(Protocol):
    """The lookups :func:`resolve_workload` makes in a cluster, as admission makes them
    (``cluster.fleet.Fleet`` provides them): declared here so resolution does not depend on
    the stage above it."""

    @property
    def kb(self) -> KnowledgeBase: ...
    def select_runtime(self, isvc: Mapping[str, Any]) -> RuntimeChoice | None: ...
    def serving_runtimes(self, namespace: str) -> Sequence[Mapping[str, Any]]: ...
    @property
    def cluster_serving_runtimes(self) -> Sequence[Mapping[str, Any]]: ...
    def inference_service(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...
    def llm_inference_service(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...


__all__ = [
    "NO_IMAGE",
    "REGISTRY_FAILED",
    "REGISTRY_NO_CUDA",
    "TAG_NOT_RECORDED",
    "UNKNOWN_IMAGE",
    "UNKNOWN_RECORD",
    "NeedStatus",
    "RuntimeIndex",
    "UnknownRequirement",
    "WorkloadNeed",
    "cluster_pod_need",
    "isvc_need",
    "isvc_wants_constraint",
    "llmisvc_need",
    "pod_need",
    "resolve_workload",
    "runtime_need",
    "unknown_fix",
    "unknown_image_reason",
    "unknown_isvc_requirement",
    "unknown_llmisvc_requirement",
    "unknown_pod_requirement",
    "wants_constraint",
    "workload_need",
]


def wants_constraint(view: PodView, requirement: Requirement) -> bool:
    """Should the webhook constrain this pod's placement?

    Only when there is something to constrain, and then: a pod that declares its requirement
    by annotation always; any other pod only when it runs a GPU workload
    (:attr:`PodView.runs_gpu_workload`), so a CPU-only predictor of a GPU-capable runtime is
    left alone. An unreadable pod is the view's :class:`InputError`.
    """
    if requirement.is_empty:
        return False
    if declared_by_annotation(requirement):
        return True
    return view.checked().runs_gpu_workload


# --------------------------------------------------------------------------- unknown

#: Why a GPU workload's requirement is unknown (closed vocabulary: the webhook's metric label).
UNKNOWN_IMAGE = "image_not_in_table"
TAG_NOT_RECORDED = "tag_not_recorded"
NO_IMAGE = "no_image"
#: The image's config was read from its registry and names no CUDA (no gate env, no
#: ``CUDA_VERSION``): a CUDA image without the NVIDIA base, or not a CUDA image at all.
REGISTRY_NO_CUDA = "config_without_cuda"
#: The image's config was asked of its registry and could not be read (the error says why).
REGISTRY_FAILED = "registry_error"


#: The first word of the ``cudasched.io/requirement`` record of a workload whose CUDA is unknown.
UNKNOWN_RECORD = "unknown"


@dataclass(frozen=True, slots=True)
class UnknownRequirement:
    """A GPU workload whose CUDA requirement cannot be found, so nothing constrains it:
    ``reason`` (:data:`UNKNOWN_IMAGE`, :data:`TAG_NOT_RECORDED` or :data:`NO_IMAGE`), the
    image that was judged, and ``fix``, what to write where (``label ClusterServingRuntime
    kserve-huggingfaceserver with cudasched.io/cuda-version``)."""

    reason: str
    image: str | None
    fix: str
    detail: str = ""  # what went wrong reading the image's config (REGISTRY_FAILED)

    def describe(self) -> str:
        """Why, naming the image: the reason first, so a clipped warning still says it."""
        if self.reason == UNKNOWN_IMAGE:
            return f"image not in the image table: {self.image}"
        if self.reason == TAG_NOT_RECORDED:
            return f"tag's CUDA not recorded: {self.image}"
        if self.reason == REGISTRY_NO_CUDA:
            return f"image config names no CUDA: {self.image}"
        if self.reason == REGISTRY_FAILED:
            return f"image config not read: {self.image}: {self.detail}"
        return "no container names an image cudasched can read"

    def record(self) -> str:
        """The ``cudasched.io/requirement`` annotation value admission writes on such a
        workload: ``unknown (why)``, so whoever looks at what the webhook recorded sees that it
        saw the workload and could not tell its CUDA (the reason is cut like a requirement's
        source: it quotes an image reference of any length)."""
        why = self.describe()
        if len(why) > RECORD_SOURCE_CHARS:
            why = why[: RECORD_SOURCE_CHARS - 1] + "…"
        return f"{UNKNOWN_RECORD} ({why})"

    def warnings(self) -> tuple[str, str]:
        """The two sentences every command says about it, as admission warns: what is
        unknown, then what to write where (the webhook clips each at a word past 256
        characters)."""
        return (
            f"cudasched: not constrained, CUDA unknown: {self.describe()}",
            f"cudasched: to constrain it, {self.fix}",
        )


def _unknown(
    container: Mapping[str, Any] | None, images: ImageTable, fix: str
) -> UnknownRequirement:
    """Why ``container`` (the one the requirement was looked for in) gave no requirement."""
    image = container.get("image") if container is not None else None
    if not isinstance(image, str) or not image.strip():
        return UnknownRequirement(NO_IMAGE, None, fix)
    text = image.strip()
    try:
        recognised = images.rule_for(text) is not None
    except InputError:  # not an image reference at all
        return UnknownRequirement(NO_IMAGE, None, fix)
    config = images.config_for(text)
    if config is not None and config.ok:
        return UnknownRequirement(REGISTRY_NO_CUDA, text, fix)
    if config is not None and not recognised:
        return UnknownRequirement(REGISTRY_FAILED, text, fix, config.error)
    return UnknownRequirement(TAG_NOT_RECORDED if recognised else UNKNOWN_IMAGE, text, fix)


def unknown_image_reason(image: str | None, images: ImageTable) -> str:
    """Why ``image`` gives no requirement, in the words the webhook warns with (``image not in
    the image table: IMAGE``, ``tag's CUDA not recorded: IMAGE``, no image)."""
    return _unknown({"image": image} if image else None, images, "").describe()


def _undecided(requirement: Requirement) -> bool:
    """An empty requirement that no source decided (a non-NVIDIA runtime is decided)."""
    return requirement.is_empty and not requirement.source


def _or_override(fix: str) -> str:
    return f"{fix} or add an imageOverrides entry"


def unknown_fix(subject: str, *, runtime: bool = False) -> str:
    """The one wording of what makes an unknown requirement known, for every command and the
    webhook: a serving runtime is labelled (every service that picks it then knows), anything
    else annotated, or the image given an ``imageOverrides`` entry. ``subject`` names it
    (``ServingRuntime vllm``, ``the pod``, ``InferenceService x``)."""
    if runtime:
        return f"label {subject} with {L.ANN_CUDA_VERSION}"
    return _or_override(f"annotate {subject} with {L.ANN_CUDA_VERSION}")


def unknown_pod_requirement(
    view: PodView,
    requirement: Requirement,
    images: ImageTable,
    runtime: RuntimeChoice | None = None,
) -> UnknownRequirement | None:
    """Why a pod (``view``) that runs a GPU workload got no requirement (``requirement`` is
    what :func:`resolve_pod` or :func:`resolve_llmisvc_pod` found, ``runtime`` the runtime a
    predictor pod was resolved with), or ``None`` when it got one, when a source decided it
    needs none, or when it would not be constrained anyway."""
    if not _undecided(requirement) or not view.checked().runs_gpu_workload:
        return None
    key = L.ANN_CUDA_VERSION
    if view.role is Role.MODEL_SERVER:
        fix = f"annotate LLMInferenceService {view.owner or '?'} with {key}"  # no override:
        # the image is KServe's config's, the service is where users write
    elif runtime is not None:
        fix = unknown_fix(runtime.describe(), runtime=True)
    elif view.role is Role.PREDICTOR:
        fix = unknown_fix(f"InferenceService {view.owner}")
    else:
        fix = unknown_fix("the pod")
    return _unknown(view.cuda_container, images, fix)


def unknown_isvc_requirement(
    isvc: Mapping[str, Any],
    runtime: RuntimeChoice | None,
    requirement: Requirement,
    images: ImageTable,
) -> UnknownRequirement | None:
    """Why an InferenceService whose predictor uses a GPU got no requirement from
    :func:`resolve_isvc`, or ``None`` (see :func:`unknown_pod_requirement`)."""
    runtime_obj = runtime.obj if runtime is not None else None
    if not _undecided(requirement) or not isvc_uses_gpu(isvc, runtime_obj):
        return None
    if runtime is not None:
        fix = unknown_fix(runtime.describe(), runtime=True)
    else:
        fix = unknown_fix("the InferenceService")
    return _unknown(predictor_container(isvc, runtime_obj), images, fix)


def unknown_llmisvc_requirement(
    llmisvc: Mapping[str, Any], requirement: Requirement, images: ImageTable
) -> UnknownRequirement | None:
    """Why an LLMInferenceService that names its model server's image got no requirement from
    :func:`resolve_llmisvc`, or ``None``. A service that leaves the image to its
    LLMInferenceServiceConfigs (the usual case) is not unknown: its pods carry the image and
    are judged by it when they are created."""
    pod = llmisvc_pod(llmisvc)
    main = llmisvc_main_container(pod["spec"])
    if main is None or not main.get("image") or not _undecided(requirement):
        return None
    if not view_pod(pod).checked().runs_gpu_workload:
        return None
    return _unknown(main, images, unknown_fix("it"))


def isvc_wants_constraint(
    isvc: Mapping[str, Any], runtime: RuntimeChoice | None, requirement: Requirement
) -> bool:
    """Should the webhook record (and enforce on its pods) ``requirement`` for an
    InferenceService? When there is one, and the service declares it by annotation or any pod
    of its predictor (head or multi-node worker, runtime containers included) requests a GPU."""
    if requirement.is_empty:
        return False
    if declared_by_annotation(requirement):
        return True
    return isvc_uses_gpu(isvc, runtime.obj if runtime is not None else None)


class NeedStatus(StrEnum):
    """The three answers about what a workload needs, said the same way by every command."""

    KNOWN = "known"  # a requirement to enforce
    UNKNOWN = "unknown"  # a GPU workload whose CUDA cannot be found (see ``unknown``)
    NONE = "none"  # nothing to enforce: no GPU, or a source decided it needs none


@dataclass(frozen=True, slots=True)
class WorkloadNeed:
    """What admission enforces for one workload, and why when it cannot.

    ``requirement`` is what the webhook enforces (empty unless :attr:`status` is ``known``);
    ``resolved`` is what the sources said before the "is it constrained at all" step (its
    ``source`` says "not an NVIDIA runtime", its ``unknown_reason`` why nothing was found);
    ``unknown`` is set exactly when the status is ``unknown``: the reason code, the image and
    the fix, with the two warnings admission gives (:meth:`UnknownRequirement.warnings`).
    Every command (``mutate``, ``explain``, ``audit``, ``report``, ``demo``, the webhook)
    takes its answer from :func:`pod_need`, :func:`isvc_need`, :func:`llmisvc_need` or
    :func:`workload_need`, so none can call "unknown" "no requirement"."""

    requirement: Requirement
    resolved: Requirement
    runtime: RuntimeChoice | None = None
    unknown: UnknownRequirement | None = None
    #: Why the workload's controller creates no pods, so no node can run it: an
    #: InferenceService whose runtime does not exist, is disabled or does not serve its model
    #: (:func:`~cudasched.workloads.kserve.runtime_refused`).
    no_pods: str | None = None

    @property
    def status(self) -> NeedStatus:
        if self.unknown is not None:
            return NeedStatus.UNKNOWN
        return NeedStatus.NONE if self.requirement.is_empty else NeedStatus.KNOWN


def pod_need(
    view: PodView,
    runtime: RuntimeChoice | None,
    images: ImageTable,
    kb: ReleaseFacts | None,
    *,
    service: Mapping[str, Any] | None = None,
) -> WorkloadNeed:
    """A pod's need, from its view: an LLMInferenceService model server with its ``service``
    (when at hand), any other pod with ``runtime``, the runtime of a KServe predictor. An
    unreadable pod is the view's :class:`InputError`."""
    if view.role is Role.MODEL_SERVER:
        req = resolve_llmisvc_pod(view, service, images, kb)
        runtime = None
    else:
        req = resolve_pod(view, runtime, images, kb)
    if wants_constraint(view, req):
        return WorkloadNeed(req, req, runtime)
    unknown = unknown_pod_requirement(view, req, images, runtime)
    return WorkloadNeed(Requirement(), req, runtime, unknown)


def isvc_need(
    isvc: Mapping[str, Any],
    runtime: RuntimeChoice | None,
    images: ImageTable,
    kb: ReleaseFacts | None,
) -> WorkloadNeed:
    """An InferenceService's need (its predictor's, under the runtime KServe chose)."""
    req = resolve_isvc(isvc, runtime, images, kb)
    if isvc_wants_constraint(isvc, runtime, req):
        return WorkloadNeed(req, req, runtime)
    unknown = unknown_isvc_requirement(isvc, runtime, req, images)
    return WorkloadNeed(Requirement(), req, runtime, unknown)


def llmisvc_need(
    llmisvc: Mapping[str, Any], images: ImageTable, kb: ReleaseFacts | None
) -> WorkloadNeed:
    """An LLMInferenceService's need (its model server's)."""
    req = resolve_llmisvc(llmisvc, images, kb)
    if wants_constraint(view_pod(llmisvc_pod(llmisvc)), req):
        return WorkloadNeed(req, req)
    unknown = unknown_llmisvc_requirement(llmisvc, req, images)
    return WorkloadNeed(Requirement(), req, None, unknown)


def runtime_need(
    runtime: Mapping[str, Any] | RuntimeChoice, images: ImageTable, kb: ReleaseFacts | None
) -> WorkloadNeed:
    """A ServingRuntime's or ClusterServingRuntime's need (:func:`resolve_runtime`: what an
    InferenceService that only names it needs). Unknown when nothing names its CUDA and it is
    a GPU runtime: its containers request a GPU, or the image table knows its image family."""
    req = resolve_runtime(runtime, images, kb)
    if not req.is_empty or not _undecided(req):
        return WorkloadNeed(req, req)
    who, obj = runtime_identity(runtime)
    containers = runtime_containers(obj)
    container = next(
        (c for c in containers if c.get("name") == PREDICTOR_CONTAINER),
        containers[0] if containers else None,
    )
    unknown = _unknown(container, images, f"label {who} with {L.ANN_CUDA_VERSION}")
    gpu = uses_gpu({"containers": list(containers)})
    if not gpu and unknown.reason != TAG_NOT_RECORDED:
        return WorkloadNeed(req, req)  # nothing says it is a GPU runtime
    return WorkloadNeed(Requirement(), req, None, unknown)


#: The need of a workload ``cudasched.io/skip`` leaves alone: nothing, and nothing read.
_NONE = Requirement()
_SKIPPED = WorkloadNeed(_NONE, _NONE)


def workload_need(
    obj: Mapping[str, Any], fleet: RuntimeIndex, images: ImageTable
) -> tuple[Mapping[str, Any], WorkloadNeed]:
    """What the webhook would enforce for a workload of ``fleet``'s cluster: the object to
    place (the workload itself, or for an InferenceService the predictor pod KServe builds)
    and its :class:`WorkloadNeed`. Runtimes are looked up the way admission does, through the
    fleet; unreadable objects raise :class:`InputError`. A workload ``cudasched.io/skip``
    leaves alone needs nothing, and its requirement is not read (admission never reads it)."""
    kb = fleet.kb
    skipped = is_skipped(annotations_of(obj))  # a service's own switch, as admission reads it
    if is_llmisvc(obj):
        pod = llmisvc_pod(obj)
        return pod, _SKIPPED if skipped else llmisvc_need(obj, images, kb)
    if is_inference_service(obj):
        choice = fleet.select_runtime(obj)
        if skipped:
            return pod_of(obj, choice), WorkloadNeed(_NONE, _NONE, choice)
        need = isvc_need(obj, choice, images, kb)
        if choice is None:
            runtimes = fleet.serving_runtimes(namespace_of(obj))
            why = runtime_refused(obj, runtimes, fleet.cluster_serving_runtimes)
            need = replace(need, no_pods=why) if why is not None else need
        return pod_of(obj, choice), need
    return obj, cluster_pod_need(view_pod(pod_of(obj)), fleet, images)


def cluster_pod_need(view: PodView, fleet: RuntimeIndex, images: ImageTable) -> WorkloadNeed:
    """:func:`pod_need` of a pod of ``fleet``'s cluster (its view), its service and runtime
    looked up as admission looks them up: a model server's LLMInferenceService, a predictor's
    InferenceService and the runtime KServe chose for it. A skipped pod needs nothing (its
    runtime is still named) and its requirement is not read."""
    kb = fleet.kb
    if view.role is Role.MODEL_SERVER:
        if view.skipped:
            return _SKIPPED
        service = fleet.llm_inference_service(view.namespace, view.owner or "")
        return pod_need(view, None, images, kb, service=service)
    choice = None
    if view.role is Role.PREDICTOR:
        isvc = fleet.inference_service(view.namespace, view.owner or "")
        choice = fleet.select_runtime(isvc) if isvc is not None else None
    if view.skipped:
        return WorkloadNeed(_NONE, _NONE, choice)
    return pod_need(view, choice, images, kb)


def resolve_workload(
    obj: Mapping[str, Any], fleet: RuntimeIndex, images: ImageTable
) -> tuple[Mapping[str, Any], Requirement, RuntimeChoice | None]:
    """:func:`workload_need` as (object to place, enforced requirement, runtime)."""
    target, need = workload_need(obj, fleet, images)
    return target, need.requirement, need.runtime
