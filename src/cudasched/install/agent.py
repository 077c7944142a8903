"""Kubernetes objects that run the agent on every GPU node (plain dicts, ready to serialise).

Decisions recorded here and in docs/agent.md:

* **Which nodes.** Every GPU node, however it is labelled: node affinity ORs NFD's
  ``feature.node.kubernetes.io/pci-10de.present`` (any node with an NVIDIA PCI device, NFD runs
  in most GPU clusters) and the GPU Operator's ``nvidia.com/gpu.present``; in a sample of real
  clusters 4 of 14 GPU nodes lacked the Operator's label. Clusters with neither pass
  ``nodes="all"``: the agent then runs everywhere and idles on nodes without an NVIDIA GPU.
* **GPU access without taking a GPU.** The pod requests no ``nvidia.com/gpu``; with
  ``NVIDIA_VISIBLE_DEVICES=all`` and ``NVIDIA_DRIVER_CAPABILITIES=utility`` the NVIDIA container
  runtime mounts ``libnvidia-ml`` and ``nvidia-smi`` and the device nodes, as for GFD. Set
  ``runtime_class`` (usually ``nvidia``) where that runtime is not the default.
* **Not root.** NVML only needs the device nodes, which the driver creates world read/write
  (mode 0666) by default, so the container runs as UID 65532 with a read-only root filesystem
  and no capabilities. With ``output="nfd"`` it must write into a root-owned host directory,
  so that variant runs as root (still without privilege escalation or capabilities).
* **Host facts without host mounts.** The OS comes from the Node object the agent reads anyway
  (``status.nodeInfo.osImage``, or NFD's ``system-os_release`` labels) and the kernel from
  ``/proc/sys/kernel/osrelease``, which is the host's kernel already; no hostPath is mounted, so
  the default DaemonSet passes Pod Security "baseline". The NFD variant must write a host
  directory and is the exception (its namespace needs the "privileged" level).
* **Only its own node.** RBAC cannot say "your own node", so a ValidatingAdmissionPolicy does
  what kubelet's NodeRestriction does for kubelets: a patch by the agent's service account is
  admitted only for the node named in its token (``authentication.kubernetes.io/node-name``,
  Kubernetes 1.30+) and only when it changes nothing but the labels the agent owns. A stolen
  agent token can then relabel one node, not steer every GPU pod of the fleet.
* **RBAC**: get and patch on nodes, create on ``events.k8s.io`` Events; nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cudasched.nodes.labelers import DEFAULT_NFD_PATH, owned_keys
from cudasched.vocab.errors import InputError
from cudasched.vocab.labelsyntax import dns_label_ok

__all__ = [
    "AGENT_NAME",
    "AGENT_NODES",
    "GPU_NODE_LABELS",
    "daemonset_objects",
    "node_restriction_objects",
]

#: The node a service-account token was issued for (a pod's token carries it since 1.30).
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"

AGENT_NAME = "cudasched-agent"
#: Labels that mark an NVIDIA GPU node: NFD's PCI vendor label (vendor 10de is NVIDIA) and the
#: GPU Operator's; a node with either gets the agent.
GPU_NODE_LABELS = ("feature.node.kubernetes.io/pci-10de.present", "nvidia.com/gpu.present")
AGENT_NODES = ("gpu", "all")
_LABELS = {"app.kubernetes.io/name": AGENT_NAME, "app.kubernetes.io/part-of": "cudasched"}


def _rbac(namespace: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": AGENT_NAME, "namespace": namespace, "labels": dict(_LABELS)},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": AGENT_NAME, "labels": dict(_LABELS)},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
                {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": AGENT_NAME, "labels": dict(_LABELS)},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": AGENT_NAME,
            },
            "subjects": [{"kind": "ServiceAccount", "name": AGENT_NAME, "namespace": namespace}],
        },
    ]


def _cel_list(values: list[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def node_restriction_objects(namespace: str, *, gfd_compatible: bool) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy (and its binding) that limits the agent to its own node
    and to the labels it owns (``gfd_compatible`` adds GFD's keys, as the agent does)."""
    user = f"system:serviceaccount:{namespace}:{AGENT_NAME}"
    name = f"{AGENT_NAME}-{namespace}-own-node"
    owned = _cel_list(sorted(owned_keys(gfd_compatible)))
    extra = f"request.userInfo.extra['{NODE_NAME_EXTRA}']"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(_LABELS)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE"],
                        "resources": ["nodes"],
                    }
                ]
            },
            "matchConditions": [
                {"name": "is-the-agent", "expression": f"request.userInfo.username == '{user}'"}
            ],
            "variables": [
                {"name": "owned", "expression": owned},
                {
                    "name": "newLabels",
                    "expression": "has(object.metadata.labels) ? object.metadata.labels : {}",
                },
                {
                    "name": "oldLabels",
                    "expression": (
                        "has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}"
                    ),
                },
            ],
            "validations": [
                {
                    "expression": (
                        f"has(request.userInfo.extra) && '{NODE_NAME_EXTRA}' in "
                        f"request.userInfo.extra && {extra}.exists(n, n == object.metadata.name)"
                    ),
                    "message": "the cudasched agent may only change the node it runs on",
                    "reason": "Forbidden",
                },
                {
                    "expression": (
                        "variables.newLabels.all(k, k in variables.owned || "
                        "(k in variables.oldLabels && "
                        "variables.oldLabels[k] == variables.newLabels[k])) && "
                        "variables.oldLabels.all(k, k in variables.owned || "
                        "k in variables.newLabels)"
                    ),
                    "message": "the cudasched agent may only change the labels it owns",
                    "reason": "Forbidden",
                },
                {
                    "expression": (
                        # no `has(x) ? x : {}` on spec: a NodeSpec and a map do not type-check
                        "has(object.spec) == has(oldObject.spec) && "
                        "(!has(object.spec) || object.spec == oldObject.spec) && "
                        "(has(object.metadata.annotations) ? object.metadata.annotations : {}) "
                        "== (has(oldObject.metadata.annotations) ? "
                        "oldObject.metadata.annotations : {})"
                    ),
                    "message": "the cudasched agent may only change node labels",
                    "reason": "Forbidden",
                },
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": dict(_LABELS)},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]


def daemonset_objects(
    namespace: str,
    image: str,
    *,
    node_selector: Mapping[str, str] | None = None,
    nodes: str = "gpu",
    output: str = "node",
    nfd_path: str = DEFAULT_NFD_PATH,
    runtime_class: str | None = None,
    gfd_compatible: bool = False,
    interval: int = 60,
) -> list[dict[str, Any]]:
    """ServiceAccount, ClusterRole (get/patch nodes, create events), ClusterRoleBinding, the
    node-restriction policy and its binding, and the DaemonSet, in the order they should be
    applied."""
    if not isinstance(namespace, str) or not namespace.strip():
        raise InputError(f"invalid namespace {namespace!r}: expected a namespace name")
    if not isinstance(image, str) or not image.strip():
        raise InputError(f"invalid image {image!r}: expected an image reference")
    if output not in ("node", "nfd"):
        raise InputError(f"invalid agent output {output!r}: expected node or nfd")
    if interval <= 0:
        raise InputError(f"invalid interval {interval!r}: expected a positive number of seconds")
    if nodes not in AGENT_NODES:
        raise InputError(f"invalid agent nodes {nodes!r}: expected one of {', '.join(AGENT_NODES)}")
    if runtime_class is not None and not dns_label_ok(runtime_class):
        raise InputError(
            f"invalid runtime class {runtime_class!r}: expected a RuntimeClass name (lower-case "
            "letters, digits and '-')"
        )

    args = ["agent", "--output", output, "--interval", str(interval)]
    if output == "nfd":
        args += ["--nfd-path", nfd_path]
    if gfd_compatible:
        args.append("--gfd-compatible")

    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    if output == "nfd":
        features_dir = nfd_path.rsplit("/", 1)[0] or "/"
        mounts.append({"name": "nfd-features", "mountPath": features_dir})
        volumes.append(
            {
                "name": "nfd-features",
                "hostPath": {"path": features_dir, "type": "DirectoryOrCreate"},
            }
        )
    run_as_root = output == "nfd"
    security: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": not run_as_root,
        "runAsUser": 0 if run_as_root else 65532,
        "runAsGroup": 0 if run_as_root else 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": AGENT_NAME,
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists"},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
        ],
        "terminationGracePeriodSeconds": 10,
        "containers": [
            {
                "name": "agent",
                "image": image,
                "args": args,
                "env": [
                    {
                        "name": "NODE_NAME",
                        "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                    },
                    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                    {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
                ],
                "resources": {
                    "requests": {"cpu": "10m", "memory": "48Mi"},
                    "limits": {"memory": "160Mi"},
                },
                "securityContext": security,
                **({"volumeMounts": mounts} if mounts else {}),
            }
        ],
        **({"volumes": volumes} if volumes else {}),
    }
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    elif nodes == "gpu":
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": k, "operator": "In", "values": ["true"]}]}
                        for k in GPU_NODE_LABELS
                    ]
                }
            }
        }
    if runtime_class:
        pod_spec["runtimeClassName"] = runtime_class
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": AGENT_NAME, "namespace": namespace, "labels": dict(_LABELS)},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": AGENT_NAME}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
            "template": {"metadata": {"labels": dict(_LABELS)}, "spec": pod_spec},
        },
    }
    return [
        *_rbac(namespace),
        *node_restriction_objects(namespace, gfd_compatible=gfd_compatible),
        daemonset,
    ]
