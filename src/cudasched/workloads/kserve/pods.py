"""KServe's pods: the labels and container names KServe puts on the pods of an InferenceService,
and readers that tell a predictor (head or multi-node worker) pod from a transformer or
explainer pod (``predictor.go`` ``buildObjectMeta`` / ``reconcileWorker``, ``constants.go``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cudasched.vocab.kserve import (
    APP_LABEL,
    COMPONENT_LABEL,
    COMPONENTS,
    INFERENCESERVICE_LABEL,
    WORKER_CONTAINER,
    WORKER_SUFFIX,
)
from cudasched.vocab.objects import as_list, as_mapping, checked_labels

__all__ = [
    "component_in",
    "component_of",
    "is_multinode_worker",
    "is_predictor_pod",
    "isvc_name_in",
    "isvc_name_of",
]

# --------------------------------------------------------------------------- pods


def isvc_name_of(pod: Mapping[str, Any]) -> str | None:
    """The owning InferenceService's name, from the pod label KServe sets."""
    return isvc_name_in(checked_labels(pod))


def isvc_name_in(labels: Mapping[str, Any]) -> str | None:
    """:func:`isvc_name_of` of a pod whose (checked) labels are ``labels``."""
    value = labels.get(INFERENCESERVICE_LABEL)
    return str(value) if value else None


def component_of(pod: Mapping[str, Any]) -> str | None:
    """``predictor``, ``transformer`` or ``explainer`` from the ``component`` label.

    Multi-node worker pods carry ``component: predictor`` too (predictor.go
    ``reconcileWorker``); tell them apart with :func:`is_multinode_worker`.
    """
    return component_in(checked_labels(pod))


def component_in(labels: Mapping[str, Any]) -> str | None:
    """:func:`component_of` of a pod whose (checked) labels are ``labels`` (read once by a
    caller that asks several questions of them)."""
    if not labels.get(INFERENCESERVICE_LABEL):  # not an InferenceService's pod
        return None
    value = labels.get(COMPONENT_LABEL)
    return value if isinstance(value, str) and value in COMPONENTS else None


def is_predictor_pod(pod: Mapping[str, Any]) -> bool:
    """A predictor pod (head or multi-node worker): the one that runs the serving runtime."""
    return component_of(pod) == "predictor"


def is_multinode_worker(pod: Mapping[str, Any]) -> bool:
    """A worker pod of a multi-node predictor.

    KServe builds the worker Deployment with ``app: isvc.<predictor>-worker``
    (``createRawWorkerDeployment`` with ``constants.GetRawWorkerServiceLabel``) and names its
    container ``worker-container``; either marks a worker.
    """
    if not is_predictor_pod(pod):
        return False
    app = str(checked_labels(pod).get(APP_LABEL) or "")
    if app.startswith("isvc.") and app.endswith(WORKER_SUFFIX):
        return True
    containers = as_list(
        as_mapping(pod.get("spec"), "pod spec").get("containers"), "pod spec.containers"
    )
    return any(isinstance(c, Mapping) and c.get("name") == WORKER_CONTAINER for c in containers)
