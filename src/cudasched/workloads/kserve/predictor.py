"""The predictor pod KServe builds for an InferenceService, as far as placement depends on it.

``buildPodSpec`` merges the runtime's ``kserve-container`` with the model's container fields
(``MergeRuntimeContainers``) and rewrites its image tag (``UpdateImageTag``); ``MergePodSpec``
merges the runtime's and the predictor's scheduling fields with a strategic merge patch whose
affinity lists carry no merge key, so an InferenceService's ``nodeSelectorTerms`` *replace* the
runtime's. ``isvc_uses_gpu`` says whether any pod of the predictor (head or multi-node worker)
will request a GPU.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cudasched.vocab.jsontree import copy_json
from cudasched.vocab.kserve import (
    COMPONENT_LABEL,
    INFERENCESERVICE_LABEL,
    NVIDIA_GPU,
    PREDICTOR_CONTAINER,
)
from cudasched.vocab.objects import (
    as_list,
    as_mapping,
    checked_name,
    metadata_of,
    namespace_of,
    optional_str,
)
from cudasched.workloads.gpu import uses_gpu
from cudasched.workloads.kserve.model import LEGACY_FRAMEWORKS, effective_model
from cudasched.workloads.kserve.runtimes import RuntimeChoice

__all__ = [
    "SCHEDULING_FIELDS",
    "isvc_uses_gpu",
    "merge_scheduling",
    "predictor_container",
    "predictor_image",
    "predictor_pod",
    "runtime_containers",
]

# UpdateImageTag appends "-gpu" only for these built-in runtimes (constants.TFServing,
# constants.TorchServe, constants.HuggingFaceServer).
_GPU_TAG_RUNTIMES = frozenset(
    {"kserve-tensorflow-serving", "kserve-torchserve", "kserve-huggingfaceserver"}
)
# PredictorExtensionSpec / ModelSpec fields that sit next to the inline container fields.
_NOT_CONTAINER_FIELDS = frozenset(
    {
        "name",
        "modelFormat",
        "runtime",
        "storageUri",
        "storage",
        "protocolVersion",
        "runtimeVersion",
        "confidential",
    }
)
_TAG_RE = re.compile(r"(:([\w.\-_]*))$")  # UpdateImageTag's tag pattern, verbatim semantics

#: Pod-spec fields KServe takes from the runtime and the predictor (``MergePodSpec``).
SCHEDULING_FIELDS = ("nodeSelector", "affinity", "tolerations", "schedulerName")


# --------------------------------------------------------------------------- containers


def runtime_containers(
    runtime: Mapping[str, Any], *, worker: bool = False
) -> tuple[Mapping[str, Any], ...]:
    """The runtime's containers (``spec.containers``, or ``spec.workerSpec.containers``)."""
    what = f"{runtime.get('kind') or 'runtime'} {checked_name(runtime)}"
    spec = as_mapping(runtime.get("spec"), what + " spec")
    if worker:
        spec = as_mapping(spec.get("workerSpec"), f"{what} spec.workerSpec")
    containers = as_list(spec.get("containers"), f"{what} containers")
    return tuple(as_mapping(c, f"{what} container") for c in containers)


