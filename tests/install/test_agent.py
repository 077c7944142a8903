"""Agent DaemonSet and RBAC: accepted by the Kubernetes schema and shaped as documented."""

from __future__ import annotations

from typing import Any

import celpy
import pytest

from cudasched.install.agent import AGENT_NAME, daemonset_objects
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from tests.support import builders
from tests.support.k8s_schema import assert_valid


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
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
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
    # Every GPU node however it is labelled: NFD's NVIDIA PCI label OR the GPU Operator's.
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {
            "matchExpressions": [
                {
                    "key": "feature.node.kubernetes.io/pci-10de.present",
                    "operator": "In",
                    "values": ["true"],
                }
            ]
        },
        {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}
            ]
        },
    ]
    assert "nodeSelector" not in spec and "runtimeClassName" not in spec
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
    assert "volumeMounts" not in container and "volumes" not in spec
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


# --------------------------------------------------------------------------- hardening (issue 13)

AGENT_USER = "system:serviceaccount:gpu-system:cudasched-agent"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"

# Pod Security Standards "baseline" (https://kubernetes.io/docs/concepts/security/
# pod-security-standards/): the checks that can apply to a DaemonSet's pod template.
_BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}


def baseline_violations(pod_spec: dict[str, Any]) -> list[str]:
    out = [f"host namespace {k}" for k in ("hostNetwork", "hostPID", "hostIPC") if pod_spec.get(k)]
    out += [f"hostPath volume {v['name']}" for v in pod_spec.get("volumes", []) if "hostPath" in v]
    containers = pod_spec.get("containers", []) + pod_spec.get("initContainers", [])
    for c in containers:
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            out.append(f"{c['name']}: privileged")
        added = set(sc.get("capabilities", {}).get("add", [])) - _BASELINE_CAPABILITIES
        out += [f"{c['name']}: capability {cap}" for cap in sorted(added)]
        out += [f"{c['name']}: hostPort" for p in c.get("ports", []) if p.get("hostPort")]
        if sc.get("procMount", "Default") != "Default":
            out.append(f"{c['name']}: procMount")
        if sc.get("seccompProfile", {}).get("type") == "Unconfined":
            out.append(f"{c['name']}: seccomp Unconfined")
    return out


