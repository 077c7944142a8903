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

__all__ = ["kserve_merged_names", "pull_scope"]

_RUNTIME_KINDS = frozenset({"ServingRuntime", "ClusterServingRuntime"})


def _spec_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    kind = obj.get("kind")
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    if kind == "Pod":
        return spec
    if kind == "InferenceService":
        predictor = spec.get("predictor")
        return predictor if isinstance(predictor, Mapping) else {}
    if kind == "LLMInferenceService":
        try:
            pod_spec: Mapping[str, Any] = llmisvc_pod(obj)["spec"]
        except InputError:
            return {}
        return pod_spec
    if kind in _RUNTIME_KINDS:
        return spec
    try:
        return pod_spec_of(obj)
    except InputError:
        return {}


def _names(spec: Mapping[str, Any]) -> list[str]:
    """The names ``spec.imagePullSecrets`` lists, first occurrences, entries without a name
    skipped."""
    names = []
    listed = spec.get("imagePullSecrets")
    for entry in listed if isinstance(listed, list) else ():
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if isinstance(name, str) and name.strip():
            names.append(name.strip())
    return list(dict.fromkeys(names))


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
    names = _names(spec)
    if runtime is not None and obj.get("kind") == "InferenceService":
        runtime_spec = runtime.get("spec")
        if isinstance(runtime_spec, Mapping):
            names = kserve_merged_names(_names(runtime_spec), names)
    account = spec.get("serviceAccountName") or spec.get("serviceAccount")
    return PullScope(
        namespace=namespace,
        secrets=tuple(names),
        service_account=account if isinstance(account, str) and account else "default",
    )
