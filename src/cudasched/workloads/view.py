"""A pod, parsed once: what every stage asks of it.

Kubernetes parses a pod's required node affinity once (``GetRequiredNodeAffinity(pod)``) and
Karpenter its requirements (``NewPodRequirements(pod)``); everything after asks the parsed value.
:func:`view_pod` does the same for the questions cudasched asks of a pod: which role it plays
(a KServe predictor, a transformer or explainer, an LLMInferenceService model server, any other
pod), whether KServe made it, which object owns it, whether it asks for a GPU and which GPU
resources, which container's CUDA matters, whether it opts out (``cudasched.io/skip``),
whether its placement is constrained by what its runtime or image needs, and whose pull
secrets its images are pulled with. Admission, ``explain``, the audit and driver planning all
ask it, and the functions that resolve a pod's requirement take it, not the pod, so none of
them can read a pod differently.

Building a view never raises, whatever JSON it is given. The readers underneath are strict (an
unreadable part is an :class:`InputError`: exit 2 on the command line, "unreadable" at the
webhook); the first such error is kept in :attr:`PodView.error` and :meth:`PodView.checked`
raises it where a caller must refuse an unreadable pod, so the message is the one the reader
gave. The answers that need no strict reading (the skip switch, the pull scope, the
namespace) are lenient: a field of another shape is absent. Any other shape (a number where a
list belongs, a list where a label value belongs) is read as absent too.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from cudasched.knowledge.imageconfig import PullScope
from cudasched.vocab.errors import InputError
from cudasched.vocab.kserve import INFERENCESERVICE_LABEL
from cudasched.vocab.objects import as_mapping, namespace_of
from cudasched.workloads.gpu import GpuUse, read_gpu_use
from cudasched.workloads.kserve.llm import (
    llmisvc_main_container,
    llmisvc_name_in,
    model_server_labels,
)
from cudasched.workloads.kserve.pods import component_in, isvc_name_in
from cudasched.workloads.pods import is_skipped
from cudasched.workloads.pullscope import pull_fields

__all__ = ["PodView", "Role", "service_listed", "view_pod"]

_T = TypeVar("_T")


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
    #: KServe made it: it carries ``serving.kserve.io/inferenceservice`` (KServe labels every
    #: pod of an InferenceService so, and its own pod mutator keys on that label, whatever the
    #: ``component``), or it is an LLMInferenceService's model server. The one answer to "is it
    #: a KServe pod": a pod with the label but no known component is KServe's, in role
    #: :attr:`Role.POD`.
    is_kserve: bool
    #: How messages name the pod: ``pod NAME`` (``generateName`` when it has no name yet).
    who: str
    #: ``metadata.namespace``, or ``default`` when it names none (lenient).
    namespace: str
    #: ``metadata.annotations`` (empty when unreadable: :attr:`error` says why).
    annotations: Mapping[str, Any]
    #: A container or init container asks for an NVIDIA GPU, or the pod has a resource claim.
    requests_gpu: bool
    #: The NVIDIA GPU resources its containers and init containers ask for above zero: what a
    #: node must offer for the scheduler to place it (resource claims are not among them).
    gpu_resources: frozenset[str]
    #: The container whose CUDA matters: an LLM model server's ``main``, else the first
    #: container with a GPU, else KServe's predictor or worker container.
    cuda_container: Mapping[str, Any] | None
    #: ``cudasched.io/skip`` asks cudasched to leave the pod alone (lenient: never an error).
    skipped: bool
    #: Placement is constrained by what the runtime or image needs: it uses a GPU and is not
    #: a transformer or explainer. A model server whose ``main`` names no resources counts: it
    #: takes them from the LLMInferenceServiceConfigs, and llm-d's model servers are GPU servers.
    runs_gpu_workload: bool
    #: The ``imagePullSecrets`` names the kubelet pulls its images with (lenient).
    pull_secrets: tuple[str, ...] = ()
    #: The ServiceAccount it runs as, whose pull secrets apply when it names none (lenient).
    service_account: str = "default"
    #: The first error a strict reader raised while building the view, if any.
    error: InputError | None = None

    def checked(self) -> PodView:
        """The view, or the reader's :class:`InputError` for an unreadable pod."""
        if self.error is not None:
            raise self.error
        return self

    def pull_scope(self, namespace: str = "") -> PullScope:
        """Whose pull secrets a registry look-up for the pod may use, in ``namespace`` (an
        admission request's own, which the API server vouches for), else in the pod's."""
        return PullScope(
            namespace=namespace or self.namespace,
            secrets=self.pull_secrets,
            service_account=self.service_account,
        )


class _Reading:
    """The strict reads of one view, the first error kept (so the view never raises)."""

    __slots__ = ("error",)

    def __init__(self) -> None:
        self.error: InputError | None = None

    def read(self, reader: Callable[..., _T], default: _T, *args: Any) -> _T:
        try:
            return reader(*args)
        except InputError as exc:
            self.error = self.error or exc
            return default


_NO_GPU = GpuUse(frozenset(), False, None)


def _role(labels: Mapping[str, Any] | None) -> tuple[Role, str | None]:
    """The pod's role and owner, from its (checked) labels."""
    if labels is None:
        return Role.POD, None
    if model_server_labels(labels):
        return Role.MODEL_SERVER, llmisvc_name_in(labels)
    component = component_in(labels)
    if component == "predictor":
        return Role.PREDICTOR, isvc_name_in(labels)
    if component in ("transformer", "explainer"):
        return Role.AUXILIARY, isvc_name_in(labels)
    return Role.POD, None


def view_pod(pod: object) -> PodView:
    """The pod ``pod`` (a Pod object, or a pod template with ``metadata`` and ``spec``) as
    every stage reads it. Never raises (see the module doc)."""
    reading = _Reading()
    if type(pod) is dict or isinstance(pod, Mapping):
        obj: Mapping[str, Any] = pod
    else:
        reading.error = InputError(f"invalid pod: expected a mapping, got {type(pod).__name__}")
        obj = {}
    meta = reading.read(as_mapping, {}, obj.get("metadata"), "pod metadata")
    labels = reading.read(as_mapping, None, meta.get("labels"), "metadata.labels")
    annotations = reading.read(as_mapping, {}, meta.get("annotations"), "pod annotations")
    spec = reading.read(as_mapping, {}, obj.get("spec"), "pod spec")
    role, owner = _role(labels)
    gpu = reading.read(read_gpu_use, _NO_GPU, spec)
    main = None
    if role is Role.MODEL_SERVER:
        main = reading.read(llmisvc_main_container, None, spec)
    if role is Role.AUXILIARY:
        runs = False
    else:
        runs = gpu.requested or (main is not None and not main.get("resources"))
    secrets, account = pull_fields(obj.get("spec"))
    return PodView(
        role=role,
        owner=owner,
        is_kserve=role is Role.MODEL_SERVER
        or (labels is not None and bool(labels.get(INFERENCESERVICE_LABEL))),
        who=f"pod {meta.get('name') or meta.get('generateName') or '?'}",
        namespace=namespace_of(obj),
        annotations=annotations,
        requests_gpu=gpu.requested,
        gpu_resources=gpu.resources,
        cuda_container=main if main is not None else gpu.container,
        skipped=is_skipped(annotations),
        runs_gpu_workload=runs,
        pull_secrets=secrets,
        service_account=account,
        error=reading.error,
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
