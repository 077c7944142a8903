"""The policy mode's registration with the API server: cudasched's pod placement as a
``MutatingAdmissionPolicy`` (``admissionregistration.k8s.io/v1``, GA since Kubernetes 1.36) that
the API server runs itself, with no webhook on the request path, its parameters in
``PlacementTable`` objects the controller keeps (:mod:`cudasched.install.policycontroller`), and
a ``ValidatingAdmissionPolicy`` that warns about GPU pods it could not place. Choices a reviewer
should know about, each deliberate:

* **Parameters are a CRD, not ConfigMaps** (``docs/design.md``, sixth pass). A ConfigMap
  would be cheaper to read (the API server hands a built-in parameter kind to CEL lazily, a
  custom one converted whole, through JSON, for every activation), but the API server's
  informer for a built-in parameter kind stops for good, stale or empty, once no binding names
  that kind for a moment (kubernetes/kubernetes#130887, open; apiserver v0.37.2,
  ``policy/generic/policy_source.go``: the shared informer factory's informer is started with a
  per-policy stop channel and never started again), which a switch of modes does, and which
  would reach every other ConfigMap-parameter policy of the cluster. A custom kind gets an
  informer of its own each time. ``PlacementTable`` is typed (the pod keys, and a map of
  placement ids to ``{requirement, terms, deviceClass, claimClass}``), its schema bounds every
  list and string, and the objects are selected by label (``paramRef.selector``), so the
  controller can shard a large table over several objects within etcd's object limit: the API
  server evaluates the policy once per selected object, each within its own cost budget, and
  only the object that holds a pod's key patches it.
* **The pod keys are one string** (``vocab/placementtable``): a line per key, split once at the
  pod's key (Go's ``strings.SplitN``, no copy). Converting a string through JSON costs a
  fraction of converting a map with an entry per key, and that conversion is paid for every
  CEL activation: every pod's ``matchConditions``, CPU pods included, the mutation, and the
  reinvocation's conditions.
* **One table per namespace: the CRD is namespaced, the binding names no namespace.** The API
  server then looks the parameters up in the admitted pod's namespace only (apiserver v0.37.2,
  ``admission/plugin/policy/generic/policy_dispatcher.go``, ``CollectParams``), and it converts
  each selected object whole, through JSON, for every CEL activation (every pod's
  ``matchConditions``, CPU pods included, and every mutation): with one cluster-wide table a
  pod paid for every key of the cluster. Every key starts with its pod's namespace, so the
  controller writes each namespace's keys there (``webhook/policy/table``); a namespace without
  a table is one the policy does nothing in (``parameterNotFoundAction: Allow``).
* **``matchConditions`` equal to the webhook's** (:mod:`cudasched.install.registration`): pods
  that may need a GPU or declare a requirement, never ones that opt out; the namespace selector
  leaves out ``kube-system`` and cudasched's own namespace. Pods with ``spec.nodeName`` are left
  alone, as the webhook leaves them.
* **``reinvocationPolicy: IfNeeded``**, as the webhook's: the API server runs policies before
  webhooks, so a webhook that changes the pod afterwards (a sidecar injector, KServe's own pod
  mutator) triggers one more run, which strips the policy's earlier terms and ANDs them into the
  final affinity again (the merge is idempotent, :mod:`cudasched.placement.mergecel`). With
  ``Never`` a webhook that rewrites the affinity after us would silently drop the constraint.
  A pod whose GPUs cudasched already asked through a class (either ``dra.mode``, by the
  policy or the webhook) is left alone when run again
  (:data:`~cudasched.placement.claimcel.DRA_ASKED`): its new key would otherwise get node
  affinity the webhook would not add.
* **A pod whose placement by the policy is intact is skipped** (``matchConditions``: every
  required term carries the policy's marker). The API server reinvokes an ``IfNeeded`` policy
  once after its own change even when nothing ran after it (apiserver v0.37.2,
  ``policy/mutating/dispatcher.go``: the final "dirty" step marks every policy invoked so far),
  so without this condition every pod the policy placed was placed twice, the second time to
  the same answer: about half the policy's time in the API server (``benchmarks/RESULTS.md``
  section 12, third pass). A later webhook that drops or adds a term still gets the pod
  placed again. The same rule as the webhook's in the ``both`` mode, which leaves a pod the
  policy placed alone: a pod created with the policy's terms already in place (a copy of a
  stored pod) keeps them.
* **``failurePolicy: Ignore``** unless ``--fail-closed``, as the webhook's: a CEL error or a
  missing parameter admits the pod unplaced (and the ValidatingAdmissionPolicy warns).
* **Only ``mode: required``.** A preference list is kept the same way in principle, but the
  policy implements the default mode only; ``cudasched manifests --mode policy`` refuses a
  configuration that asks for ``preferred``.
* **Both ``dra.mode`` spellings.** A placement may name the DeviceClass the webhook asked the
  key's GPUs through. ``extended-resource``: the patch moves each container's ``nvidia.com/gpu``
  to the class's extended resource (:func:`~cudasched.placement.mergecel.dra_moves`: a JSON
  patch ``move`` keeps the pod's own count, which the table does not hold). ``claim``: the
  table keeps the class as ``claimClass`` and the patch gives each GPU container a claim of its
  own from the class's template for its count, read from the pod
  (:mod:`~cudasched.placement.claimcel`); the templates are the operator's to apply in each
  namespace (``cudasched device-classes --claim-templates``), as with the webhook. Whole or
  nothing, as the webhook: when one container's GPUs cannot be claimed (a count past six
  digits, limits and requests that differ) the policy leaves the whole pod alone, with no
  annotation, instead of storing fallback node affinity per key: the key pod always moves, so
  such terms would double the table for pods no node can hold; the unplaced warning says so
  (``policy``), or the webhook places the pod by node affinity (``both``, its answer).
"""

