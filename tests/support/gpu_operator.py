"""Test helper: the objects that tell the GPU Operator release a cluster runs, shaped as NVIDIA's
releases install them.

* :func:`nvidiadriver_crd`: the ``nvidiadrivers.nvidia.com`` CustomResourceDefinition with the
  spec properties of one release's schema (NVIDIA/gpu-operator
  ``deployments/gpu-operator/crds/nvidia.com_nvidiadrivers.yaml`` at the tag; the property
  schemas themselves are reduced to their type, the names are the release's own);
* :func:`cluster_policy`: the ClusterPolicy ``cluster-policy`` with the labels the Helm chart
  renders (``templates/clusterpolicy.yaml`` and ``_helpers.tpl`` "gpu-operator.labels", with the
  chart packaged by ``helm package --version <tag> --app-version <tag>``,
  ``.github/workflows/release-rc-assets.yaml``), or with none (an OLM install).
"""

from __future__ import annotations

from typing import Any

__all__ = ["CRD_SPEC_PROPERTIES", "cluster_policy", "nvidiadriver_crd"]

_V24_9 = [
    "annotations",
    "args",
    "certConfig",
    "driverType",
    "env",
    "gdrcopy",
    "gds",
    "image",
    "imagePullPolicy",
    "imagePullSecrets",
    "kernelModuleConfig",
    "labels",
    "licensingConfig",
    "livenessProbe",
    "manager",
    "nodeAffinity",
    "nodeSelector",
    "priorityClassName",
    "rdma",
    "readinessProbe",
    "repoConfig",
    "repository",
    "resources",
    "startupProbe",
    "tolerations",
    "useOpenKernelModules",
    "usePrecompiled",
    "version",
    "virtualTopologyConfig",
]
_V25_3 = [*_V24_9, "kernelModuleType"]
_V25_10 = [*_V25_3, "secretEnv"]
_V26_3 = [*_V25_10, "hostNetwork", "podSecurityContext"]
_V26_7 = [*_V26_3, "default", "upgradePolicy"]

#: The spec properties of the NVIDIADriver CRD at each release tag (read from the tag's CRD).
CRD_SPEC_PROPERTIES: dict[str, list[str]] = {
    "v24.9.2": _V24_9,
    "v25.3.4": _V25_3,
    "v25.10.1": _V25_10,
    "v26.3.0": [p for p in _V26_3 if p != "hostNetwork"],  # hostNetwork came with v26.3.3
    "v26.3.3": _V26_3,
    "v26.7.0": _V26_7,
}


def nvidiadriver_crd(release: str) -> dict[str, Any]:
    """The NVIDIADriver CRD as release ``release`` (a key of :data:`CRD_SPEC_PROPERTIES`)
    installs it."""
    spec = {name: {"type": "object"} for name in sorted(CRD_SPEC_PROPERTIES[release])}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": "nvidiadrivers.nvidia.com",
            "annotations": {"controller-gen.kubebuilder.io/version": "v0.21.0"},
        },
        "spec": {
            "group": "nvidia.com",
            "names": {
                "kind": "NVIDIADriver",
                "listKind": "NVIDIADriverList",
                "plural": "nvidiadrivers",
                "singular": "nvidiadriver",
                "shortNames": ["nvd", "nvdriver", "nvdrivers"],
            },
            "scope": "Cluster",
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": {"type": "object", "properties": spec},
                                "status": {"type": "object"},
                            },
                        }
                    },
                }
            ],
        },
    }


def cluster_policy(
    release: str | None,
    *,
    chart: str | None = None,
    driver: dict[str, Any] | None = None,
    name: str = "cluster-policy",
) -> dict[str, Any]:
    """NVIDIA's ClusterPolicy as the Helm chart of ``release`` (``v26.7.0``) renders it
    (``None``: no Helm labels, as an OLM install); ``chart`` replaces the chart version (a chart
    packaged from the repository says ``v1.0.0-devel`` with appVersion ``main-latest``);
    ``driver``: its ``spec.driver`` (default: enabled, in NVIDIADriver mode)."""
    labels: dict[str, str] = {"app.kubernetes.io/component": "gpu-operator"}
    if release is not None or chart is not None:
        labels.update(
            {
                "app.kubernetes.io/name": "gpu-operator",
                "app.kubernetes.io/instance": "gpu-operator",
                "app.kubernetes.io/managed-by": "Helm",
                "helm.sh/chart": f"gpu-operator-{chart or release}",
                "app.kubernetes.io/version": release or "main-latest",
            }
        )
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "driver": driver
            if driver is not None
            else {"enabled": True, "useNvidiaDriverCRD": True}
        },
        "status": {"state": "ready", "namespace": "gpu-operator"},
    }
