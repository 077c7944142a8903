"""Whose pull secrets a registry look-up for a workload may use (:class:`PullScope`).

The kubelet pulls a pod's images with the Secrets its ``spec.imagePullSecrets`` names, in the
pod's namespace (kubernetes/kubernetes pkg/kubelet/kubelet_pods.go ``getPullSecretsForPod``).
A pod that names none gets its ServiceAccount's ``imagePullSecrets`` at creation, from the
``ServiceAccount`` admission plugin ("if the pod does not contain any ImagePullSecrets, the
ImagePullSecrets of the service account are added", plugin/pkg/admission/serviceaccount/
admission.go); a pod that names no ServiceAccount runs as ``default``. The scope says the same:
the workload's own secrets, or else its ServiceAccount's, in its namespace.

An InferenceService's predictor pod gets its ServingRuntime's (or ClusterServingRuntime's)
``imagePullSecrets`` as well: KServe's ``MergePodSpec`` strategic-merges the runtime's pod
spec, ``imagePullSecrets`` included, with the predictor's (kserve/kserve
pkg/controller/v1beta1/inferenceservice/utils/utils.go at v0.20.0, 1fb78105), and
``imagePullSecrets`` is a list merged by ``name`` (``ServingRuntimePodSpec``,
pkg/apis/serving/v1alpha1/servingruntime_types.go). The names are read in the
InferenceService's namespace, where the pod runs, whichever kind the runtime is.

Pure: reads the objects only. A Pod's spec, an InferenceService's predictor (its pod spec
fields are inline) with its runtime's, an LLMInferenceService's pod (``template``, else
``worker``), a ServingRuntime's spec (its pod spec fields are inline), a controller's pod
template.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cudasched.knowledge.imageconfig import PullScope
from cudasched.vocab.errors import InputError
from cudasched.vocab.objects import namespace_of
from cudasched.workloads.kserve.llm import llmisvc_pod
from cudasched.workloads.pods import pod_spec_of

__all__ = ["DEFAULT_ACCOUNT", "kserve_merged_names", "pull_fields", "pull_scope"]

#: The ServiceAccount a pod that names none runs as.
DEFAULT_ACCOUNT = "default"

_RUNTIME_KINDS = frozenset({"ServingRuntime", "ClusterServingRuntime"})


def _spec_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod spec (or the spec holding its fields inline) that ``obj``'s pods pull with;
    empty when there is none or it cannot be read. A kind that is not text is no kind."""
    kind = obj.get("kind")
    kind = kind if isinstance(kind, str) else ""
    spec = _mapping(obj.get("spec"))
    if kind == "Pod" or kind in _RUNTIME_KINDS:
        return spec
    if kind == "InferenceService":
        return _mapping(spec.get("predictor"))
    if kind == "LLMInferenceService":
        try:
            pod_spec: Mapping[str, Any] = llmisvc_pod(obj)["spec"]
        except InputError:
            return {}
        return pod_spec
    try:
        return pod_spec_of(obj)
    except InputError:
        return {}


def _mapping(value: object) -> Mapping[str, Any]:
    # (decoded JSON is a dict: no abstract-class check for it)
    return value if (type(value) is dict or isinstance(value, Mapping)) else {}


def _text(value: object) -> str:
    """``value`` when it is text, else ``""``: a field of any other shape names nothing."""
    return value if isinstance(value, str) else ""


def _names(spec: Mapping[str, Any]) -> list[str]:
    """The names ``spec.imagePullSecrets`` lists, first occurrences, entries without a name
    (or whose name is not text) skipped."""
    names = []
    listed = spec.get("imagePullSecrets")
    for entry in listed if isinstance(listed, list) else ():
        name = _text(entry.get("name")).strip() if isinstance(entry, Mapping) else ""
        if name:
            names.append(name)
    return list(dict.fromkeys(names))


def pull_fields(spec: object) -> tuple[tuple[str, ...], str]:
    """What a pod spec says about pulling, read as the kubelet and the ServiceAccount plugin
    read it: the ``imagePullSecrets`` names (see :func:`_names`) and the ServiceAccount
    (``serviceAccountName``, else the deprecated ``serviceAccount``, else ``default``). Any
    JSON in: a field of another shape is absent; never raises."""
    spec = _mapping(spec)
    # Every pod view asks this, so the common case (no pull secrets; the ServiceAccount
    # plugin has set serviceAccountName) makes no further call.
    account = spec.get("serviceAccountName")
    if not (account and isinstance(account, str)):
        account = _text(spec.get("serviceAccount")) or DEFAULT_ACCOUNT
    names = tuple(_names(spec)) if "imagePullSecrets" in spec else ()
    return names, account


def kserve_merged_names(runtime: list[str], predictor: list[str]) -> list[str]:
    """The ``imagePullSecrets`` names of the pod KServe builds from a runtime's list and a
    predictor's, in the order a strategic merge patch leaves them (k8s.io/apimachinery
    pkg/util/strategicpatch/patch.go at v0.34.5, b72d93d1, the version KServe v0.20.0 pins:
    ``mergeSlice`` then ``normalizeElementOrder``): the predictor's names in their order and
    the names only the runtime lists in theirs, merged by walking both (``mergeSortedSlice``):
    a runtime-only name goes first only when the runtime lists it before the predictor name
    it is weighed against; a predictor name the runtime does not list goes first. The order
    matters where two Secrets hold credentials for one registry (the first is used)."""
    if not predictor:
        return list(dict.fromkeys(runtime))
    right = list(dict.fromkeys(predictor))
    place: dict[str, int] = {}
    for index, name in enumerate(runtime):
        place.setdefault(name, index)
    left = [name for name in place if name not in right]
    out: list[str] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if j >= len(right) or (
            i < len(left) and right[j] in place and place[left[i]] < place[right[j]]
        ):
            out.append(left[i])
            i += 1
        else:
            out.append(right[j])
            j += 1
    return out


def pull_scope(
    obj: Mapping[str, Any],
    namespace: str = "",
    *,
    runtime: Mapping[str, Any] | None = None,
) -> PullScope:
    """The pull scope of ``obj`` in ``namespace`` (an admission request's own, which the API
    server vouches for), else in the object's namespace (``default`` when it names none).
    Entries without a name are skipped. For an InferenceService, ``runtime`` is the
    ServingRuntime or ClusterServingRuntime KServe builds its predictor from: its
    ``imagePullSecrets`` are merged in as KServe merges them (:func:`kserve_merged_names`)."""
    namespace = namespace or namespace_of(obj)
    spec = _spec_of(obj)
    names, account = pull_fields(spec)
    if runtime is not None and obj.get("kind") == "InferenceService":
        runtime_spec = _mapping(_mapping(runtime).get("spec"))
        names = tuple(kserve_merged_names(_names(runtime_spec), list(names)))
    return PullScope(namespace=namespace, secrets=names, service_account=account)
