"""The Kubernetes resource kinds cudasched reads, declared once: API group, version, kind,
plural and scope, and for custom resources which product installs the CRD.

Versions are the ones served by every release cudasched supports: KServe serves
InferenceService at ``v1beta1``, ServingRuntime and ClusterServingRuntime at ``v1alpha1`` and
LLMInferenceService at ``v1alpha1`` (since KServe 0.16; 0.17 added ``v1alpha2`` as the storage
version and still serves ``v1alpha1``); the GPU Operator's NVIDIADriver is ``nvidia.com/v1alpha1``
and cluster-scoped. Events are read through ``events.k8s.io/v1``. :data:`CONTROLLERS` are the
built-in kinds with a pod template, read one at a time (``cudasched explain deploy/NAME``).

A kind here is plain data: no stage below the edges imports a client library. The Kubernetes
access layer turns one into the class its client asks for
(:func:`cudasched.kube.resources.resource_of`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CAPI_MACHINE_DEPLOYMENT",
    "CAPI_MACHINE_POOL",
    "CAPI_MACHINE_SET",
    "CLUSTER_POLICY",
    "CLUSTER_SERVING_RUNTIME",
    "CONTROLLERS",
    "CRON_JOB",
    "CUSTOM_RESOURCE_DEFINITION",
    "DAEMON_SET",
    "DEPLOYMENT",
    "DEVICE_CLASS",
    "DRA_KUEUE_KINDS",
    "ENDPOINT_SLICE",
    "EVENT",
    "GPU_OPERATOR_GROUP",
    "GPU_OPERATOR_KINDS",
    "IMAGE_FACTS",
    "INFERENCE_SERVICE",
    "JOB",
    "KARPENTER_NODE_POOL",
    "KINDS",
    "KSERVE_GROUP",
    "KUEUE_RESOURCE_FLAVOR",
    "LEASE",
    "LLM_INFERENCE_SERVICE",
    "MUTATING_WEBHOOK_CONFIGURATION",
    "NAMESPACE",
    "NODE",
    "NODE_GROUP_KINDS",
    "NVIDIA_DRIVER",
    "PLACEMENT_TABLE",
    "POD",
    "POD_TEMPLATE",
    "POD_TEMPLATE_KINDS",
    "REPLICATION_CONTROLLER",
    "REPLICA_SET",
    "RESOURCE_SLICE",
    "SECRET",
    "SERVICE_ACCOUNT",
    "SERVING_RUNTIME",
    "STATEFUL_SET",
    "Kind",
]


@dataclass(frozen=True, slots=True)
class Kind:
    """One resource kind. ``crd_of`` names the product whose CRD defines it (``None`` for
    kinds every API server serves); such a kind may be absent from a cluster. An ``advisory``
    kind is read only for hints (an autoscaler's node groups): most clusters lack it, so its
    absence goes unsaid, and an identity not allowed to list it reads it as none, with a note,
    rather than failing the whole read."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    crd_of: str | None = None
    advisory: bool = False

    @property
    def api_version(self) -> str:
        """``apiVersion`` as objects carry it: ``v1``, ``serving.kserve.io/v1beta1``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def optional(self) -> bool:
        """Whether a cluster may lack this kind (a CRD that is not installed)."""
        return self.crd_of is not None


NODE = Kind("", "v1", "Node", "nodes", namespaced=False)
POD = Kind("", "v1", "Pod", "pods", namespaced=True)
#: Got by name only, to say that a ``-n`` namespace does not exist.
NAMESPACE = Kind("", "v1", "Namespace", "namespaces", namespaced=False)
#: Read one at a time by name, only with ``imageResolver.pullSecrets`` on (never listed).
SECRET = Kind("", "v1", "Secret", "secrets", namespaced=True)
SERVICE_ACCOUNT = Kind("", "v1", "ServiceAccount", "serviceaccounts", namespaced=True)
EVENT = Kind("events.k8s.io", "v1", "Event", "events", namespaced=True)
#: Leader election of the policy controller (``kube/leases``).
LEASE = Kind("coordination.k8s.io", "v1", "Lease", "leases", namespaced=True)
#: The policy mode's parameters, written by the policy controller (``install/policy``): in each
#: pod namespace, so the API server hands a pod's policy only its own namespace's tables.
PLACEMENT_TABLE = Kind(
    "cudasched.io",
    "v1alpha1",
    "PlacementTable",
    "placementtables",
    namespaced=True,
    crd_of="cudasched's policy mode",
)

KSERVE_GROUP = "serving.kserve.io"
GPU_OPERATOR_GROUP = "nvidia.com"
_KSERVE = KSERVE_GROUP
INFERENCE_SERVICE = Kind(
    _KSERVE, "v1beta1", "InferenceService", "inferenceservices", namespaced=True, crd_of="KServe"
)
SERVING_RUNTIME = Kind(
    _KSERVE, "v1alpha1", "ServingRuntime", "servingruntimes", namespaced=True, crd_of="KServe"
)
CLUSTER_SERVING_RUNTIME = Kind(
    _KSERVE,
    "v1alpha1",
    "ClusterServingRuntime",
    "clusterservingruntimes",
    namespaced=False,
    crd_of="KServe",
)
LLM_INFERENCE_SERVICE = Kind(
    _KSERVE,
    "v1alpha1",
    "LLMInferenceService",
    "llminferenceservices",
    namespaced=True,
    crd_of="KServe",
)
NVIDIA_DRIVER = Kind(
    GPU_OPERATOR_GROUP,
    "v1alpha1",
    "NVIDIADriver",
    "nvidiadrivers",
    namespaced=False,
    crd_of="GPU Operator",
)

# Autoscaler node groups that declare the labels of the nodes they would add: read only for the
# audit's "a group that may be empty can run it" hint (operations.nodegroups).
KARPENTER_NODE_POOL = Kind(
    "karpenter.sh",
    "v1",
    "NodePool",
    "nodepools",
    namespaced=False,
    crd_of="Karpenter",
    advisory=True,
)
_CAPI = "cluster.x-k8s.io"
CAPI_MACHINE_DEPLOYMENT = Kind(
    _CAPI,
    "v1beta1",
    "MachineDeployment",
    "machinedeployments",
    namespaced=True,
    crd_of="Cluster API",
    advisory=True,
)
CAPI_MACHINE_SET = Kind(
    _CAPI,
    "v1beta1",
    "MachineSet",
    "machinesets",
    namespaced=True,
    crd_of="Cluster API",
    advisory=True,
)
CAPI_MACHINE_POOL = Kind(
    _CAPI,
    "v1beta1",
    "MachinePool",
    "machinepools",
    namespaced=True,
    crd_of="Cluster API",
    advisory=True,
)
NODE_GROUP_KINDS: tuple[Kind, ...] = (
    KARPENTER_NODE_POOL,
    CAPI_MACHINE_DEPLOYMENT,
    CAPI_MACHINE_SET,
    CAPI_MACHINE_POOL,
)

# What the audit's DRA and Kueue checks read (operations.audit.drarules, .kueuerules): advisory,
# so a cluster without them (DRA is served from 1.34, Kueue is an add-on) reads as none, unsaid.
DEVICE_CLASS = Kind(
    "resource.k8s.io",
    "v1",
    "DeviceClass",
    "deviceclasses",
    namespaced=False,
    crd_of="Kubernetes 1.34+ (resource.k8s.io/v1)",
    advisory=True,
)
RESOURCE_SLICE = Kind(
    "resource.k8s.io",
    "v1",
    "ResourceSlice",
    "resourceslices",
    namespaced=False,
    crd_of="Kubernetes 1.34+ (resource.k8s.io/v1)",
    advisory=True,
)
#: What the webhook narrows (``dra.mode``): the claims kube-controller-manager makes for pods.
RESOURCE_CLAIM = Kind(
    "resource.k8s.io",
    "v1",
    "ResourceClaim",
    "resourceclaims",
    namespaced=True,
    crd_of="Kubernetes 1.34+ (resource.k8s.io/v1)",
    advisory=True,
)
#: v1beta1: served by every Kueue release that has ResourceFlavors in beta (v1beta2 beside it).
KUEUE_RESOURCE_FLAVOR = Kind(
    "kueue.x-k8s.io",
    "v1beta1",
    "ResourceFlavor",
    "resourceflavors",
    namespaced=False,
    crd_of="Kueue",
    advisory=True,
)
DRA_KUEUE_KINDS: tuple[Kind, ...] = (DEVICE_CLASS, RESOURCE_SLICE, KUEUE_RESOURCE_FLAVOR)

#: Every kind above, built-in kinds first.
KINDS: tuple[Kind, ...] = (
    NODE,
    POD,
    EVENT,
    INFERENCE_SERVICE,
    SERVING_RUNTIME,
    CLUSTER_SERVING_RUNTIME,
    LLM_INFERENCE_SERVICE,
    NVIDIA_DRIVER,
    *NODE_GROUP_KINDS,
    *DRA_KUEUE_KINDS,
)

DEPLOYMENT = Kind("apps", "v1", "Deployment", "deployments", namespaced=True)
STATEFUL_SET = Kind("apps", "v1", "StatefulSet", "statefulsets", namespaced=True)
DAEMON_SET = Kind("apps", "v1", "DaemonSet", "daemonsets", namespaced=True)
REPLICA_SET = Kind("apps", "v1", "ReplicaSet", "replicasets", namespaced=True)
JOB = Kind("batch", "v1", "Job", "jobs", namespaced=True)
CRON_JOB = Kind("batch", "v1", "CronJob", "cronjobs", namespaced=True)

REPLICATION_CONTROLLER = Kind(
    "", "v1", "ReplicationController", "replicationcontrollers", namespaced=True
)
POD_TEMPLATE = Kind("", "v1", "PodTemplate", "podtemplates", namespaced=True)

#: What tells the GPU Operator release a cluster runs (``plan-drivers --live``): its
#: ClusterPolicy (``nvidia.com/v1``, cluster-scoped, labelled by the Helm chart) and the
#: NVIDIADriver CustomResourceDefinition, fetched by name.
CLUSTER_POLICY = Kind(
    GPU_OPERATOR_GROUP,
    "v1",
    "ClusterPolicy",
    "clusterpolicies",
    namespaced=False,
    crd_of="GPU Operator",
)
CUSTOM_RESOURCE_DEFINITION = Kind(
    "apiextensions.k8s.io",
    "v1",
    "CustomResourceDefinition",
    "customresourcedefinitions",
    namespaced=False,
)
GPU_OPERATOR_KINDS: tuple[Kind, ...] = (CLUSTER_POLICY, CUSTOM_RESOURCE_DEFINITION)

#: Controllers whose pod template cudasched reads, fetched by name (never listed).
CONTROLLERS: tuple[Kind, ...] = (DEPLOYMENT, STATEFUL_SET, DAEMON_SET, REPLICA_SET, JOB, CRON_JOB)

#: Every kind that carries a pod template: what a workload check (``audit``, ``explain -f``)
#: reads the pods of. ``spec.template`` for all but a CronJob (``spec.jobTemplate.spec.template``)
#: and a PodTemplate (``template``).
POD_TEMPLATE_KINDS: tuple[Kind, ...] = (*CONTROLLERS, REPLICATION_CONTROLLER, POD_TEMPLATE)

#: Where an audit looks for the likeliest cause of misplaced pods: cudasched's webhook
#: registration, and the endpoints of the Service it names (listed by that Service's label).
MUTATING_WEBHOOK_CONFIGURATION = Kind(
    "admissionregistration.k8s.io",
    "v1",
    "MutatingWebhookConfiguration",
    "mutatingwebhookconfigurations",
    namespaced=False,
)
ENDPOINT_SLICE = Kind("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", namespaced=True)
#: What cudasched found an image to need, one object per image digest (its own CRD, installed
#: by ``cudasched manifests``): written by the webhook's image resolver, read by it and by the
#: commands with ``--live`` (:mod:`cudasched.knowledge.imagefacts`).
IMAGE_FACTS = Kind(
    "cudasched.io", "v1alpha1", "ImageFacts", "imagefacts", namespaced=False, crd_of="cudasched"
)

#: The Policy WG's reports, which the webhook's background audit writes (never read).
POLICY_REPORT = Kind("wgpolicyk8s.io", "v1alpha2", "PolicyReport", "policyreports", namespaced=True)
CLUSTER_POLICY_REPORT = Kind(
    "wgpolicyk8s.io", "v1alpha2", "ClusterPolicyReport", "clusterpolicyreports", namespaced=False
)
