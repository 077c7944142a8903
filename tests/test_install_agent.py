"""Agent DaemonSet and RBAC: accepted by the Kubernetes schema and shaped as documented."""

from __future__ import annotations

from typing import Any

import pytest

from cudasched.errors import InputError
from cudasched.install.agent import AGENT_NAME, daemonset_objects
from k8s_schema import assert_valid


def by_kind(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objs}


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"output": "nfd", "runtime_class": "nvidia", "gfd_compatible": True},
        {"node_selector": {"feature.node.kubernetes.io/pci-10de.present": "true"}},
    ],
)
def test_objects_are_valid_kubernetes(kwargs: dict[str, Any]) -> None:
    objs = daemonset_objects("gpu-system", "ghcr.io/example/cudasched:0.1.0", **kwargs)
    assert [o["kind"] for o in objs] == [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
    ]
    for obj in objs:
        assert_valid(obj)


def test_rbac_is_minimal() -> None:
    objs = by_kind(daemonset_objects("gpu-system", "img"))
    rules = objs["ClusterRole"]["rules"]
    assert {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]} in rules
    assert any(r["resources"] == ["events"] and "create" in r["verbs"] for r in rules)
    assert all("list" not in r["verbs"] and "delete" not in r["verbs"] for r in rules)
    subject = objs["ClusterRoleBinding"]["subjects"][0]
    assert subject == {"kind": "ServiceAccount", "name": AGENT_NAME, "namespace": "gpu-system"}


def test_daemonset_shape() -> None:
    ds = by_kind(daemonset_objects("gpu-system", "img:1"))["DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in spec["tolerations"]
    (container,) = spec["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert "nvidia.com/gpu" not in container["resources"].get("limits", {})
    assert container["resources"]["requests"]["cpu"]
    sc = container["securityContext"]
    assert (
        sc["readOnlyRootFilesystem"] and sc["runAsNonRoot"] and not sc["allowPrivilegeEscalation"]
    )
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/host/etc/os-release"]["readOnly"] is True
    assert container["args"][:3] == ["agent", "--output", "node"]
    assert (
        ds["spec"]["selector"]["matchLabels"].items()
        <= ds["spec"]["template"]["metadata"]["labels"].items()
    )


def test_nfd_variant_mounts_features_dir_and_runs_as_root() -> None:
    ds = by_kind(daemonset_objects("ns", "img", output="nfd"))["DaemonSet"]
    container = ds["spec"]["template"]["spec"]["containers"][0]
    assert "--nfd-path" in container["args"]
    paths = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/etc/kubernetes/node-feature-discovery/features.d" in paths
    assert container["securityContext"]["runAsUser"] == 0


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [(("", "img"), {}), (("ns", ""), {}), (("ns", "img"), {"output": "file"})],
)
def test_bad_arguments(args: tuple[str, str], kwargs: dict[str, Any]) -> None:
    with pytest.raises(InputError):
        daemonset_objects(*args, **kwargs)