def _merge_containers(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """The fields we read after ``MergeRuntimeContainers`` (a strategic merge of the
    InferenceService container onto the runtime's): scalars replace, ``resources`` maps merge
    per key, ``env`` merges by name."""
    merged = dict(base)
    for key, value in override.items():
        if key in _NOT_CONTAINER_FIELDS or value in (None, "", [], {}):
            continue
        if key == "resources":
            base_res = as_mapping(base.get(key), "resources")
            res = {k: dict(as_mapping(v, f"resources.{k}")) for k, v in base_res.items()}
            for part, values in as_mapping(value, "resources").items():
                res.setdefault(part, {}).update(as_mapping(values, f"resources.{part}"))
            merged[key] = res
        elif key == "env":
            env = {
                e.get("name"): e for e in as_list(base.get("env"), "env") if isinstance(e, Mapping)
            }
            for e in as_list(value, "env"):
                if isinstance(e, Mapping):
                    env[e.get("name")] = e
            merged[key] = list(env.values())
        else:
            merged[key] = value
    return merged


def predictor_container(
    isvc: Mapping[str, Any], runtime: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The predictor's main container roughly as KServe builds it (``buildPodSpec``).

    With a runtime: its ``kserve-container`` merged with the model's container fields, with
    the image tag rewritten like ``UpdateImageTag`` does. Without one: the predictor's own
    ``kserve-container`` (or first container). ``None`` when there is nothing to read.
    """
    spec = as_mapping(isvc.get("spec"), "InferenceService" + " spec")
    predictor = as_mapping(spec.get("predictor"), "spec.predictor")
    if runtime is None:
        containers = [
            as_mapping(c, "spec.predictor.containers[]")
            for c in as_list(predictor.get("containers"), "spec.predictor.containers")
        ]
        for c in containers:
            if c.get("name") == PREDICTOR_CONTAINER:
                return dict(c)
        return dict(containers[0]) if containers else None
    base = next(
        (c for c in runtime_containers(runtime) if c.get("name") == PREDICTOR_CONTAINER), None
    )
    if base is None:
        return None  # KServe refuses such a runtime ("failed to find kserve-container")
    model = effective_model(isvc)
    merged = _merge_containers(base, model.container if model is not None else {})
    image = merged.get("image")
    if isinstance(image, str) and image:
        merged["image"] = _update_image_tag(
            image,
            runtime_version=optional_str(
                model.container.get("runtimeVersion") if model else None, "runtimeVersion"
            ),
            gpu=NVIDIA_GPU in as_mapping(merged.get("resources"), "resources").get("limits", {}),
            runtime_name=checked_name(runtime),
        )
    return merged


def _update_image_tag(
    image: str, *, runtime_version: str | None, gpu: bool, runtime_name: str
) -> str:
    """utils.go ``UpdateImageTag``: digests are left alone; ``runtimeVersion`` replaces (or
    adds) the tag; else a GPU container of the TF Serving, TorchServe or Hugging Face runtime
    gets ``-gpu`` appended to a tag that lacks it."""
    if "@sha256:" in image:
        return image
    if runtime_version is not None:
        if _TAG_RE.search(image) is None:
            return f"{image}:{runtime_version}"
        return _TAG_RE.sub(lambda _m: ":" + runtime_version, image)
    gpu_tagged = runtime_name in _GPU_TAG_RUNTIMES and _TAG_RE.search(image) is not None
    if gpu and gpu_tagged and not image.endswith("-gpu"):
        return image + "-gpu"
    return image


def predictor_image(isvc: Mapping[str, Any], runtime: Mapping[str, Any] | None) -> str | None:
    """The image KServe puts in the predictor's ``kserve-container`` (see
    :func:`predictor_container`); ``None`` when it cannot be known."""
    container = predictor_container(isvc, runtime)
    if container is None:
        return None
    image = container.get("image")
    return str(image) if image else None


# --------------------------------------------------------------------------- scheduling


def merge_scheduling(runtime: Any, isvc: Any) -> Any:
    """KServe's strategic merge of a runtime's and a predictor's scheduling field: mappings
    merge key by key, lists and scalars from the InferenceService replace the runtime's (no
    list in these fields carries a merge key). Returns new objects; neither input changes."""
    if isinstance(runtime, Mapping) and isinstance(isvc, Mapping):
        out = {k: copy_json(v) for k, v in runtime.items()}
        for key, value in isvc.items():
            out[key] = (
                merge_scheduling(runtime.get(key), value) if key in runtime else (copy_json(value))
            )
        return out
    return copy_json(isvc if isvc is not None else runtime)


def predictor_pod(isvc: Mapping[str, Any], choice: RuntimeChoice | None) -> dict[str, Any]:
    """The predictor pod KServe would create for ``isvc`` (the parts placement depends on):
    the runtime's scheduling fields under the predictor's, the merged predictor container,
    and the labels and annotations KServe puts on predictor pods."""
    meta = metadata_of(isvc)
    spec = isvc.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    predictor = spec.get("predictor")
    predictor = predictor if isinstance(predictor, Mapping) else {}
    runtime_spec = (choice.obj.get("spec") or {}) if choice is not None else {}
    pod_spec: dict[str, Any] = {}
    for key in SCHEDULING_FIELDS:
        merged = merge_scheduling(runtime_spec.get(key), predictor.get(key))
        if merged is not None:
            pod_spec[key] = merged
    container = predictor_container(isvc, choice.obj if choice is not None else None)
    pod_spec["containers"] = [container] if container is not None else []
    name = str(meta.get("name") or "")
    annotations = {
        **(runtime_spec.get("annotations") or {}),
        **(meta.get("annotations") or {}),
        **(predictor.get("annotations") or {}),
    }
    labels = {
        **(runtime_spec.get("labels") or {}),
        **(meta.get("labels") or {}),
        **(predictor.get("labels") or {}),
        INFERENCESERVICE_LABEL: name,
        COMPONENT_LABEL: "predictor",
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-predictor",
            "namespace": namespace_of(isvc),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": pod_spec,
    }


def isvc_uses_gpu(isvc: Mapping[str, Any], runtime: Mapping[str, Any] | None) -> bool:
    """Whether any pod of the predictor (the head, or a multi-node worker) requests a GPU.

    KServe merges the runtime's container into the model container (resource maps merge key
    by key), so a GPU limit on either side reaches the pod: the union of the model (or legacy
    framework) container, the predictor's own containers, the runtime's containers, the
    ``workerSpec`` containers and the predictor's resource claims is checked.
    """
    spec = isvc.get("spec")
    predictor = spec.get("predictor") if isinstance(spec, Mapping) else None
    if not isinstance(predictor, Mapping):
        return False
    containers: list[Any] = []
    model = predictor.get("model")
    if isinstance(model, Mapping):
        containers.append(model)
    for key in LEGACY_FRAMEWORKS:
        legacy = predictor.get(key)
        if isinstance(legacy, Mapping):
            containers.append(legacy)
    containers.extend(_mappings(predictor.get("containers")))
    rt_spec = (runtime or {}).get("spec")
    if isinstance(rt_spec, Mapping):
        containers.extend(_mappings(rt_spec.get("containers")))
    worker = predictor.get("workerSpec")
    if isinstance(worker, Mapping):
        containers.extend(_mappings(worker.get("containers")))
    claims = predictor.get("resourceClaims")
    pseudo = {
        "containers": containers,
        "resourceClaims": claims if isinstance(claims, list) else [],
    }
    return bool(uses_gpu(pseudo))


def _mappings(value: object) -> list[Mapping[str, Any]]:
    """The mappings of a list; anything that is not a list (a number, a string, a mapping
    where a list of containers belongs) holds none. What KServe would reject is not ours to
    reject: the GPU question only reads what is there."""
    return [c for c in value if isinstance(c, Mapping)] if isinstance(value, list) else []
