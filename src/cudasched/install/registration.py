"""The webhook's registration with the API server: the MutatingWebhookConfiguration (one
webhook for pods, one for InferenceServices, one for LLMInferenceServices, one for the workload
controllers whose pod templates it judges). Choices a reviewer should know about, each
deliberate:

* ``failurePolicy: Ignore``. The webhook sits on every GPU pod creation; if it is down, pods are
  admitted without CUDA-aware affinity (the pre-cudasched behaviour) rather than blocking every
  deployment in the cluster. The cost is that a pod created during an outage may land on a node
  that cannot run it. Clusters that prefer the opposite pass ``--fail-closed`` (``Fail``).
* ``reinvocationPolicy: IfNeeded``: other mutating webhooks (KServe's own pod mutator, Istio,
  GPU sharing) may add containers or affinity after us; being re-invoked lets us AND the
  requirement into their final affinity. The mutation is idempotent, so re-invocation is safe.
* ``timeoutSeconds: 3``: the API server default is 10 s; admission answers from memory in
  milliseconds, so a short timeout bounds the damage of a stuck replica.
* ``sideEffects``: ``NoneOnDryRun`` everywhere: the webhook records a ``NoCompatibleNode``
  Event on an InferenceService, LLMInferenceService or workload controller no node can run,
  and on the pods of such a controller and the controller that made them (never for a dry
  run).
* LLMInferenceServices are matched at ``v1alpha1`` and ``v1alpha2`` (KServe 0.16 serves the
  first, 0.17 and later both, storing the second); ``matchPolicy: Equivalent`` sends requests
  for either.
* ``matchConditions`` skip pods that cannot need a GPU before the API server calls us at all:
  no ``nvidia.com/*`` resource, no resource claim, no ``cudasched.io/*`` annotation, no KServe
  InferenceService label and not part of an LLMInferenceService (whose model server may take
  its GPUs from a config the pod does not show until it is built). The webhook re-checks
  everything itself, so the conditions only save round trips.
* Deployments, StatefulSets, Jobs, CronJobs and LeaderWorkerSets (CREATE and UPDATE) are
  sent so that the person who applies one hears what its pods will be told (their pods are
  created later by a controller, whose warnings nobody reads); the answer never patches
  (``reinvocationPolicy: Never``) and never refuses. A LeaderWorkerSet CRD that is not
  installed only leaves its rule unused.
* With the policy mode beside it (``cudasched manifests --mode both``) the pod webhook also
  skips pods the MutatingAdmissionPolicy already placed (its marker, ``not-placed-by-policy``):
  the API server runs policies first, so the webhook is called only for what the policy's
  tables do not know yet, and the two never both add terms.
* With ``dra.mode`` on (``cudasched manifests --dra``), ResourceClaims (CREATE, ``resource.k8s.io``
  ``v1``) are sent too, but only those kube-controller-manager makes from a pod's template
  (``matchConditions``: the ``resource.kubernetes.io/pod-claim-name`` annotation and a
  controlling ``v1`` Pod owner): the webhook reads that pod and adds its class's selectors
  to the claim's GPU requests. Always ``failurePolicy: Ignore`` (an unnarrowed claim is what
  the pod asked for; a refused one would leave the pod waiting), ``reinvocationPolicy:
  Never`` and ``sideEffects: None``. Claims a person creates are not sent: the pods that will
  use them do not exist yet.
* ``namespaceSelector`` excludes ``kube-system`` and cudasched's own namespace, so the webhook can
  never block its own recovery.
"""

from __future__ import annotations

import base64
from typing import Any

from cudasched.install.naming import APP, CA_CERTIFICATE, object_meta
from cudasched.placement.mergecel import POLICY_PLACED
from cudasched.vocab import labels as L
from cudasched.vocab.kinds import INFERENCE_SERVICE, LLM_INFERENCE_SERVICE
from cudasched.workloads.kserve.llm import PART_OF_LABEL, PART_OF_VALUE
from cudasched.workloads.pods import SKIP_VALUES

