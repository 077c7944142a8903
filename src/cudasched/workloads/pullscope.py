"""Whose pull secrets a registry look-up for a workload may use (:class:`PullScope`).

The kubelet pulls a pod's images with the Secrets its ``spec.imagePullSecrets`` names, in the
pod's namespace (kubernetes/kubernetes pkg/kubelet/kubelet_pods.go ``getPullSecretsForPod``).
A pod that names none gets its ServiceAccount's ``imagePullSecrets`` at creation, from the
``ServiceAccount`` admission plugin ("if the pod does not contain any ImagePullSecrets, the
ImagePullSecrets of the service account are added", plugin/pkg/admission/serviceaccount/
admission.go); a pod that names no ServiceAccount runs as ``default``. The scope says the same:
the workload's own secrets, or else its ServiceAccount's, in its namespace.

Pure: reads the object only. A Pod's spec, an InferenceService's predictor (its pod spec
fields are inline), an LLMInferenceService's ``template``, a controller's pod template.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cudasched.knowledge.imageconfig import PullScope
from cudasched.vocab.errors import InputError
from cudasched.vocab.objects import namespace_of
from cudasched.workloads.pods import pod_spec_of

__all__ = ["pull_scope"]


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
        template = spec.get("template")
        return template if isinstance(template, Mapping) else {}
    try:
        return pod_spec_of(obj)
    except InputError:
        return {}


def pull_scope(obj: Mapping[str, Any], namespace: str = "") -> PullScope:
    """The pull scope of ``obj`` in ``namespace`` (an admission request's own, which the API
    server vouches for), else in the object's namespace (``default`` when it names none).
    Entries without a name are skipped."""
    namespace = namespace or namespace_of(obj)
    spec = _spec_of(obj)
    names = []
    listed = spec.get("imagePullSecrets")
    for entry in listed if isinstance(listed, list) else ():
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if isinstance(name, str) and name.strip():
            names.append(name.strip())
    account = spec.get("serviceAccountName") or spec.get("serviceAccount")
    return PullScope(
        namespace=namespace,
        secrets=tuple(dict.fromkeys(names)),
        service_account=account if isinstance(account, str) and account else "default",
    )
