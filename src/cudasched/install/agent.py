"""Kubernetes objects that run the agent on every GPU node (plain dicts, ready to serialise).

Decisions recorded here and in docs/agent.md:

* **Which nodes.** ``nodeSelector`` defaults to ``nvidia.com/gpu.present: "true"``, the label
  the GPU Operator puts on GPU nodes. Clusters without the Operator pass another selector,
  e.g. NFD's ``feature.node.kubernetes.io/pci-10de.present: "true"``.
* **GPU access without taking a GPU.** The pod requests no ``nvidia.com/gpu``; with
  ``NVIDIA_VISIBLE_DEVICES=all`` and ``NVIDIA_DRIVER_CAPABILITIES=utility`` the NVIDIA container
  runtime mounts ``libnvidia-ml`` and ``nvidia-smi`` and the device nodes, as for GFD. Set
  ``runtime_class`` (usually ``nvidia``) where that runtime is not the default.
* **Not root.** NVML only needs the device nodes, which the driver creates world read/write
  (mode 0666) by default, so the container runs as UID 65532 with a read-only root filesystem
  and no capabilities. With ``output="nfd"`` it must write into a root-owned host directory,
  so that variant runs as root (still without privilege escalation or capabilities).
* **Host facts.** The host's ``/etc/os-release`` is mounted read-only at
  ``/host/etc/os-release``; ``/proc/sys/kernel/osrelease`` is the host kernel already.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cudasched.agent.publish import DEFAULT_NFD_PATH
from cudasched.errors import InputError

__all__ = ["AGENT_NAME", "DEFAULT_NODE_SELECTOR", "daemonset_objects"]

AGENT_NAME = "cudasched-agent"
DEFAULT_NODE_SELECTOR: Mapping[str, str] = {"nvidia.com/gpu.present": "true"}
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
                {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
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


def daemonset_objects(
    namespace: str,
    image: str,
    *,
    node_selector: Mapping[str, str] | None = None,
    output: str = "node",
    nfd_path: str = DEFAULT_NFD_PATH,
    runtime_class: str | None = None,
    gfd_compatible: bool = False,
    interval: int = 60,
) -> list[dict[str, Any]]:
    """ServiceAccount, ClusterRole (get/patch nodes, create events), ClusterRoleBinding and
    the DaemonSet, in the order they should be applied."""
    if not isinstance(namespace, str) or not namespace.strip():
        raise InputError(f"invalid namespace {namespace!r}: expected a namespace name")
    if not isinstance(image, str) or not image.strip():
        raise InputError(f"invalid image {image!r}: expected an image reference")
    if output not in ("node", "nfd"):
        raise InputError(f"invalid agent output {output!r}: expected node or nfd")
    if interval <= 0:
        raise InputError(f"invalid interval {interval!r}: expected a positive number of seconds")
    selector = dict(DEFAULT_NODE_SELECTOR if node_selector is None else node_selector)

    args = ["agent", "--output", output, "--interval", str(interval)]
    if output == "nfd":
        args += ["--nfd-path", nfd_path]
    if gfd_compatible:
        args.append("--gfd-compatible")

    mounts: list[dict[str, Any]] = [
        {"name": "host-os-release", "mountPath": "/host/etc/os-release", "readOnly": True}
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "host-os-release", "hostPath": {"path": "/etc/os-release", "type": "File"}}
    ]
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
        "nodeSelector": selector,
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
                "volumeMounts": mounts,
            }
        ],
        "volumes": volumes,
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
    return [*_rbac(namespace), daemonset]