__all__ = [
    "CLAIM_FOR_POD",
    "NOT_SKIPPED",
    "POD_MAY_NEED_GPU",
    "webhook_configuration",
]

# CEL: true when the pod could need a GPU or declares a requirement. Kept on one condition so a
# pod is sent when ANY of these hold (matchConditions are ANDed with each other).
POD_MAY_NEED_GPU = " || ".join(
    [
        "(has(object.metadata.annotations) && "
        "object.metadata.annotations.exists(k, k.startsWith('cudasched.io/')))",
        "(has(object.metadata.labels) && "
        "'serving.kserve.io/inferenceservice' in object.metadata.labels)",
        f"(has(object.metadata.labels) && '{PART_OF_LABEL}' in object.metadata.labels && "
        f"object.metadata.labels['{PART_OF_LABEL}'] == '{PART_OF_VALUE}')",
        "(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)",
        "object.spec.containers.exists(c, has(c.resources) && has(c.resources.limits) && "
        "c.resources.limits.exists(r, r.startsWith('nvidia.com/')))",
    ]
)


#: The workload controllers whose pod templates the webhook judges (warn-only), by API group.
_WORKLOAD_RESOURCES = (
    ("apps", ("deployments", "statefulsets")),
    ("batch", ("jobs", "cronjobs")),
    ("leaderworkerset.x-k8s.io", ("leaderworkersets",)),
)


def _any_case(word: str) -> str:
    """An RE2 pattern for ``word`` in any ASCII letter case (``[Tt][Rr][Uu][Ee]``): ``(?i)``
    would also fold non-ASCII letters, which the webhook's own reading does not."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in word)


# The skip switch as the webhook reads it (workloads.SKIP_VALUES, any case, surrounding
# whitespace ignored), so a pod the webhook would skip is not even sent to it.
_SKIP_PATTERN = r"^\\s*(" + "|".join(_any_case(v) for v in sorted(SKIP_VALUES)) + r")\\s*$"
NOT_SKIPPED = (
    "!has(object.metadata.annotations) || "
    f"!('{L.ANN_SKIP}' in object.metadata.annotations) || "
    f"!object.metadata.annotations['{L.ANN_SKIP}'].matches('{_SKIP_PATTERN}')"
)


#: CEL: the claim was made from a pod's template by kube-controller-manager (its annotation and
#: its controlling Pod owner, as ``pkg/controller/resourceclaim`` writes them).
CLAIM_FOR_POD = (
    "has(object.metadata.annotations) && "
    "'resource.kubernetes.io/pod-claim-name' in object.metadata.annotations && "
    "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, "
    "r.apiVersion == 'v1' && r.kind == 'Pod' && has(r.controller) && r.controller)"
)


def _pod_conditions(beside_policy: bool) -> list[dict[str, str]]:
    conditions = [
        {"name": "may-need-gpu", "expression": POD_MAY_NEED_GPU},
        {"name": "not-skipped", "expression": NOT_SKIPPED},
    ]
    if beside_policy:
        conditions.append({"name": "not-placed-by-policy", "expression": f"!{POLICY_PLACED}"})
    return conditions


def webhook_configuration(
    namespace: str,
    *,
    ca_bundle_pem: bytes | None = None,
    cert_manager: bool = False,
    fail_closed: bool = False,
    beside_policy: bool = False,
    dra_claims: bool = False,
) -> dict[str, Any]:
    """The MutatingWebhookConfiguration: one webhook for pods, one for InferenceServices, one
    for LLMInferenceServices, one for workload controllers (warn-only); ``beside_policy``: pods
    the policy placed are not sent; ``dra_claims``: one for the ResourceClaims made for
    pods."""
    annotations: dict[str, str] = {}
    if cert_manager:
        annotations["cert-manager.io/inject-ca-from"] = f"{namespace}/{CA_CERTIFICATE}"
    client_config_extra: dict[str, Any] = {}
    if ca_bundle_pem is not None:
        client_config_extra["caBundle"] = base64.b64encode(ca_bundle_pem).decode()
    common: dict[str, Any] = {
        "admissionReviewVersions": ["v1"],
        "sideEffects": "NoneOnDryRun",
        "timeoutSeconds": 3,
        "failurePolicy": "Fail" if fail_closed else "Ignore",
        "reinvocationPolicy": "IfNeeded",
        "matchPolicy": "Equivalent",
        "namespaceSelector": _namespace_selector(namespace),
    }

    def client_config(path: str) -> dict[str, Any]:
        return {
            "service": {"name": APP, "namespace": namespace, "path": path, "port": 443},
            **client_config_extra,
        }

    meta = object_meta(APP, None, "webhook")
    if annotations:
        meta["annotations"] = annotations
    claims = (
        [_claims_webhook(client_config("/mutate/resourceclaims"), common)] if dra_claims else []
    )
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": meta,
        "webhooks": [
            {
                "name": "pods.cudasched.io",
                "clientConfig": client_config("/mutate/pods"),
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "matchConditions": _pod_conditions(beside_policy),
                **common,
            },
            _service_webhook(
                "inferenceservices.cudasched.io",
                client_config("/mutate/inferenceservices"),
                INFERENCE_SERVICE.group,
                [INFERENCE_SERVICE.version],
                [INFERENCE_SERVICE.plural],
                common,
            ),
            _service_webhook(
                "llminferenceservices.cudasched.io",
                client_config("/mutate/llminferenceservices"),
                LLM_INFERENCE_SERVICE.group,
                ["v1alpha1", "v1alpha2"],
                [LLM_INFERENCE_SERVICE.plural],
                common,
            ),
            _workloads_webhook(client_config("/mutate/workloads"), common),
            *claims,
        ],
    }


def _namespace_selector(namespace: str) -> dict[str, Any]:
    """Every namespace but ``kube-system`` and cudasched's own."""
    excluded = sorted({"kube-system", namespace})
    return {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": excluded}
        ]
    }


