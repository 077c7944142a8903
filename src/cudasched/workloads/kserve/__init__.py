"""KServe, as cudasched needs it: which runtime serves an InferenceService, which pods belong
to it, and the predictor pod KServe builds.

KServe never writes the chosen runtime into the InferenceService spec, and nothing on the pod
names it either, so a CUDA requirement that lives on a runtime (its image, its labels) can only
be found by repeating KServe's own selection. Every rule here mirrors KServe's Go code; the
files are cited next to each rule so a reader can check them against a KServe release:

* ``pkg/apis/serving/v1beta1/predictor_model.go``: ``GetSupportingRuntimes``,
  ``RuntimeSupportsModel``, the ``mt:name[:version]`` label sets, ``sortServingRuntimeList``,
  ``sortSupportedRuntimeByPriority``, ``GetProtocolVersionPriority``, ``GetProtocol``;
* ``pkg/apis/serving/v1alpha1/servingruntime_types.go``: ``IsDisabled``,
  ``IsMultiModelRuntime``, ``IsMultiNodeRuntime``, ``IsProtocolVersionSupported``,
  ``GetPriority``;
* ``pkg/apis/serving/v1beta1/inference_service_defaults.go``: ``setPredictorModelDefaults``
  (legacy ``spec.predictor.<framework>`` fields become ``spec.predictor.model``);
* ``pkg/controller/v1beta1/inferenceservice/components/predictor.go``: ``reconcileModel``
  (explicit runtime first, then the first auto-selected one; the status fields),
  ``buildObjectMeta`` / ``reconcileWorker`` (pod labels), ``buildPodSpec``;
* ``pkg/controller/v1beta1/inferenceservice/utils/utils.go``: ``GetServingRuntime`` (namespace
  runtime before cluster runtime), ``UpdateImageTag`` (``runtimeVersion`` and ``-gpu`` tags);
* ``pkg/utils/utils.go``: ``IsGPUEnabled`` (an ``nvidia.com/gpu`` limit);
* ``pkg/constants/constants.go``: label keys, container names, protocol order.

Where KServe versions differ we follow the newest behaviour (KServe >= 0.16) and say so.
LLMInferenceService (llm-d) objects and pods are read by :mod:`cudasched.workloads.kserve.llm`.
Everything is pure: objects are plain dicts as the Kubernetes API returns them.
"""

from cudasched.workloads.kserve.model import LEGACY_FRAMEWORKS, ModelRequest, effective_model
from cudasched.workloads.kserve.pods import (
    component_of,
    is_multinode_worker,
    is_predictor_pod,
    isvc_name_of,
)
from cudasched.workloads.kserve.predictor import (
    SCHEDULING_FIELDS,
    isvc_uses_gpu,
    merge_scheduling,
    predictor_container,
    predictor_image,
    predictor_pod,
    runtime_containers,
)
from cudasched.workloads.kserve.runtimes import (
    CLUSTER_SERVING_RUNTIME,
    DEPLOYMENT_MODE_ANNOTATION,
    SERVING_RUNTIME,
    ParsedRuntimes,
    RuntimeChoice,
    RuntimeRef,
    explain_runtime_selection,
    recorded_runtime,
    runtime_of_pod,
    runtime_refused,
    select_runtime,
    supporting_runtimes,
)

__all__ = [
    "CLUSTER_SERVING_RUNTIME",
    "DEPLOYMENT_MODE_ANNOTATION",
    "LEGACY_FRAMEWORKS",
    "SCHEDULING_FIELDS",
    "SERVING_RUNTIME",
    "ModelRequest",
    "ParsedRuntimes",
    "RuntimeChoice",
    "RuntimeRef",
    "component_of",
    "effective_model",
    "explain_runtime_selection",
    "is_multinode_worker",
    "is_predictor_pod",
    "isvc_name_of",
    "isvc_uses_gpu",
    "merge_scheduling",
    "predictor_container",
    "predictor_image",
    "predictor_pod",
    "recorded_runtime",
    "runtime_containers",
    "runtime_of_pod",
    "runtime_refused",
    "select_runtime",
    "supporting_runtimes",
]
