"""The names KServe gives the objects it makes: pod labels, container names, the GPU resource
(``pkg/constants/constants.go`` of kserve/kserve). Declared once, here, so the stage that reads
a pod's GPU container and the KServe readers use the same names without importing each other.
"""

from __future__ import annotations

__all__ = [
    "APP_LABEL",
    "COMPONENTS",
    "COMPONENT_LABEL",
    "INFERENCESERVICE_LABEL",
    "MANAGED_DRA_CEL_SELECTOR",
    "MANAGED_DRA_DEVICE_CLASS",
    "NVIDIA_GPU",
    "PREDICTOR_CONTAINER",
    "TRANSFORMER_CONTAINER",
    "WORKER_CONTAINER",
    "WORKER_SUFFIX",
]

# pkg/constants/constants.go
INFERENCESERVICE_LABEL = "serving.kserve.io/inferenceservice"  # InferenceServicePodLabelKey
COMPONENT_LABEL = "component"  # KServiceComponentLabel
APP_LABEL = "app"  # RawDeploymentAppLabel
PREDICTOR_CONTAINER = "kserve-container"  # InferenceServiceContainerName
WORKER_CONTAINER = "worker-container"  # WorkerContainerName
TRANSFORMER_CONTAINER = "transformer-container"  # TransformerContainerName
WORKER_SUFFIX = "-worker"  # "-" + WorkerNodeSuffix
COMPONENTS = frozenset({"predictor", "transformer", "explainer"})
NVIDIA_GPU = "nvidia.com/gpu"  # NvidiaGPUResourceType
# An LLMInferenceService's managed DRA (KServe main, 2026): the class its pods' claim asks, and
# CEL selectors (one per line) the request adds; ManagedDRA*AnnotationKey.
MANAGED_DRA_DEVICE_CLASS = "serving.kserve.io/exp-dra-device-class"
MANAGED_DRA_CEL_SELECTOR = "serving.kserve.io/exp-dra-cel-selector"
