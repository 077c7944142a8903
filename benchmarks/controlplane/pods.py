"""The pods the control-plane benchmark creates: a predictor-like pod (Triton 24.05, CPU and
memory requests, KServe labels: the webhook resolves CUDA 12.4 and patches node affinity), a
plain ``nvidia.com/gpu`` pod, the names of the pod shapes the scheduler is timed on, and the
namespace they live in, emptied between series."""

from __future__ import annotations

from typing import Any

from tests.harness.kube import Api
from tests.harness.workloads import gpu_pod

__all__ = [
    "AUTO",
    "BARE",
    "IMAGE",
    "JSON",
    "NS",
    "OURS",
    "PLAIN",
    "SAME",
    "delete_all",
    "plain",
    "predictor",
]

IMAGE = "nvcr.io/nvidia/tritonserver:24.05-py3"
NS = "bench"

JSON = dict[str, Any]

#: Shape names, in the order measured.
PLAIN = "plain nvidia.com/gpu pod"
BARE = "predictor pod, no affinity"
AUTO = "predictor + injected affinity (auto: GFD keys)"
OURS = "predictor + injected affinity (cudasched keys)"
SAME = "predictor + one In on the same nodes"


def predictor(name: str, *, gpus: int = 1) -> JSON:
    pod = gpu_pod(
        name,
        NS,
        IMAGE,
        gpus=gpus,
        labels={
            "serving.kserve.io/inferenceservice": "bench",
            "component": "predictor",
            "app": "isvc.bench-predictor",
        },
        annotations={"serving.kserve.io/deploymentMode": "RawDeployment"},
        container="kserve-container",
    )
    pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1", "memory": "4Gi"}
    return pod


def plain(name: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "containers": [
                {"name": "c", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def delete_all(api: Api) -> None:
    api.call("DELETE", f"/api/v1/namespaces/{NS}/pods", params={"gracePeriodSeconds": "0"})
    api.wait_for(
        "the benchmark's pods to be gone",
        lambda: (
            not api.call("GET", f"/api/v1/namespaces/{NS}/pods", params={"limit": "1"})["items"]
        ),
        timeout=300,
        interval=0.5,
    )