from __future__ import annotations

from typing import Any

from cudasched.install.naming import object_meta
from cudasched.install.registration import NOT_SKIPPED, POD_MAY_NEED_GPU
from cudasched.placement.claimcel import DRA_ASKED, claim_variables
from cudasched.placement.mergecel import (
    POLICY_PLACEMENT_INTACT,
    WEBHOOK_PLACED,
    affinity_variables,
    patch_expression,
)
from cudasched.vocab import labels as L
from cudasched.vocab import placementtable as T
from cudasched.vocab.kinds import PLACEMENT_TABLE
from cudasched.workloads.gpu import GPU_RESOURCE_PREFIXES
from cudasched.workloads.policykey import KEY_VERSION, key_expression

__all__ = [
    "POLICY",
    "UNPLACED_POLICY",
    "policy_objects",
    "table_crd",
]

POLICY = "cudasched-placement"
UNPLACED_POLICY = "cudasched-unplaced"

#: Bounds of the table's schema besides the counts per object (they also bound the API
#: server's CEL cost estimates).
MAX_TERMS = 128
MAX_EXPRESSIONS = 32
MAX_VALUES = 256


def _string(max_length: int) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_length}


def _table_schema() -> dict[str, Any]:
    expression = {
        "type": "object",
        "required": ["key", "operator"],
        "properties": {
            "key": _string(317),
            "operator": {
                "type": "string",
                "enum": ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"],
            },
            "values": {"type": "array", "maxItems": MAX_VALUES, "items": _string(63)},
        },
    }
    placement = {
        "type": "object",
        "properties": {
            "requirement": _string(1024),
            "deviceClass": _string(63),
            "claimClass": _string(63),
            "terms": {
                "type": "array",
                "maxItems": MAX_TERMS,
                "items": {
                    "type": "object",
                    "required": ["matchExpressions"],
                    "properties": {
                        "matchExpressions": {
                            "type": "array",
                            "maxItems": MAX_EXPRESSIONS,
                            "items": expression,
                        }
                    },
                },
            },
        },
    }
    return {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "required": ["format", "pods", "placements"],
                "properties": {
                    "format": _string(16),
                    # One line per key (vocab/placementtable), at most MAX_KEYS of them.
                    "pods": _string(T.MAX_PODS_TEXT),
                    "placements": {
                        "type": "object",
                        "maxProperties": T.MAX_PLACEMENTS,
                        "additionalProperties": placement,
                    },
                },
            },
        },
    }


def table_crd() -> dict[str, Any]:
    """The ``PlacementTable`` CustomResourceDefinition (namespaced: see the module docstring;
    a cluster with the cluster-scoped CRD of a development build must delete it first, the
    scope of a CRD cannot change, ``docs/guide/policy.md``)."""
    table = PLACEMENT_TABLE
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": object_meta(f"{table.plural}.{table.group}", None, "policy"),
        "spec": {
            "group": table.group,
            "scope": "Namespaced",
            "names": {
                "kind": table.kind,
                "listKind": f"{table.kind}List",
                "plural": table.plural,
                "singular": table.kind.lower(),
            },
            "versions": [
                {
                    "name": table.version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": _table_schema()},
                }
            ],
        },
    }


def _match_constraints(namespace: str) -> dict[str, Any]:
    return {
        "resourceRules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
            }
        ],
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": sorted({"kube-system", namespace}),
                }
            ]
        },
    }


def _match_conditions() -> list[dict[str, str]]:
    return [
        {"name": "may-need-gpu", "expression": POD_MAY_NEED_GPU},
        {"name": "not-skipped", "expression": NOT_SKIPPED},
        {"name": "not-placed-yet", "expression": f"!{POLICY_PLACEMENT_INTACT}"},
    ]


def _table_variables() -> list[tuple[str, str]]:
    """The policy's variables that find the pod's key in a table and read its placement as
    ``variables.entry``. The ``pods`` text is split once at ``\\n<key>\\t``: two parts if the
    key is there, its placement id what follows up to the next newline. A key holding either
    character is never looked up (no table holds one), and a table whose ``pods`` is not text
    (written before the keys were) holds none."""
    start, end = (c.encode("unicode_escape").decode() for c in (T.KEY_START, T.KEY_END))
    table = "params.spec"
    return [
        (
            "hit",
            f"{table}.format == '{KEY_VERSION}' && has({table}.pods) && "
            f"type({table}.pods) == string && !variables.key.contains('{start}') && "
            f"!variables.key.contains('{end}') ? "
            f"{table}.pods.split('{start}' + variables.key + '{end}', 2) : []",
        ),
        ("pid", f"variables.hit[1].split('{start}', 2)[0]"),
        (
            "found",
            f"size(variables.hit) == 2 && has({table}.placements) && "
            f"variables.pid in {table}.placements",
        ),
        ("entry", f"{table}.placements[variables.pid]"),
    ]