def test_default_daemonset_passes_pod_security_baseline() -> None:
    """No hostPath: the OS is read from the Node object, not from the host's /etc/os-release
    (whose content was never published anyway)."""
    ds = by_kind(daemonset_objects("gpu-system", "img:1"))["DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert baseline_violations(spec) == []
    # The NFD variant writes a host directory by design: it is the one exception (documented).
    nfd = by_kind(daemonset_objects("gpu-system", "img:1", output="nfd"))["DaemonSet"]
    assert baseline_violations(nfd["spec"]["template"]["spec"]) == ["hostPath volume nfd-features"]


def test_agent_rbac_has_no_unused_verbs() -> None:
    rules = by_kind(daemonset_objects("gpu-system", "img"))["ClusterRole"]["rules"]
    granted = {
        (g, r): set(rule["verbs"])
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert granted == {("", "nodes"): {"get", "patch"}, ("events.k8s.io", "events"): {"create"}}


def _policy(gfd_compatible: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    objs = daemonset_objects("gpu-system", "img", gfd_compatible=gfd_compatible)
    policies = [o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"]
    bindings = [o for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert len(policies) == 1 and len(bindings) == 1
    return policies[0], bindings[0]


def test_node_restriction_policy_is_valid_and_bound() -> None:
    policy, binding = _policy()
    assert_valid(policy)
    assert_valid(binding)
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["nodes"] and set(rule["operations"]) == {"UPDATE"}


def _admitted(policy: dict[str, Any], request: dict[str, Any], old: Any, new: Any) -> bool | None:
    """Evaluate the policy the way the API server does: ``None`` when its match conditions
    leave the request alone, else whether every validation holds."""
    env = celpy.Environment()
    activation: dict[str, Any] = {
        "request": celpy.json_to_cel(request),
        "object": celpy.json_to_cel(new),
        "oldObject": celpy.json_to_cel(old),
    }

    def run(expression: str) -> Any:
        return env.program(env.compile(expression)).evaluate(activation)

    if not all(bool(run(c["expression"])) for c in policy["spec"].get("matchConditions", [])):
        return None
    variables = {v["name"]: run(v["expression"]) for v in policy["spec"].get("variables", [])}
    activation["variables"] = celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()}
    )
    return all(bool(run(v["expression"])) for v in policy["spec"]["validations"])


def _request(user: str = AGENT_USER, node: str | None = "gpu-1") -> dict[str, Any]:
    """The request of a Node UPDATE by ``user``, whose token names ``node`` (``None``: a
    token without the node-name extra)."""
    info: dict[str, Any] = {"username": user, "groups": ["system:serviceaccounts"]}
    if node is not None:
        info["extra"] = {NODE_NAME_EXTRA: [node], "authentication.kubernetes.io/pod-name": ["a"]}
    return builders.review(builders.node("gpu-1"), operation="UPDATE", user=info)["request"]


def _gpu_1(**edits: Any) -> dict[str, Any]:
    """Node gpu-1 labelled by GFD and the agent (an A100 on R535), with ``edits`` to its labels
    (``None`` removes one) or its ``taints``."""
    taints = edits.pop("taints", None)
    return builders.node("gpu-1", labels=edits, taints=taints)


def test_agent_may_change_only_its_own_labels_on_its_own_node() -> None:
    policy, _ = _policy()
    old = _gpu_1()
    agent_keys = [k for k in old["metadata"]["labels"] if k.startswith(L.PREFIX)]
    assert len(agent_keys) == 10
    relabelled = _gpu_1(**{L.CUDA_CODE: "12040", L.DRIVER_CODE: "550090007"})
    removed = _gpu_1(**dict.fromkeys(agent_keys))
    assert _admitted(policy, _request(), old, relabelled) is True
    assert _admitted(policy, _request(), old, removed) is True
    # Another node (the token says the agent runs on gpu-2): refused.
    assert _admitted(policy, _request(node="gpu-2"), old, relabelled) is False
    # A token without the node-name extra (clusters before ServiceAccountTokenPodNodeInfo).
    assert _admitted(policy, _request(node=None), old, relabelled) is False
    # Labels the agent does not own, added, changed or removed: refused.
    steer = _gpu_1(**{L.GFD_PRODUCT: "NVIDIA-H100"})
    assert _admitted(policy, _request(), old, steer) is False
    extra = _gpu_1(team="x")
    assert _admitted(policy, _request(), old, extra) is False
    gone = _gpu_1(**{k: None for k in old["metadata"]["labels"] if k not in agent_keys})
    assert set(gone["metadata"]["labels"]) == set(agent_keys)
    assert _admitted(policy, _request(), old, gone) is False
    # Anything but labels (taints here): refused.
    tainted = _gpu_1(taints=[{"key": "x", "effect": "NoSchedule"}])
    assert _admitted(policy, _request(), old, tainted) is False
    # Other users are not this policy's business.
    assert _admitted(policy, _request(user="system:node:gpu-1"), old, steer) is None
    assert (
        _admitted(policy, _request(user="system:serviceaccount:other:cudasched-agent"), old, steer)
        is None
    )


def test_gfd_compatible_agent_may_change_gfd_keys_too() -> None:
    # GFD's deprecated keys only, then the new generation added (as the agent writes them).
    old = builders.node("gpu-1", scheme=(builders.OURS, builders.GFD_DEPRECATED))
    new = builders.node("gpu-1")
    assert set(new["metadata"]["labels"]) - set(old["metadata"]["labels"]) == set(
        L.GFD_VERSION_KEYS
    )
    assert _admitted(_policy()[0], _request(), old, new) is False
    assert _admitted(_policy(gfd_compatible=True)[0], _request(), old, new) is True


def test_agent_placement_options() -> None:
    everywhere = by_kind(daemonset_objects("ns", "img:1", nodes="all", runtime_class="nvidia"))
    spec = everywhere["DaemonSet"]["spec"]["template"]["spec"]
    assert "affinity" not in spec and "nodeSelector" not in spec
    assert spec["runtimeClassName"] == "nvidia"
    chosen = by_kind(daemonset_objects("ns", "img:1", node_selector={"gpu": "yes"}))
    assert chosen["DaemonSet"]["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "yes"}
    with pytest.raises(InputError, match="invalid agent nodes 'some'"):
        daemonset_objects("ns", "img:1", nodes="some")
    with pytest.raises(InputError, match="invalid runtime class 'Nvidia Runtime'"):
        daemonset_objects("ns", "img:1", runtime_class="Nvidia Runtime")
