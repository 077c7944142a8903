"""What cudasched writes for the cluster, created in the real API server with strict field
validation: the GPU Operator NVIDIADriver objects of ``plan-drivers --live`` (against the CRD this
project wrote from the GPU Operator's schema, its CEL rules included) and the DRA
ResourceClaimTemplates of ``affinity --dra`` (``resource.k8s.io/v1``, served by default since
1.34; the API server compiles their CEL device selectors on create).
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.fleet import cudasched_command
from tests.harness.kube import Api, ApiError
from tests.harness.sample import Sample

NS = "e2e-dra"


def _cudasched(plane: ControlPlane, *args: str) -> str:
    done = subprocess.run(
        [*cudasched_command(), *args],
        capture_output=True,
        text=True,
        env=plane.env(),
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_plan_drivers_objects_apply_strictly(
    plane: ControlPlane, api: Api, sample: Sample, tmp_path_factory: pytest.TempPathFactory
) -> None:
    text = _cudasched(plane, "plan-drivers", "--live", "-o", "yaml")
    drivers = [d for d in yaml.safe_load_all(text) if d]
    assert drivers and {d["kind"] for d in drivers} == {"NVIDIADriver"}
    path = tmp_path_factory.mktemp("drivers") / "plan.yaml"
    path.write_text(text)
    try:
        applied = plane.kubectl("apply", "--validate=strict", "-f", str(path))
        assert "Warning" not in applied.stderr, applied.stderr
        for driver in drivers:
            stored = api.get(
                f"/apis/nvidia.com/v1alpha1/nvidiadrivers/{driver['metadata']['name']}"
            )
            assert stored["spec"]["version"] == driver["spec"]["version"]
            assert stored["spec"]["driverType"] == "gpu"
    finally:
        plane.kubectl("delete", "-f", str(path), "--ignore-not-found", check=False)


def test_plan_drivers_reads_the_operator_release_from_the_cluster(
    plane: ControlPlane, api: Api
) -> None:
    """Through the real API server: without a ClusterPolicy the NVIDIADriver CRD's schema
    (spec.default and spec.upgradePolicy: v26.7) tells the release; a ClusterPolicy labelled
    by the v25.10.1 chart wins, and the objects are written for 25.10."""
    import json

    plan = json.loads(_cudasched(plane, "plan-drivers", "--live", "-o", "json"))
    assert plan["gpuOperatorVersion"] == "26.7"
    assert any("read from the nvidiadrivers.nvidia.com CRD's schema" in n for n in plan["notes"])
    policy = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {
            "name": "cluster-policy",
            "labels": {
                "app.kubernetes.io/name": "gpu-operator",
                "app.kubernetes.io/version": "v25.10.1",
                "helm.sh/chart": "gpu-operator-v25.10.1",
            },
        },
        "spec": {"driver": {"useNvidiaDriverCRD": True}},
    }
    api.create(policy)
    try:
        plan = json.loads(_cudasched(plane, "plan-drivers", "--live", "-o", "json"))
        assert plan["gpuOperatorVersion"] == "25.10"
        specs = [d["spec"] for d in plan["nvidiaDrivers"]]
        assert specs and not [s for s in specs if "upgradePolicy" in s or "default" in s]
        assert any(
            "ClusterPolicy cluster-policy label app.kubernetes.io/version=v25.10.1" in n
            for n in plan["notes"]
        )
    finally:
        plane.kubectl("delete", "clusterpolicies.nvidia.com", "cluster-policy", check=False)


def test_nvidiadriver_crd_refuses_what_the_operator_refuses(api: Api) -> None:
    bad = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": "e2e-bad"},
        "spec": {
            "driverType": "gpu",
            "image": "driver",
            "default": True,
            "nodeSelector": {"a": "b"},
        },
    }
    with pytest.raises(ApiError) as refused:
        api.create(bad)
    assert refused.value.status_code == 422
    assert "nodeSelector is not allowed on a default NVIDIADriver" in refused.value.message
    typo = {**bad, "spec": {"driverType": "gpu", "image": "driver", "verison": "580.95.05"}}
    with pytest.raises(ApiError) as unknown:
        api.create(typo)
    assert 'unknown field "spec.verison"' in unknown.value.message


@pytest.mark.parametrize(
    "args",
    [
        ["--cuda", "12.8"],
        ["--cuda", "12.4", "--policy", "minor-compat"],
        ["--cuda", "13.0", "--min-compute-capability", "9.0"],
        ["--cuda", "12.4", "--framework", "torch 2.5.1+cu124"],
    ],
    ids=["12.8", "12.4-minor-compat", "13.0-cc9", "torch-cu124"],
)
def test_dra_claim_templates_are_created(plane: ControlPlane, api: Api, args: list[str]) -> None:
    api.ensure_namespace(NS)
    text = _cudasched(plane, "affinity", *args, "--dra", "-o", "yaml")
    template = yaml.safe_load(text)
    template["metadata"]["namespace"] = NS
    try:
        created = api.create(template)
        assert created["kind"] == "ResourceClaimTemplate"
        selectors = created["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
        assert (
            selectors == template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
        )
    finally:
        api.delete(
            f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaimtemplates/"
            f"{template['metadata']['name']}"
        )


def test_the_runbook_drains_pods_whose_gpus_come_only_from_dra_claims(
    plane: ControlPlane, api: Api, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The runbook's gpu_pods, run by bash with the pinned kubectl against the real API server:
    a pod whose only GPU is a ResourceClaim allocated by NVIDIA's DRA driver is drained with the
    device-plugin pod; a CPU pod and a pod holding another driver's claim are not."""
    api.ensure_namespace(NS)
    node = next(iter(api.list("/api/v1/nodes", limit=1)))["metadata"]["name"]
    claims = f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims"

    def claim(name: str, driver: str, device_class: str) -> None:
        created = api.call("POST", claims, body={
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"devices": {"requests": [
                {"name": "dev", "exactly": {"deviceClassName": device_class}}]}},
        })  # fmt: skip
        created["status"] = {"allocation": {"devices": {"results": [
            {"request": "dev", "driver": driver, "pool": node, "device": "dev-0"}]}}}  # fmt: skip
        api.call("PUT", f"{claims}/{name}/status", body=created)

    def pod(name: str, **spec: object) -> None:
        container: dict[str, object] = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
        if "limits" in spec:
            container["resources"] = {"limits": spec.pop("limits")}
        if "claim" in spec:
            container["resources"] = {"claims": [{"name": "dev"}]}
            spec["resourceClaims"] = [{"name": "dev", "resourceClaimName": spec.pop("claim")}]
        api.create({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"nodeName": node, "containers": [container], **spec},
        })  # fmt: skip

    try:
        claim("e2e-gpu-claim", "gpu.nvidia.com", "gpu.nvidia.com")
        claim("e2e-nic-claim", "rdma.example.com", "rdma.example.com")
        pod("e2e-dra-gpu", claim="e2e-gpu-claim")
        pod("e2e-dra-nic", claim="e2e-nic-claim")
        pod("e2e-plugin-gpu", limits={"nvidia.com/gpu": "1"})
        pod("e2e-cpu", limits={"cpu": "100m"})
        script = _cudasched(plane, "plan-drivers", "--live", "-o", "script")
        helpers = script.split("\n# Preflight", 1)[0].split('\nsay "no pool', 1)[0]
        path = tmp_path_factory.mktemp("runbook") / "helpers.sh"
        path.write_text(helpers + "\n")
        done = subprocess.run(
            ["bash", "-c", f'source "{path}"; gpu_pods "$0"', node],
            capture_output=True, text=True, env=plane.env(), timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        mine = sorted(line for line in done.stdout.split() if line.startswith(f"{NS}/"))
        assert mine == [f"{NS}/e2e-dra-gpu", f"{NS}/e2e-plugin-gpu"]
    finally:
        for name in ("e2e-dra-gpu", "e2e-dra-nic", "e2e-plugin-gpu", "e2e-cpu"):
            api.delete(f"/api/v1/namespaces/{NS}/pods/{name}?gracePeriodSeconds=0")
        for name in ("e2e-gpu-claim", "e2e-nic-claim"):
            api.delete(f"{claims}/{name}")
