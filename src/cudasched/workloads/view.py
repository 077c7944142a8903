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

from collections.abc import Container, Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple

from cudasched.knowledge.imageconfig import PullScope
from cudasched.vocab.errors import InputError
from cudasched.vocab.kserve import INFERENCESERVICE_LABEL
from cudasched.vocab.objects import DEFAULT_NAMESPACE, as_mapping
from cudasched.workloads.gpu import GpuMemo, GpuUse, read_gpu_use
from cudasched.workloads.kserve.llm import (
    llmisvc_main_container,
    llmisvc_name_in,
    model_server_labels,
)
from cudasched.workloads.kserve.pods import component_in, isvc_name_in
from cudasched.workloads.pods import is_skipped
from cudasched.workloads.pullscope import pull_fields

__all__ = ["PodView", "Role", "service_listed", "view_pod"]


class Role(StrEnum):
    """What a pod is, as cudasched treats it."""

    PREDICTOR = "predictor"  # a KServe predictor pod (head or multi-node worker)
    AUXILIARY = "auxiliary"  # a KServe transformer or explainer: never runs the runtime's image
    MODEL_SERVER = "model-server"  # an LLMInferenceService model server (decode, prefill, ...)
    POD = "pod"  # any other pod


class PodView(NamedTuple):
    """A pod as every stage reads it (see the module doc). Immutable; a named tuple rather
    than a frozen dataclass because ``explain`` builds one for each of tens of thousands of
    workloads, and a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__`` (several times the cost of the whole tuple)."""

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
    #: container with a GPU, else KServe's predictor or worker container, else the first
    #: that consumes one of the pod's resource claims.
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


def _strict(
    value: object, what: str, error: InputError | None
) -> tuple[Mapping[str, Any] | None, InputError | None]:
    """``value`` read as a mapping (absent: empty) and the view's first error so far; on an
    error, ``None`` and that error kept unless one came first. Only called for a value that
    is not a dict (decoded JSON's mappings are: the common case makes no call)."""
    try:
        return as_mapping(value, what), error
    except InputError as exc:
        return None, error or exc


_NO_GPU = GpuUse(frozenset(), False, None)
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _role(labels: Mapping[str, Any] | None) -> tuple[Role, str | None]:
    """The pod's role and owner, from its (checked) labels: the readers of
    :mod:`~cudasched.workloads.kserve.llm` and :mod:`~cudasched.workloads.kserve.pods`."""
    if labels is None:
        return Role.POD, None
    if model_server_labels(labels):
        return Role.MODEL_SERVER, llmisvc_name_in(labels)
    component = component_in(labels)
    if component is None:
        return Role.POD, None
    role = Role.PREDICTOR if component == "predictor" else Role.AUXILIARY
    return role, isvc_name_in(labels)


def _parts(
    pod: object,
) -> tuple[
    Mapping[str, Any],
    Mapping[str, Any] | None,
    Mapping[str, Any],
    Mapping[str, Any],
    InputError | None,
]:
    """The pod's metadata, labels (``None`` when unreadable: no role), annotations and spec,
    each read strictly, and the first error; decoded JSON's mappings are dicts, so the common
    case makes no call."""
    error: InputError | None = None
    obj = pod if (type(pod) is dict or isinstance(pod, Mapping)) else None
    if obj is None:
        error = InputError(f"invalid pod: expected a mapping, got {type(pod).__name__}")
        obj = _EMPTY
    meta = obj.get("metadata")
    if type(meta) is not dict:
        meta, error = _strict(meta, "pod metadata", error)
        meta = meta if meta is not None else _EMPTY
    labels = meta.get("labels")
    if type(labels) is not dict:
        labels, error = _strict(labels, "metadata.labels", error)
    annotations = meta.get("annotations")
    if type(annotations) is not dict:
        annotations, error = _strict(annotations, "pod annotations", error)
        annotations = annotations if annotations is not None else _EMPTY
    spec = obj.get("spec")
    if type(spec) is not dict:
        spec, error = _strict(spec, "pod spec", error)
        spec = spec if spec is not None else _EMPTY
    return meta, labels, annotations, spec, error


def _containers(
    spec: Mapping[str, Any], role: Role, memo: GpuMemo | None
) -> tuple[GpuUse, Mapping[str, Any] | None, InputError | None]:
    """What the containers say: the GPU reading, a model server's ``main``, the first error."""
    error: InputError | None = None
    try:
        gpu = read_gpu_use(spec, memo)
    except InputError as exc:
        error, gpu = exc, _NO_GPU
    main = None
    if role is Role.MODEL_SERVER:
        try:
            main = llmisvc_main_container(spec)
        except InputError as exc:
            error = error or exc
    return gpu, main, error


def view_pod(pod: object, *, gpu_memo: GpuMemo | None = None) -> PodView:
    """The pod ``pod`` (a Pod object, or a pod template with ``metadata`` and ``spec``) as
    every stage reads it. Never raises (see the module doc). ``gpu_memo``: a caller's memo of
    containers' GPU reading (:data:`~cudasched.workloads.gpu.GpuMemo`), for one that reads
    many alike pods."""
    meta, labels, annotations, spec, error = _parts(pod)
    role, owner = _role(labels)
    gpu, main, late = _containers(spec, role, gpu_memo)
    requested = gpu.claims or bool(gpu.resources)
    # A model server whose main names no resources takes them from the configs: a GPU server.
    runs = role is not Role.AUXILIARY and (
        requested or (main is not None and not main.get("resources"))
    )
    secrets, account = pull_fields(spec)
    namespace = meta.get("namespace")
    return PodView(  # positionally: one is built per pod of an explain call
        role,
        owner,
        role is Role.MODEL_SERVER
        or (labels is not None and bool(labels.get(INFERENCESERVICE_LABEL))),
        f"pod {meta.get('name') or meta.get('generateName') or '?'}",
        namespace if namespace and isinstance(namespace, str) else DEFAULT_NAMESPACE,
        annotations,
        requested,
        gpu.resources,
        main if main is not None else gpu.container,
        is_skipped(annotations),
        runs,
        secrets,
        account,
        error or late,
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
