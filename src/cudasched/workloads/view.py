"""A pod, parsed once: what every stage asks of it.

Kubernetes parses a pod's required node affinity once (``GetRequiredNodeAffinity(pod)``) and
Karpenter its requirements (``NewPodRequirements(pod)``); everything after asks the parsed value.
:func:`view_pod` does the same for the questions cudasched asks of a pod: which role it plays
(a KServe predictor, a transformer or explainer, an LLMInferenceService model server, any other
pod), which object owns it, whether it asks for a GPU, which container's CUDA matters, whether
it opts out (``cudasched.io/skip``) and whether its placement is constrained by what its runtime
or image needs. Admission, ``explain``, the audit and driver planning all ask it, so the four
cannot disagree about a pod.

Building a view never raises. The readers underneath are strict (an unreadable object is an
:class:`InputError`: exit 2 on the command line, "unreadable" at the webhook); the first such
error is kept in :attr:`PodView.error` and :meth:`PodView.checked` raises it where a caller
must refuse an unreadable pod, so the message is the one the reader gave. Any other shape (a
number where a list belongs, a list where a mapping belongs) is read as absent.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

from cudasched.vocab.errors import InputError
from cudasched.vocab.objects import annotations_of, checked_labels
from cudasched.workloads.gpu import gpu_container, gpu_requests
from cudasched.workloads.kserve.llm import (
    llmisvc_main_container,
    llmisvc_name_in,
    model_server_labels,
)
from cudasched.workloads.kserve.pods import component_in, isvc_name_in
from cudasched.workloads.pods import is_skipped

__all__ = ["PodView", "Role", "service_listed", "view_pod"]


class Role(StrEnum):
    """What a pod is, as cudasched treats it."""

    PREDICTOR = "predictor"  # a KServe predictor pod (head or multi-node worker)
    AUXILIARY = "auxiliary"  # a KServe transformer or explainer: never runs the runtime's image
    MODEL_SERVER = "model-server"  # an LLMInferenceService model server (decode, prefill, ...)
    POD = "pod"  # any other pod


@dataclass(frozen=True, slots=True)
class PodView:
    """A pod as every stage reads it (see the module doc)."""

    role: Role
    #: The InferenceService (predictor, auxiliary) or LLMInferenceService (model server) that
    #: owns the pod, by name; ``None`` for other pods or when the label is missing.
    owner: str | None
    #: A container or init container asks for an NVIDIA GPU, or the pod has a resource claim.
    requests_gpu: bool
    #: The NVIDIA GPU resources its containers ask for (``nvidia.com/gpu``, MIG slices): what
    #: a node must offer for the scheduler to place it (read in the same pass).
    gpu_resources: frozenset[str]
    #: The container whose CUDA matters: an LLM model server's ``main``, else the first
    #: container with a GPU, else KServe's predictor or worker container.
    cuda_container: Mapping[str, Any] | None
    #: ``cudasched.io/skip`` asks cudasched to leave the pod alone.
    skipped: bool
    #: Placement is constrained by what the runtime or image needs: it uses a GPU and is not
    #: a transformer or explainer. A model server whose ``main`` names no resources counts: it
    #: takes them from the LLMInferenceServiceConfigs, and llm-d's model servers are GPU servers.
    runs_gpu_workload: bool
    #: The first error a strict reader raised while building the view, if any.
    error: InputError | None = None

    @property
    def is_kserve(self) -> bool:
        """A pod KServe made (an InferenceService's or an LLMInferenceService's)."""
        return self.role is not Role.POD

    def checked(self) -> PodView:
        """The view, or the reader's :class:`InputError` for an unreadable pod."""
        if self.error is not None:
            raise self.error
        return self


def _mapping(value: object) -> Mapping[str, Any]:
    return value if (type(value) is dict or isinstance(value, Mapping)) else {}


def view_pod(pod: object) -> PodView:
    """The pod ``pod`` (a Pod object, or a pod template with ``metadata`` and ``spec``) as
    every stage reads it. Never raises (see the module doc)."""
    obj = _mapping(pod)
    spec = _mapping(obj.get("spec"))
    error: InputError | None = None

    def read(reader: Any, default: Any, *args: Any) -> Any:
        nonlocal error
        try:
            return reader(*args)
        except InputError as exc:
            error = error or exc
            return default

    # Every role reader reads the labels, and only reading them can fail: read once, and an
    # unreadable pod is a plain pod (each reader would have raised the same error).
    labels = read(checked_labels, None, obj)
    component = component_in(labels) if labels is not None else None
    if labels is not None and model_server_labels(labels):
        role, owner = Role.MODEL_SERVER, llmisvc_name_in(labels)
    elif component == "predictor":
        role, owner = Role.PREDICTOR, isvc_name_in(cast(Mapping[str, Any], labels))
    elif component in ("transformer", "explainer"):
        role, owner = Role.AUXILIARY, isvc_name_in(cast(Mapping[str, Any], labels))
    else:
        role, owner = Role.POD, None
    # One pass over the containers gives what the pod asks for, whether it asks for a GPU
    # (workloads.gpu.uses_gpu: any GPU resource, or a resource claim) and the first container
    # that does (workloads.gpu.gpu_container's first choice).
    asked: tuple[frozenset[str], Any] = read(gpu_requests, (frozenset(), None), spec)
    gpu_resources, first_gpu = asked
    requests_gpu = bool(gpu_resources) or bool(spec.get("resourceClaims"))
    main = read(llmisvc_main_container, None, spec) if role is Role.MODEL_SERVER else None
    if main is not None:
        container = main
    elif first_gpu is not None:
        container = first_gpu
    else:  # KServe's container by name (or, for an unreadable pod, the reader's error)
        container = read(gpu_container, None, spec)
    if role is Role.AUXILIARY:
        runs = False
    else:
        runs = requests_gpu or (main is not None and not main.get("resources"))
    skipped = is_skipped(annotations_of(obj))  # lenient readers: never raises
    return PodView(
        role=role,
        owner=owner,
        requests_gpu=requests_gpu,
        gpu_resources=gpu_resources,
        cuda_container=container,
        skipped=skipped,
        runs_gpu_workload=runs,
        error=error,
    )


def service_listed(
    view: PodView,
    namespace: str,
    inference_services: Container[tuple[str, str]],
    llm_services: Container[tuple[str, str]],
) -> bool:
    """Whether the pod belongs to a service among those listed (by ``(namespace, name)``):
    a predictor to an InferenceService, a model server to an LLMInferenceService. What a
    reader of a whole cluster asks to report a pod through its service."""
    if view.owner is None:
        return False
    if view.role is Role.PREDICTOR:
        return (namespace, view.owner) in inference_services
    return view.role is Role.MODEL_SERVER and (namespace, view.owner) in llm_services