def _mutating_policy(namespace: str, *, fail_closed: bool) -> dict[str, Any]:
    annotation_path = L.ANN_REQUIREMENT.replace("~", "~0").replace("/", "~1")
    variables = [
        ("key", key_expression()),
        *_table_variables(),
        *affinity_variables(),
        *claim_variables(),
    ]
    expression = (
        f"!variables.found || has(object.spec.nodeName) || {WEBHOOK_PLACED} || {DRA_ASKED} "
        "? [] : "
        f"{patch_expression(annotation_path)}"
    )
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": object_meta(POLICY, None, "policy"),
        "spec": {
            "paramKind": {"apiVersion": PLACEMENT_TABLE.api_version, "kind": PLACEMENT_TABLE.kind},
            "matchConstraints": _match_constraints(namespace),
            "matchConditions": _match_conditions(),
            "variables": [{"name": n, "expression": e} for n, e in variables],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}],
            "failurePolicy": "Fail" if fail_closed else "Ignore",
            "reinvocationPolicy": "IfNeeded",
        },
    }


def _mutating_binding() -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": object_meta(POLICY, None, "policy"),
        "spec": {
            "policyName": POLICY,
            "paramRef": {
                "selector": {"matchLabels": {T.TABLE_LABEL: T.TABLE_VALUE}},
                # No namespace: the tables of the admitted pod's own namespace. None there yet
                # (the controller has not written one, or no pod there needs one): no patch.
                "parameterNotFoundAction": "Allow",
            },
        },
    }


def _requests_gpu() -> str:
    """CEL: a container or init container asks for an NVIDIA GPU, or the pod has a claim."""
    prefixes = " || ".join(f"r.startsWith('{p}')" for p in GPU_RESOURCE_PREFIXES)
    asks = (
        "has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(r, "
        f"({prefixes}) && string(c.resources.limits[r]) != '0')) || (has(c.resources.requests) "
        f"&& c.resources.requests.exists(r, ({prefixes}) && "
        "string(c.resources.requests[r]) != '0')))"
    )
    return (
        "(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0) || "
        f"object.spec.containers.exists(c, {asks}) || "
        f"(has(object.spec.initContainers) && object.spec.initContainers.exists(c, {asks}))"
    )


def _unplaced_policy(namespace: str) -> dict[str, Any]:
    """Warns (or, bound with ``Deny``, refuses) a GPU pod that leaves admission without
    cudasched's requirement: neither the policy nor the webhook knew what it needs."""
    placed = (
        f"has(object.metadata.annotations) && '{L.ANN_REQUIREMENT}' in object.metadata.annotations"
    )
    # One condition, not four: the API server evaluates every matchCondition of a policy
    # before it looks at any result, but CEL's && stops at the first false operand. Most GPU
    # pods reaching this policy were placed by the mutating one a moment before, so the cheap
    # test of the annotation comes first and settles them.
    unplaced_gpu_pod = " && ".join(
        f"({e})"
        for e in (
            f"!({placed})",
            "!has(object.spec.nodeName)",
            POD_MAY_NEED_GPU,
            NOT_SKIPPED,
            _requests_gpu(),
        )
    )
    message = (
        "'cudasched: no CUDA requirement is known for this GPU pod (its image, runtime or "
        "annotations are not in cudasched\\'s placement tables yet): admitted without CUDA-aware "
        "node affinity; set cudasched.io/cuda-version or wait for cudasched to resolve it'"
    )
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": object_meta(UNPLACED_POLICY, None, "policy"),
        "spec": {
            "matchConstraints": _match_constraints(namespace),
            "matchConditions": [{"name": "unplaced-gpu-pod", "expression": unplaced_gpu_pod}],
            "validations": [{"expression": placed, "messageExpression": message}],
            "failurePolicy": "Ignore",
        },
    }


def _validating_binding(*, deny: bool) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": object_meta(UNPLACED_POLICY, None, "policy"),
        "spec": {
            "policyName": UNPLACED_POLICY,
            "validationActions": ["Deny"] if deny else ["Warn"],
        },
    }


def policy_objects(
    namespace: str, *, fail_closed: bool = False, deny_unplaced: bool = False
) -> list[dict[str, Any]]:
    """The CRD, the MutatingAdmissionPolicy and its binding, the ValidatingAdmissionPolicy and
    its binding (``deny_unplaced``: refuse unplaced GPU pods instead of warning, so a
    controller creating pods retries until the table knows them)."""
    return [
        table_crd(),
        _mutating_policy(namespace, fail_closed=fail_closed),
        _mutating_binding(),
        _unplaced_policy(namespace),
        _validating_binding(deny=deny_unplaced),
    ]
