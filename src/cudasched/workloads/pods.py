"""Workloads and the pods they create: the one reader of "which pod will this become" and "does
it use a GPU", shared by admission, ``explain`` and the operations commands.

A workload is a Pod, a controller with a pod template (Deployment, StatefulSet, DaemonSet,
ReplicaSet, Job, ReplicationController, PodTemplate), a CronJob, or a KServe InferenceService
(whose pod is the predictor pod KServe builds from it and its runtime). Objects are plain dicts as
the Kubernetes API returns them; bad shapes raise :class:`~cudasched.vocab.errors.InputError` naming
the workload.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import CRON_JOB, KSERVE_GROUP, POD_TEMPLATE, POD_TEMPLATE_KINDS
from cudasched.vocab.objects import as_mapping, metadata_of, name_of, namespace_of
from cudasched.workloads.gpu import uses_gpu
from cudasched.workloads.kserve import (
    RuntimeChoice,
    is_predictor_pod,
    isvc_name_of,
    isvc_uses_gpu,
    predictor_pod,
)
from cudasched.workloads.kserve.llm import llmisvc_of_pod


class ClusterObjects(Protocol):
    """What :func:`workloads_of` reads of a cluster (``cluster.snapshot.ClusterSnapshot`` has
    it): declared here so this stage does not depend on the one above it."""

    @property
    def workloads(self) -> Sequence[Mapping[str, Any]]: ...
    @property
    def pods(self) -> Sequence[Mapping[str, Any]]: ...
    @property
    def inference_services(self) -> Sequence[Mapping[str, Any]]: ...
    @property
    def llm_inference_services(self) -> Sequence[Mapping[str, Any]]: ...


__all__ = [
    "SKIP_VALUES",
    "PodTemplate",
    "is_inference_service",
    "is_skipped",
    "pod_of",
    "pod_spec_of",
    "read_pod_template",
    "template_pod",
    "workload_id",
    "workload_uses_gpu",
    "workloads_of",
]

#: Values of ``cudasched.io/skip`` that leave a workload alone (any letter case, surrounding
#: space ignored). The webhook's CEL pre-filter only knows the exact ``"true"``; the webhook
#: itself, ``explain`` and the audit accept all of these.
SKIP_VALUES = frozenset({"true", "yes", "1"})

# Controllers whose pods come from ``spec.template`` (CronJob nests one level deeper,
# a PodTemplate holds it at the top).
_TEMPLATE_KINDS = frozenset(k.kind for k in POD_TEMPLATE_KINDS if k not in (CRON_JOB, POD_TEMPLATE))

KSERVE_API_PREFIX = f"{KSERVE_GROUP}/"


def is_skipped(annotations: Mapping[str, Any]) -> bool:
    """Whether ``cudasched.io/skip`` asks cudasched to leave the workload alone."""
    value = annotations.get(L.ANN_SKIP)
    return isinstance(value, str) and value.strip().lower() in SKIP_VALUES


def is_inference_service(obj: Mapping[str, Any]) -> bool:
    """A KServe InferenceService (any served version)."""
    return obj.get("kind") == "InferenceService" and str(obj.get("apiVersion", "")).startswith(
        KSERVE_API_PREFIX
    )


def workload_id(obj: Mapping[str, Any]) -> str:
    """``namespace/Kind/name`` (namespace ``default`` when unset, as kubectl would apply it)."""
    meta = as_mapping(obj.get("metadata"), "metadata")
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    return f"{meta.get('namespace') or 'default'}/{obj.get('kind') or '?'}/{name}"


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """What a workload's pods get: ``spec`` (a new top-level dict), ``metadata`` (the template's;
    a Pod's own) and ``annotations`` (the object's own overlaid with its template's: both are
    where a user writes ``cudasched.io/*``)."""

    workload: str
    spec: dict[str, Any]
    metadata: Mapping[str, Any]
    annotations: dict[str, Any]


def _template_of(obj: Mapping[str, Any], who: str) -> Mapping[str, Any] | None:
    """The pod template of a controller (``None`` for a Pod or a bare pod spec holder). A
    kind that is not text is no kind (a list would not even hash)."""
    kind = obj.get("kind")
    kind = kind if isinstance(kind, str) else None
    spec = as_mapping(obj.get("spec"), f"spec of {who}")
    if kind == "CronJob":
        job = as_mapping(spec.get("jobTemplate"), f"spec.jobTemplate of {who}")
        job_spec = as_mapping(job.get("spec"), f"spec.jobTemplate.spec of {who}")
        return as_mapping(job_spec.get("template"), f"pod template of {who}")
    if kind == "PodTemplate":
        return as_mapping(obj.get("template"), f"template of {who}")
    if kind in _TEMPLATE_KINDS or isinstance(spec.get("template"), Mapping):
        return as_mapping(spec.get("template"), f"spec.template of {who}")
    return None


def _checked(obj: Mapping[str, Any]) -> tuple[str, Mapping[str, Any] | None]:
    """The workload's id and pod template (``None`` for a Pod), read once for every part."""
    if type(obj) is not dict and not isinstance(obj, Mapping):
        raise InputError(f"invalid workload {obj!r}: expected a Kubernetes object (a mapping)")
    who = workload_id(obj)
    return who, None if obj.get("kind") == "Pod" else _template_of(obj, who)


def _pod_spec(
    obj: Mapping[str, Any], who: str, template: Mapping[str, Any] | None
) -> dict[str, Any]:
    if template is not None:
        spec = as_mapping(template.get("spec"), f"pod template spec of {who}")
        if spec:
            return dict(spec)
        raise InputError(f"{who}: its pod template has no spec")
    raw = obj.get("spec")
    # (the message is only built when it may be needed)
    spec = raw if type(raw) is dict else as_mapping(raw, f"spec of {who}")
    if obj.get("kind") == "Pod" or "containers" in spec:
        return dict(spec)
    raise InputError(
        f"{who}: no pod spec found; expected a Pod, a workload with spec.template "
        "(Deployment, StatefulSet, DaemonSet, ReplicaSet, Job), a CronJob, or an object "
        "whose spec has containers"
    )


def _template_metadata(
    obj: Mapping[str, Any], who: str, template: Mapping[str, Any] | None
) -> Mapping[str, Any]:
    if obj.get("kind") == "Pod":
        return as_mapping(obj.get("metadata"), "metadata")
    if template is None:
        return {}
    return as_mapping(template.get("metadata"), f"pod template metadata of {who}")


def _overlaid_annotations(
    obj: Mapping[str, Any], who: str, template: Mapping[str, Any] | None
) -> dict[str, Any]:
    own = as_mapping(as_mapping(obj.get("metadata"), "metadata").get("annotations"), "annotations")
    pods = as_mapping(_template_metadata(obj, who, template).get("annotations"), "annotations")
    merged = own if pods is own else {**own, **pods}  # a Pod's template is the Pod itself
    return {k if type(k) is str else str(k): v for k, v in merged.items()}


def read_pod_template(obj: Mapping[str, Any]) -> PodTemplate:
    """The pod spec, metadata and annotations ``obj``'s pods get, read in one pass (errors
    name the workload): a Pod's ``spec``, a controller's ``spec.template.spec``, a CronJob's
    ``spec.jobTemplate.spec.template.spec``, or the ``spec`` of any object holding
    ``containers`` directly."""
    who, template = _checked(obj)
    spec = _pod_spec(obj, who, template)
    return PodTemplate(
        workload=who,
        spec=spec,
        metadata=_template_metadata(obj, who, template),
        annotations=_overlaid_annotations(obj, who, template),
    )


def pod_spec_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The pod spec a workload's pods get (see :func:`read_pod_template`)."""
    return _pod_spec(obj, *_checked(obj))


def pod_of(obj: Mapping[str, Any], runtime: RuntimeChoice | None = None) -> dict[str, Any]:
    """The pod a workload creates, as admission will see it: a Pod itself; a controller's
    template metadata (with the object's annotations underneath) and pod spec; for an
    InferenceService the predictor pod KServe builds with ``runtime``."""
    if is_inference_service(obj):
        return predictor_pod(obj, runtime)
    if obj.get("kind") == "Pod":
        return dict(obj)
    return template_pod(obj, read_pod_template(obj))


def template_pod(obj: Mapping[str, Any], template: PodTemplate) -> dict[str, Any]:
    """The pod controller ``obj`` creates from its pod template (``template``, already read
    by :func:`read_pod_template`): the template's metadata with the object's name and
    namespace, the object's annotations under the template's, and the template's spec."""
    meta = metadata_of(obj)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **template.metadata,
            "name": meta.get("name"),
            "namespace": meta.get("namespace") or "default",
            "annotations": template.annotations,
        },
        "spec": template.spec,
    }


def workload_uses_gpu(obj: Mapping[str, Any], runtime: RuntimeChoice | None = None) -> bool:
    """Whether the workload's pods request an NVIDIA GPU. For an InferenceService: any pod of
    its predictor (the head or a multi-node worker, runtime containers included)."""
    if is_inference_service(obj):
        return isvc_uses_gpu(obj, runtime.obj if runtime is not None else None)
    return uses_gpu(pod_spec_of(obj))


# --------------------------------------------------------------------------- a cluster's


def _controller_key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    return (str(obj.get("kind")), namespace_of(obj), str(metadata_of(obj).get("name")))


def _owned_by_listed(obj: Mapping[str, Any], listed: set[tuple[str, str, str]]) -> bool:
    """Whether a controller of ``obj`` is itself listed (its pods would repeat it)."""
    namespace = namespace_of(obj)
    return any(
        isinstance(ref, Mapping)
        and ref.get("controller")
        and (str(ref.get("kind")), namespace, str(ref.get("name"))) in listed
        for ref in metadata_of(obj).get("ownerReferences") or ()
    )


def workloads_of(snapshot: ClusterObjects) -> list[Mapping[str, Any]]:
    """A cluster's workloads, each once: controllers, pods (minus those whose controller is
    listed too), then InferenceServices that have no predictor pod in the snapshot and
    LLMInferenceServices that have no model-server pod (not created yet, or scaled to zero):
    the services admission and the audit judge as objects are explained too."""
    candidates = [*snapshot.workloads, *snapshot.pods]
    listed = {_controller_key(o) for o in snapshot.workloads}
    chosen = [o for o in candidates if not _owned_by_listed(o, listed)]
    with_pods = {(namespace_of(p), isvc_name_of(p)) for p in snapshot.pods if is_predictor_pod(p)}
    for isvc in snapshot.inference_services:
        if (namespace_of(isvc), name_of(isvc)) not in with_pods:
            chosen.append(isvc)
    serving = {(namespace_of(p), llmisvc_of_pod(p)) for p in snapshot.pods}
    for llmisvc in snapshot.llm_inference_services:
        if (namespace_of(llmisvc), name_of(llmisvc)) not in serving:
            chosen.append(dict(llmisvc))
    return chosen
