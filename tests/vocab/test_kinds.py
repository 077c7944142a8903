"""The declared kinds: API coordinates, as plain data (the client's classes are
``tests/kube/test_resources.py``'s)."""

from __future__ import annotations

from cudasched.vocab import kinds
from cudasched.vocab.kinds import KINDS


def test_coordinates() -> None:
    table = {k.kind: (k.api_version, k.plural, k.namespaced, k.crd_of) for k in KINDS}
    assert table == {
        "Node": ("v1", "nodes", False, None),
        "Pod": ("v1", "pods", True, None),
        "Event": ("events.k8s.io/v1", "events", True, None),
        "InferenceService": ("serving.kserve.io/v1beta1", "inferenceservices", True, "KServe"),
        "ServingRuntime": ("serving.kserve.io/v1alpha1", "servingruntimes", True, "KServe"),
        "ClusterServingRuntime": (
            "serving.kserve.io/v1alpha1",
            "clusterservingruntimes",
            False,
            "KServe",
        ),
        "LLMInferenceService": (
            "serving.kserve.io/v1alpha1",
            "llminferenceservices",
            True,
            "KServe",
        ),
        "NVIDIADriver": ("nvidia.com/v1alpha1", "nvidiadrivers", False, "GPU Operator"),
        "NodePool": ("karpenter.sh/v1", "nodepools", False, "Karpenter"),
        "MachineDeployment": (
            "cluster.x-k8s.io/v1beta1",
            "machinedeployments",
            True,
            "Cluster API",
        ),
        "MachineSet": ("cluster.x-k8s.io/v1beta1", "machinesets", True, "Cluster API"),
        "MachinePool": ("cluster.x-k8s.io/v1beta1", "machinepools", True, "Cluster API"),
        "DeviceClass": (
            "resource.k8s.io/v1",
            "deviceclasses",
            False,
            "Kubernetes 1.34+ (resource.k8s.io/v1)",
        ),
        "ResourceSlice": (
            "resource.k8s.io/v1",
            "resourceslices",
            False,
            "Kubernetes 1.34+ (resource.k8s.io/v1)",
        ),
        "ResourceFlavor": ("kueue.x-k8s.io/v1beta1", "resourceflavors", False, "Kueue"),
    }
    assert [k.optional for k in KINDS] == [k.crd_of is not None for k in KINDS]
    # Only the autoscalers' node groups and the DRA and Kueue objects are advisory: read for
    # the audit's hints and checks, never required.
    advisory = {*kinds.NODE_GROUP_KINDS, *kinds.DRA_KUEUE_KINDS}
    assert {k for k in KINDS if k.advisory} == advisory
    assert kinds.NODE in KINDS and kinds.NVIDIA_DRIVER in KINDS


def test_the_gpu_operator_release_kinds() -> None:
    """ClusterPolicy is nvidia.com/v1 and cluster-scoped (NVIDIA/gpu-operator
    api/nvidia/v1/clusterpolicy_types.go ``+kubebuilder:resource:scope=Cluster``); CRDs are
    apiextensions.k8s.io/v1. Neither is listed by every live read: only plan-drivers reads them."""
    table = {
        k.kind: (k.api_version, k.plural, k.namespaced, k.crd_of) for k in kinds.GPU_OPERATOR_KINDS
    }
    assert table == {
        "ClusterPolicy": ("nvidia.com/v1", "clusterpolicies", False, "GPU Operator"),
        "CustomResourceDefinition": (
            "apiextensions.k8s.io/v1",
            "customresourcedefinitions",
            False,
            None,
        ),
    }
    assert not set(kinds.GPU_OPERATOR_KINDS) & set(KINDS)
