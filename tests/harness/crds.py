"""The CustomResourceDefinitions cudasched reads, written by this project for its tests.

KServe's ``InferenceService`` (v1beta1), ``ServingRuntime`` and ``ClusterServingRuntime``
(v1alpha1), ``LLMInferenceService`` (v1alpha1 and v1alpha2, storage v1alpha2) and the GPU Operator's
``NVIDIADriver`` (v1alpha1, cluster-scoped) and ``ClusterPolicy`` (v1, cluster-scoped;
``plan-drivers`` reads the release from its Helm labels), and the Policy Report working group's
``PolicyReport`` and ``ClusterPolicyReport`` (``wgpolicyk8s.io/v1alpha2``), so that the README's
``cudasched audit --live -o policyreport | kubectl apply -f -`` works on the harness. Sources
read, then written here in this project's own shape (names, groups, scopes, versions and
field names are the facts kept):

* kserve/kserve ``config/crd/minimal/serving.kserve.io_{inferenceservices,servingruntimes,
  clusterservingruntimes}.yaml`` @115c37fc / @3635402c (group, names, short name ``isvc``,
  versions, status subresource of InferenceService; the minimal CRDs keep all of ``spec``
  unknown-preserving), ``pkg/apis/serving/v1beta1/predictor.go`` (PredictorSpec: framework
  specs, ``model``, ``workerSpec``, inline PodSpec and ComponentExtensionSpec),
  ``pkg/apis/serving/v1alpha1/servingruntime_types.go`` @0217bdab (ServingRuntimeSpec and
  ServingRuntimePodSpec);
* kserve/kserve ``config/crd/full/llmisvc/serving.kserve.io_llminferenceservices.yaml`` and
  ``pkg/apis/serving/v1alpha2/llm_inference_service_types.go`` (short name ``llmisvc``,
  v1alpha1 served, v1alpha2 storage; WorkloadSpec: ``replicas``, ``parallelism``,
  ``template``, ``worker``, ``prefill``, ``router``, ``baseRefs``), as summarised in
  ``reference/ops-facts.md`` section 2;
* NVIDIA/gpu-operator ``config/crd/bases/nvidia.com_nvidiadrivers.yaml`` @04744073 (the
  ``driverType`` and ``kernelModuleType`` enums and defaults, the immutable ``driverType``,
  the spec fields; this repository's ``tests/data/planning/nvidiadriver-schema.yaml`` records
  the same facts).

The schemas are structural and typed down to the fields cudasched reads or writes, so strict
field validation reports a misspelt field there; the Kubernetes core types KServe embeds
(containers, volumes, tolerations, pod and security settings) are typed at their top level and
keep their own unknown fields, and status is free-form, as in KServe's minimal CRDs.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["all_crds", "crds_yaml"]

JSON = dict[str, Any]


def _array(items: JSON) -> JSON:
    return {"type": "array", "items": items}


_STRING: JSON = {"type": "string"}
_BOOL: JSON = {"type": "boolean"}
_INT: JSON = {"type": "integer"}
_STRINGS = _array(_STRING)
_STRING_MAP: JSON = {"type": "object", "additionalProperties": _STRING}
_OPAQUE: JSON = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_OPAQUE_LIST = _array(_OPAQUE)
_QUANTITY: JSON = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
}


def _obj(properties: JSON, *, required: list[str] | None = None, **extra: Any) -> JSON:
    schema: JSON = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema.update(extra)
    return schema


_RESOURCES = _obj(
    {
        "limits": {"type": "object", "additionalProperties": _QUANTITY},
        "requests": {"type": "object", "additionalProperties": _QUANTITY},
        "claims": _OPAQUE_LIST,
    }
)

#: ``env`` of the GPU Operator's images: plain name/value pairs.
_PLAIN_ENV = _array(_obj({"name": _STRING, "value": _STRING}, required=["name"]))
#: A list of references to objects in the same namespace (``imagePullSecrets``, ``baseRefs``).
_LOCAL_REFS = _array(_obj({"name": _STRING}))
_ENV_VAR = _obj({"name": _STRING, "value": _STRING, "valueFrom": _OPAQUE}, required=["name"])

#: corev1.Container: what cudasched reads is typed (image, env, resources); the rest of the
#: container API keeps its fields (probes, ports, mounts...).
_CONTAINER_FIELDS: JSON = {
    "name": _STRING,
    "image": _STRING,
    "imagePullPolicy": _STRING,
    "command": _STRINGS,
    "args": _STRINGS,
    "workingDir": _STRING,
    "env": _array(_ENV_VAR),
    "envFrom": _OPAQUE_LIST,
    "resources": _RESOURCES,
    "ports": _OPAQUE_LIST,
    "volumeMounts": _OPAQUE_LIST,
    "volumeDevices": _OPAQUE_LIST,
    "livenessProbe": _OPAQUE,
    "readinessProbe": _OPAQUE,
    "startupProbe": _OPAQUE,
    "lifecycle": _OPAQUE,
    "securityContext": _OPAQUE,
    "terminationMessagePath": _STRING,
    "terminationMessagePolicy": _STRING,
    "resizePolicy": _OPAQUE_LIST,
    "restartPolicy": _STRING,
    "stdin": _BOOL,
    "stdinOnce": _BOOL,
    "tty": _BOOL,
}
_CONTAINER = _obj(_CONTAINER_FIELDS, required=["name"])
#: An object the API server replaces whole on a merge (``x-kubernetes-map-type``).
_ATOMIC: JSON = {"x-kubernetes-map-type": "atomic"}
_CONTAINERS = _array(_CONTAINER)

_SELECTOR_REQUIREMENT = _obj(
    {
        "key": _STRING,
        "operator": {
            "type": "string",
            "enum": ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"],
        },
        "values": _STRINGS,
    },
    required=["key", "operator"],
)
_SELECTOR_TERM = _obj(
    {
        "matchExpressions": _array(_SELECTOR_REQUIREMENT),
        "matchFields": _array(_SELECTOR_REQUIREMENT),
    },
    **_ATOMIC,
)
#: corev1.Affinity: node affinity, which cudasched writes (``isvcAffinity``), fully typed.
_AFFINITY = _obj(
    {
        "nodeAffinity": _obj(
            {
                "requiredDuringSchedulingIgnoredDuringExecution": _obj(
                    {"nodeSelectorTerms": _array(_SELECTOR_TERM)},
                    required=["nodeSelectorTerms"],
                    **_ATOMIC,
                ),
                "preferredDuringSchedulingIgnoredDuringExecution": _array(
                    _obj(
                        {
                            "weight": {"type": "integer", "format": "int32"},
                            "preference": _SELECTOR_TERM,
                        },
                        required=["weight", "preference"],
                    )
                ),
            }
        ),
        "podAffinity": _OPAQUE,
        "podAntiAffinity": _OPAQUE,
    }
)

#: corev1.PodSpec (1.35), top-level fields.
_POD_SPEC_FIELDS: JSON = {
    "activeDeadlineSeconds": _INT,
    "affinity": _AFFINITY,
    "automountServiceAccountToken": _BOOL,
    "containers": _CONTAINERS,
    "dnsConfig": _OPAQUE,
    "dnsPolicy": _STRING,
    "enableServiceLinks": _BOOL,
    "ephemeralContainers": _OPAQUE_LIST,
    "hostAliases": _OPAQUE_LIST,
    "hostIPC": _BOOL,
    "hostNetwork": _BOOL,
    "hostPID": _BOOL,
    "hostUsers": _BOOL,
    "hostname": _STRING,
    "imagePullSecrets": _LOCAL_REFS,
    "initContainers": _CONTAINERS,
    "nodeName": _STRING,
    "nodeSelector": _STRING_MAP,
    "os": _OPAQUE,
    "overhead": {"type": "object", "additionalProperties": _QUANTITY},
    "preemptionPolicy": _STRING,
    "priority": _INT,
    "priorityClassName": _STRING,
    "readinessGates": _OPAQUE_LIST,
    "resourceClaims": _OPAQUE_LIST,
    "resources": _RESOURCES,
    "restartPolicy": _STRING,
    "runtimeClassName": _STRING,
    "schedulerName": _STRING,
    "schedulingGates": _OPAQUE_LIST,
    "securityContext": _OPAQUE,
    "serviceAccount": _STRING,
    "serviceAccountName": _STRING,
    "setHostnameAsFQDN": _BOOL,
    "shareProcessNamespace": _BOOL,
    "subdomain": _STRING,
    "terminationGracePeriodSeconds": _INT,
    "tolerations": _OPAQUE_LIST,
    "topologySpreadConstraints": _OPAQUE_LIST,
    "volumes": _OPAQUE_LIST,
}
_POD_SPEC = _obj(_POD_SPEC_FIELDS)

# -- KServe InferenceService v1beta1 --------------------------------------------------------

#: PredictorExtensionSpec: storage, runtime version, protocol and an inline Container.
_PREDICTOR_EXTENSION: JSON = {
    **_CONTAINER_FIELDS,
    "storageUri": _STRING,
    "runtimeVersion": _STRING,
    "protocolVersion": _STRING,
    "storage": _obj(
        {"path": _STRING, "schemaPath": _STRING, "parameters": _STRING_MAP, "key": _STRING}
    ),
}
_FRAMEWORK = _obj(_PREDICTOR_EXTENSION)
_MODEL = _obj(
    {
        **_PREDICTOR_EXTENSION,
        "modelFormat": _obj({"name": _STRING, "version": _STRING}, required=["name"]),
        "runtime": _STRING,
    },
    required=["modelFormat"],
)
#: ComponentExtensionSpec: scaling, rollout, logging and the pod's extra labels/annotations.
_COMPONENT_EXTENSION: JSON = {
    "minReplicas": _INT,
    "maxReplicas": _INT,
    "scaleTarget": _INT,
    "scaleMetric": _STRING,
    "scaleMetricType": _STRING,
    "containerConcurrency": _INT,
    "timeout": _INT,
    "canaryTrafficPercent": _INT,
    "logger": _OPAQUE,
    "batcher": _OPAQUE,
    "labels": _STRING_MAP,
    "annotations": _STRING_MAP,
    "deploymentStrategy": _OPAQUE,
    "autoScaling": _OPAQUE,
}
_FRAMEWORKS = (
    "sklearn",
    "xgboost",
    "tensorflow",
    "pytorch",
    "triton",
    "onnx",
    "huggingface",
    "pmml",
    "lightgbm",
    "paddle",
)
_WORKER_SPEC = _obj({**_POD_SPEC_FIELDS, "pipelineParallelSize": _INT, "tensorParallelSize": _INT})
_PREDICTOR = _obj(
    {
        **{name: _FRAMEWORK for name in _FRAMEWORKS},
        "model": _MODEL,
        "workerSpec": _WORKER_SPEC,
        **_POD_SPEC_FIELDS,
        **_COMPONENT_EXTENSION,
    }
)

# -- KServe ServingRuntime / ClusterServingRuntime v1alpha1 ----------------------------------

_RUNTIME_POD_FIELDS: JSON = {
    "containers": _CONTAINERS,
    "volumes": _OPAQUE_LIST,
    "nodeSelector": _STRING_MAP,
    "affinity": _AFFINITY,
    "tolerations": _OPAQUE_LIST,
    "labels": _STRING_MAP,
    "annotations": _STRING_MAP,
    "imagePullSecrets": _LOCAL_REFS,
    "hostIPC": _BOOL,
}
_RUNTIME_SPEC = _obj(
    {
        "supportedModelFormats": _array(
            _obj(
                {
                    "name": _STRING,
                    "version": _STRING,
                    "autoSelect": _BOOL,
                    "priority": {"type": "integer", "format": "int32", "minimum": 1},
                },
                required=["name"],
            )
        ),
        "multiModel": _BOOL,
        "disabled": _BOOL,
        "protocolVersions": _STRINGS,
        "workerSpec": _obj(
            {**_RUNTIME_POD_FIELDS, "pipelineParallelSize": _INT, "tensorParallelSize": _INT}
        ),
        **_RUNTIME_POD_FIELDS,
        "grpcEndpoint": _STRING,
        "grpcDataEndpoint": _STRING,
        "httpDataEndpoint": _STRING,
        "replicas": _INT,
        "storageHelper": _obj({"disabled": _BOOL}),
        "builtInAdapter": _OPAQUE,
    },
    required=["containers"],
)

# -- KServe LLMInferenceService v1alpha1 / v1alpha2 ------------------------------------------

_WORKLOAD_FIELDS: JSON = {
    "replicas": _INT,
    "scaling": _OPAQUE,
    "parallelism": _OPAQUE,
    "labels": _STRING_MAP,
    "annotations": _STRING_MAP,
    "template": _POD_SPEC,
    "worker": _POD_SPEC,
    "kvCacheOffloading": _OPAQUE,
    "rolloutStrategy": _OPAQUE,
}
_LLMISVC_SPEC = _obj(
    {
        "model": _obj(
            {
                "uri": _STRING,
                "name": _STRING,
                "lora": _OPAQUE,
                "confidential": _OPAQUE,
                "criticality": _STRING,
            }
        ),
        "storageInitializer": _OPAQUE,
        **_WORKLOAD_FIELDS,
        "router": _OPAQUE,
        "prefill": _obj(_WORKLOAD_FIELDS),
        "tracing": _OPAQUE,
        "baseRefs": _LOCAL_REFS,
    }
)

# -- GPU Operator NVIDIADriver v1alpha1 -----------------------------------------------------

_IMAGE_SPEC = _obj(
    {
        "enabled": _BOOL,
        "image": _STRING,
        "repository": _STRING,
        "version": _STRING,
        "imagePullPolicy": _STRING,
        "imagePullSecrets": _STRINGS,
        "env": _PLAIN_ENV,
        "args": _STRINGS,
    }
)
_NVIDIADRIVER_SPEC = _obj(
    {
        "driverType": {
            "type": "string",
            "enum": ["gpu", "vgpu", "vgpu-host-manager"],
            "default": "gpu",
            "x-kubernetes-validations": [
                {
                    "rule": "self == oldSelf",
                    "message": "driverType is immutable: create another NVIDIADriver instead",
                }
            ],
        },
        "kernelModuleType": {
            "type": "string",
            "enum": ["auto", "open", "proprietary"],
            "default": "auto",
        },
        "useOpenKernelModules": _BOOL,
        "usePrecompiled": _BOOL,
        "default": _BOOL,
        "image": {"type": "string", "default": "nvcr.io/nvidia/driver"},
        "repository": _STRING,
        "version": _STRING,
        "imagePullPolicy": _STRING,
        "imagePullSecrets": _STRINGS,
        "nodeSelector": _STRING_MAP,
        "nodeAffinity": _AFFINITY["properties"]["nodeAffinity"],
        "tolerations": _OPAQUE_LIST,
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
        "priorityClassName": _STRING,
        "hostNetwork": _BOOL,
        "args": _STRINGS,
        "env": _PLAIN_ENV,
        "resources": _RESOURCES,
        "manager": _IMAGE_SPEC,
        "gds": _IMAGE_SPEC,
        "gdrcopy": _IMAGE_SPEC,
        "repoConfig": _obj({"name": _STRING}),
        "certConfig": _obj({"name": _STRING}),
        "licensingConfig": _obj({"name": _STRING, "secretName": _STRING, "nlsEnabled": _BOOL}),
        "virtualTopologyConfig": _obj({"name": _STRING}),
        "kernelModuleConfig": _obj({"name": _STRING}),
        "startupProbe": _OPAQUE,
        "livenessProbe": _OPAQUE,
        "readinessProbe": _OPAQUE,
        "upgradePolicy": _obj(
            {
                "autoUpgrade": _BOOL,
                "maxParallelUpgrades": {"type": "integer", "minimum": 0},
                "maxUnavailable": _QUANTITY,
                "podDeletion": _OPAQUE,
                "waitForCompletion": _OPAQUE,
                "drain": _OPAQUE,
            }
        ),
    },
    required=["driverType", "image"],
    **{
        "x-kubernetes-validations": [
            {
                "rule": "!(has(self.default) && self.default) || !has(self.nodeSelector) "
                "|| size(self.nodeSelector) == 0",
                "message": "nodeSelector is not allowed on a default NVIDIADriver",
            }
        ]
    },
)


def _schema(spec: JSON) -> JSON:
    return {
        "openAPIV3Schema": _obj(
            {
                "apiVersion": _STRING,
                "kind": _STRING,
                "metadata": {"type": "object"},
                "spec": spec,
                "status": _OPAQUE,
            }
        )
    }


def _crd(
    group: str,
    kind: str,
    plural: str,
    *,
    scope: str,
    versions: list[tuple[str, bool]],
    spec: JSON,
    short: list[str] | None = None,
    status: bool = True,
    columns: list[JSON] | None = None,
    source: str = "",
) -> JSON:
    names: JSON = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
    }
    if short:
        names["shortNames"] = short
    rendered = []
    for name, storage in versions:
        version: JSON = {
            "name": name,
            "served": True,
            "storage": storage,
            "schema": _schema(spec),
        }
        if status:
            version["subresources"] = {"status": {}}
        if columns:
            version["additionalPrinterColumns"] = columns
        rendered.append(version)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{group}",
            "labels": {"app.kubernetes.io/part-of": "cudasched-e2e"},
            "annotations": {
                "e2e.cudasched.io/written-from": source,
                "e2e.cudasched.io/note": "written by cudasched for its tests, typed down to the "
                "fields cudasched reads or writes; not the upstream CRD",
            },
        },
        "spec": {"group": group, "names": names, "scope": scope, "versions": rendered},
    }


_KSERVE = "serving.kserve.io"
_RUNTIME_TYPES = "pkg/apis/serving/v1alpha1/servingruntime_types.go@0217bdab"


def _runtime_crd(kind: str, plural: str, scope: str, crd_file: str, age: JSON) -> JSON:
    """ServingRuntime or ClusterServingRuntime: one spec, in a namespace or cluster-wide."""
    return _crd(
        _KSERVE,
        kind,
        plural,
        scope=scope,
        versions=[("v1alpha1", True)],
        spec=_RUNTIME_SPEC,
        status=False,
        columns=[{"name": "Disabled", "type": "boolean", "jsonPath": ".spec.disabled"}, age],
        source=f"kserve/kserve config/crd/minimal/{crd_file}, {_RUNTIME_TYPES}",
    )


def _policy_report_crd(kind: str, plural: str, scope: str, short: str, age: JSON) -> JSON:
    """PolicyReport or ClusterPolicyReport (``wgpolicyk8s.io/v1alpha2``), which ``cudasched
    audit -o policyreport`` writes: a report keeps its fields at the top level (no spec)."""
    crd = _crd(
        _POLICY_REPORTS,
        kind,
        plural,
        scope=scope,
        versions=[("v1alpha2", True)],
        spec=_OPAQUE,
        short=[short],
        status=False,
        source=f"kubernetes-sigs/wg-policy-prototypes policy-report/crd/v1alpha2/"
        f"wgpolicyk8s.io_{plural}.yaml (group, names, scope, v1alpha2; scope, scopeSelector, "
        "summary and results at the top level, kept as given)",
        columns=[
            {"name": "Pass", "type": "integer", "jsonPath": ".summary.pass"},
            {"name": "Fail", "type": "integer", "jsonPath": ".summary.fail"},
            {"name": "Warn", "type": "integer", "jsonPath": ".summary.warn"},
            age,
        ],
    )
    top = {
        "apiVersion": _STRING,
        "kind": _STRING,
        "metadata": {"type": "object"},
        "scope": _OPAQUE,
        "scopeSelector": _OPAQUE,
        "summary": _OPAQUE,
        "results": _OPAQUE_LIST,
    }
    for version in crd["spec"]["versions"]:
        version["schema"] = {"openAPIV3Schema": _obj(top)}
    return crd


_POLICY_REPORTS = "wgpolicyk8s.io"


def all_crds() -> list[JSON]:
    """The eight CRDs, fresh dicts each call."""
    age = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    return [
        _crd(
            _KSERVE,
            "InferenceService",
            "inferenceservices",
            scope="Namespaced",
            versions=[("v1beta1", True)],
            spec=_obj(
                {"predictor": _PREDICTOR, "transformer": _OPAQUE, "explainer": _OPAQUE},
                required=["predictor"],
            ),
            short=["isvc"],
            source="kserve/kserve config/crd/minimal/serving.kserve.io_inferenceservices.yaml"
            "@115c37fc, pkg/apis/serving/v1beta1/predictor.go",
            columns=[
                {"name": "URL", "type": "string", "jsonPath": ".status.url"},
                {
                    "name": "Ready",
                    "type": "string",
                    "jsonPath": ".status.conditions[?(@.type=='Ready')].status",
                },
                age,
            ],
        ),
        _runtime_crd(
            "ServingRuntime",
            "servingruntimes",
            "Namespaced",
            "serving.kserve.io_servingruntimes.yaml@3635402c",
            age,
        ),
        _runtime_crd(
            "ClusterServingRuntime",
            "clusterservingruntimes",
            "Cluster",
            "serving.kserve.io_clusterservingruntimes.yaml@115c37fc",
            age,
        ),
        _crd(
            _KSERVE,
            "LLMInferenceService",
            "llminferenceservices",
            scope="Namespaced",
            versions=[("v1alpha1", False), ("v1alpha2", True)],
            spec=_LLMISVC_SPEC,
            short=["llmisvc"],
            source="kserve/kserve config/crd/full/llmisvc/serving.kserve.io_llminferenceservices"
            ".yaml, pkg/apis/serving/v1alpha2/llm_inference_service_types.go (as cudasched "
            "reference/ops-facts.md section 2 records them)",
        ),
        _crd(
            "nvidia.com",
            "NVIDIADriver",
            "nvidiadrivers",
            scope="Cluster",
            versions=[("v1alpha1", True)],
            spec=_NVIDIADRIVER_SPEC,
            short=["nvd", "nvdriver", "nvdrivers"],
            source="NVIDIA/gpu-operator config/crd/bases/nvidia.com_nvidiadrivers.yaml@04744073",
            columns=[{"name": "Status", "type": "string", "jsonPath": ".status.state"}, age],
        ),
        _crd(
            "nvidia.com",
            "ClusterPolicy",
            "clusterpolicies",
            scope="Cluster",
            versions=[("v1", True)],
            spec=_OPAQUE,
            source="NVIDIA/gpu-operator deployments/gpu-operator/crds/nvidia.com_clusterpolicies"
            ".yaml@v26.7.0 (group, names, scope, v1, status subresource; cudasched reads only "
            "the object's labels, so spec keeps its unknown fields)",
            columns=[{"name": "Status", "type": "string", "jsonPath": ".status.state"}, age],
        ),
        _policy_report_crd("PolicyReport", "policyreports", "Namespaced", "polr", age),
        _policy_report_crd("ClusterPolicyReport", "clusterpolicyreports", "Cluster", "cpolr", age),
    ]


class _NoAliases(yaml.SafeDumper):
    """Shared sub-schemas written out in full: no YAML anchors in a CRD a person reads."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def crds_yaml() -> str:
    """The CRDs as multi-document YAML (``kubectl apply -f -``)."""
    return yaml.dump_all(all_crds(), Dumper=_NoAliases, sort_keys=False)


if __name__ == "__main__":
    print(crds_yaml(), end="")