def _service_webhook(
    name: str,
    client_config: dict[str, Any],
    group: str,
    versions: list[str],
    resources: list[str],
    common: dict[str, Any],
) -> dict[str, Any]:
    """The webhook of a kind users deploy and wait on (CREATE and UPDATE): it records a
    NoCompatibleNode Event on the object, never for a dry run."""
    return {
        "name": name,
        "clientConfig": client_config,
        "rules": [
            {
                "apiGroups": [group],
                "apiVersions": versions,
                "operations": ["CREATE", "UPDATE"],
                "resources": resources,
                "scope": "Namespaced",
            }
        ],
        "matchConditions": [{"name": "not-skipped", "expression": NOT_SKIPPED}],
        **common,
        "sideEffects": "NoneOnDryRun",
    }


def _workloads_webhook(client_config: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """The workload controllers' webhook: warn-only, so nothing is patched and a
    re-invocation would only repeat the warnings (``reinvocationPolicy: Never``)."""
    hook = _service_webhook("workloads.cudasched.io", client_config, "", ["v1"], [], common)
    hook["rules"] = [
        {
            "apiGroups": [group],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": list(resources),
            "scope": "Namespaced",
        }
        for group, resources in _WORKLOAD_RESOURCES
    ]
    hook["reinvocationPolicy"] = "Never"
    return hook


def _claims_webhook(client_config: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """The ResourceClaims' webhook: only claims made for a pod from its template; never
    fails the claim (``Ignore`` whatever ``--fail-closed`` says) and never re-invoked."""
    return {
        "name": "resourceclaims.cudasched.io",
        "clientConfig": client_config,
        "rules": [
            {
                "apiGroups": ["resource.k8s.io"],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["resourceclaims"],
                "scope": "Namespaced",
            }
        ],
        "matchConditions": [{"name": "made-for-a-pod", "expression": CLAIM_FOR_POD}],
        **common,
        "failurePolicy": "Ignore",
        "reinvocationPolicy": "Never",
        "sideEffects": "None",
    }
