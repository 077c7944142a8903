"""CUDA-aware DRA device classes on the real Kubernetes 1.37 control plane: the classes
``cudasched device-classes`` prints are created with strict field validation (the API server
compiles their CEL), NVIDIA DRA driver ResourceSlices are published for the fake nodes from
their real GPU and driver facts (one full GPU and one passthrough GPU each, with the attributes
the driver publishes), and kube-scheduler's own allocator hands pods asking a class, through a
claim or through the class's extended resource (KEP-5004, GA in 1.37), only devices on nodes
``cudasched explain`` says can run the workload, and that its device view names as admitted.
With the webhook in ``dra.mode: extended-resource``, a pod asking ``nvidia.com/gpu: 1`` is
rewritten to its class's extended resource, created with strict field validation, and
allocated only such devices too; in ``claim`` mode each gets a claim from the class's
template; and in the policy mode (no webhook registered) the API server's
MutatingAdmissionPolicy does the same rewrites from the controller's table (in ``claim`` mode
the template picked by each pod's count, the claim named past the pod's own).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cudasched.knowledge import KnowledgeBase
from cudasched.nodes.facts import facts_from_labels
from cudasched.workloads.policykey import pod_key
from tests.harness.controlplane.plane import ControlPlane
from tests.harness.fleet import FLEET_LABEL, cudasched_command
from tests.harness.kube import Api, ApiError
from tests.harness.policy import controller_process, install_policy, wait_for_keys
from tests.harness.webhook import LiveWebhook, registered, webhook_process

NS = "e2e-deviceclasses"
NS_REWRITE = "e2e-dra-rewrite"
REWRITTEN = 3  # pods asking nvidia.com/gpu, rewritten by the webhook
CLASS = "gpu-cuda-12-8.cudasched.io"
DRA = "/apis/resource.k8s.io/v1"
CLAIMED = 6  # pods asking through a claim
COUNTED = 3  # pods asking through deviceclass.resource.kubernetes.io/<class>


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


def _slice(name: str, labels: dict[str, str], kb: KnowledgeBase) -> dict[str, Any] | None:
    """The ResourceSlice NVIDIA's DRA driver would publish for a node with these labels: its
    GPU as ``type: gpu`` with the versions as semver (leading zeros dropped), and a
    passthrough GPU (``type: vfio``) without CUDA attributes."""
    facts = facts_from_labels(name, labels, kb)
    if facts.driver is None or facts.cuda is None or facts.compute is None:
        return None
    driver = ".".join(str(int(p)) for p in str(facts.driver).split("."))
    driver += ".0" * (2 - driver.count("."))
    gpu = {
        "name": "gpu-0",
        "attributes": {
            "type": {"string": "gpu"},
            "productName": {"string": (facts.products or ("unknown",))[0]},
            "driverVersion": {"version": driver},
            "cudaDriverVersion": {"version": f"{facts.cuda.major}.{facts.cuda.minor}.0"},
            "cudaComputeCapability": {"version": f"{facts.compute.major}.{facts.compute.minor}.0"},
        },
    }
    vfio = {"name": "gpu-vfio-1", "attributes": {"type": {"string": "vfio"}}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"e2e-{name}"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [gpu, vfio],
        },
    }


@pytest.fixture(scope="module")
def classes(plane: ControlPlane, api: Api) -> Iterator[list[dict[str, Any]]]:
    # The classes the bundled sample's workloads ask (the cluster here runs none of them).
    docs = [d for d in yaml.safe_load_all(_cudasched(plane, "device-classes", "--sample")) if d]
    created = [api.create(d) for d in docs]
    try:
        yield created
    finally:
        for d in docs:
            api.delete(f"{DRA}/deviceclasses/{d['metadata']['name']}")


@pytest.fixture(scope="module")
def slices(api: Api, kb: KnowledgeBase) -> Iterator[dict[str, dict[str, str]]]:
    nodes = {
        n["metadata"]["name"]: n["metadata"].get("labels", {})
        for n in api.list("/api/v1/nodes", labelSelector=FLEET_LABEL)
    }
    published = [s for s in (_slice(n, labels, kb) for n, labels in nodes.items()) if s]
    for obj in published:
        api.create(obj)
    try:
        yield {s["spec"]["nodeName"]: nodes[s["spec"]["nodeName"]] for s in published}
    finally:
        for obj in published:
            api.delete(f"{DRA}/resourceslices/{obj['metadata']['name']}")


def test_the_classes_are_created_strictly_and_their_cel_compiled(
    classes: list[dict[str, Any]], api: Api
) -> None:
    assert CLASS in {c["metadata"]["name"] for c in classes}
    assert all(
        c["spec"]["selectors"][0]["cel"]["expression"].startswith("device.driver") for c in classes
    )
    broken = json.loads(json.dumps(classes[0]))
    broken["metadata"] = {"name": "e2e-broken.cudasched.io"}
    broken["spec"]["selectors"][1]["cel"]["expression"] = (
        'device.attributes["gpu.nvidia.com"].cudaDriverVersion.compareTo(semvr("12.8.0")) >= 0'
    )
    with pytest.raises(ApiError) as refused:
        api.create(broken)
    assert refused.value.status_code == 422 and "semvr" in refused.value.message


@pytest.fixture(scope="module", params=["extended-resource", "claim"])
def dra_webhook(
    request: pytest.FixtureRequest,
    plane: ControlPlane,
    api: Api,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, LiveWebhook]]:
    """cudasched's webhook asking GPUs through the CUDA-aware classes in each ``dra.mode``,
    its cache synced."""
    mode = str(request.param)
    workdir = tmp_path_factory.mktemp(f"webhook-dra-{mode}")
    with webhook_process(workdir, plane.kubeconfig, config={"dra": {"mode": mode}}) as hook:
        fleet = sum(1 for _ in api.list("/api/v1/nodes", labelSelector=FLEET_LABEL))
        hook.wait_cached("nodes", fleet, timeout=60)
        yield mode, hook


def _pod(name: str, *, claim: str | None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    spec: dict[str, Any] = {"containers": [container]}
    if claim is not None:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    else:
        resource = {f"deviceclass.resource.kubernetes.io/{CLASS}": "1"}
        container["resources"] = {"requests": resource, "limits": resource}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {"cudasched.io/cuda-version": "12.8"},
        },
        "spec": spec,
    }


def _claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS, "count": 1}}]
            }
        },
    }


def _gpu_pod(name: str, namespace: str) -> dict[str, Any]:
    """A pod as a Deployment would make it: ``nvidia.com/gpu: 1``, no DRA of its own."""
    pod = _pod(name, claim=None)
    pod["metadata"]["namespace"] = namespace
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return pod


def _release(plane: ControlPlane, api: Api, ns: str) -> None:
    """Give the namespace's devices back for the next test: the pods removed at once (no
    kubelet confirms a graceful deletion here, so they would hold their claims for ever), the
    namespace deleted, and its claims gone (resourceclaim-controller deallocates them)."""
    plane.kubectl("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", check=False)
    plane.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    api.wait_for(
        f"the claims of {ns} released",
        lambda: not list(api.list(f"{DRA}/namespaces/{ns}/resourceclaims")),
        timeout=120,
        interval=1.0,
    )


def _explained(plane: ControlPlane, tmp: Path) -> tuple[set[str], set[tuple[str, str]]]:
    """What ``explain --live`` says of the probe pod: the nodes that can run it, and the
    devices (pool, name) of the published ResourceSlices its class admits."""
    workload = tmp / "pod.yaml"
    workload.write_text(yaml.safe_dump(_pod("probe", claim=None)))
    report = json.loads(
        _cudasched(
            plane,
            "explain",
            "--workload",
            str(workload),
            "--kubeconfig",
            str(plane.kubeconfig),
            "-o",
            "json",
        )
    )
    devices = report["devices"]["devices"]
    admitted = {(d["pool"], d["device"]) for d in devices if d["admitted"]}
    return {n["node"] for n in report["nodes"] if n["eligible"]}, admitted


def _allocated(api: Api, claim: dict[str, Any]) -> list[tuple[str, str]]:
    results = claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
    return [(r["pool"], r["device"]) for r in results]


def test_the_scheduler_allocates_only_devices_that_run_the_class(
    classes: list[dict[str, Any]],
    slices: dict[str, dict[str, str]],
    plane: ControlPlane,
    api: Api,
    tmp_path: Path,
) -> None:
    api.ensure_namespace(NS)
    names = [f"claimed-{i}" for i in range(CLAIMED)]
    for name in names:
        api.create(_claim(name))
        api.create(_pod(name, claim=name))
    counted = [f"counted-{i}" for i in range(COUNTED)]
    for name in counted:
        api.create(_pod(name, claim=None))
    every = [*names, *counted]

    def bound() -> bool:
        pods = {p["metadata"]["name"]: p for p in api.list(f"/api/v1/namespaces/{NS}/pods")}
        return all(pods.get(n, {}).get("spec", {}).get("nodeName") for n in every)

    try:
        api.wait_for("every pod bound", bound, timeout=180, interval=1.0)
        pods = {p["metadata"]["name"]: p for p in api.list(f"/api/v1/namespaces/{NS}/pods")}
        claims = {
            c["metadata"]["name"]: c for c in api.list(f"{DRA}/namespaces/{NS}/resourceclaims")
        }
        allocations = {n: _allocated(api, claims[n]) for n in names}
        for n in counted:
            status = pods[n].get("status", {}).get("extendedResourceClaimStatus", {})
            allocations[n] = _allocated(api, claims[status["resourceClaimName"]])
        eligible, admitted = _explained(plane, tmp_path)
        wrong = [
            f"{n}: {pool}/{device} (bound to {pods[n]['spec']['nodeName']})"
            for n, devices in allocations.items()
            for pool, device in devices
            if device != "gpu-0" or pool not in eligible or pool != pods[n]["spec"]["nodeName"]
        ]
        assert wrong == [] and all(len(d) == 1 for d in allocations.values()), allocations
        # explain's device view names every device the allocator handed out as admitted, and
        # admits only the full GPU of the nodes its node view says can run the workload.
        handed = {device for devices in allocations.values() for device in devices}
        assert handed <= admitted, (handed - admitted, admitted)
        assert admitted == {(node, "gpu-0") for node in eligible if node in slices}
        assert eligible and set(slices) - eligible, "the fleet must hold nodes that cannot run it"
    finally:
        _release(plane, api, NS)


def test_audit_live_finds_a_planted_extended_resource_flip(plane: ControlPlane, api: Api) -> None:
    """NVIDIA's chart puts nvidia.com/gpu on gpu.nvidia.com; a class created later with the
    same name takes it. The API server accepts both; ``audit --live`` names the class that
    lost it and the one that serves it."""

    def device_class(name: str) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": "device.driver == 'gpu.nvidia.com' && "
                            "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                        }
                    }
                ],
                "extendedResourceName": "nvidia.com/gpu",
            },
        }

    names = ["gpu.nvidia.com", "e2e-team-gpu"]
    try:
        api.create(device_class(names[0]))
        time.sleep(1.1)  # creationTimestamp has second resolution
        api.create(device_class(names[1]))
        done = subprocess.run(
            [*cudasched_command(), "audit", "--live", "-o", "json"],
            capture_output=True,
            text=True,
            env=plane.env(),
            timeout=600,
            check=False,
        )
        assert done.returncode in (0, 1), done.stderr
        found = [
            f
            for f in json.loads(done.stdout)["findings"]
            if f["code"] == "dra-extended-resource-shared"
        ]
        assert [f["object"] for f in found] == ["DeviceClass/gpu.nvidia.com"]
        assert "DeviceClass e2e-team-gpu (created last) serves it" in found[0]["message"]
    finally:
        for name in names:
            api.delete(f"{DRA}/deviceclasses/{name}")


def _claim_of(pod: dict[str, Any], mode: str) -> str:
    """The ResourceClaim the scheduler or the claim controller made for the pod."""
    status = pod["status"]
    if mode == "claim":
        return str(status["resourceClaimStatuses"][0]["resourceClaimName"])
    return str(status["extendedResourceClaimStatus"]["resourceClaimName"])


def _expected_spec(mode: str) -> tuple[list[Any], dict[str, Any]]:
    """What the webhook makes of ``nvidia.com/gpu: 1``: the pod's claims and the container's
    resources."""
    if mode == "claim":
        claim = {"name": "cudasched-gpu-0", "resourceClaimTemplateName": CLASS}
        # The emptied limits and requests are not stored (empty maps are omitted).
        return [claim], {"claims": [{"name": claim["name"]}]}
    resource = {f"deviceclass.resource.kubernetes.io/{CLASS}": "1"}
    return [], {"limits": resource, "requests": resource}


def _allocated_as_explained(
    api: Api, plane: ControlPlane, ns: str, names: list[str], mode: str, tmp: Path
) -> None:
    """Once the pods are bound: each got one device, the one its node has, and only devices
    ``explain`` admits on nodes it says can run them."""

    def bound() -> bool:
        pods = {p["metadata"]["name"]: p for p in api.list(f"/api/v1/namespaces/{ns}/pods")}
        return all(pods.get(n, {}).get("spec", {}).get("nodeName") for n in names)

    api.wait_for("every rewritten pod bound", bound, timeout=180, interval=1.0)
    pods = {p["metadata"]["name"]: p for p in api.list(f"/api/v1/namespaces/{ns}/pods")}
    claims = {c["metadata"]["name"]: c for c in api.list(f"{DRA}/namespaces/{ns}/resourceclaims")}
    allocations = {n: _allocated(api, claims[_claim_of(pods[n], mode)]) for n in names}
    eligible, admitted = _explained(plane, tmp)
    handed = {device for devices in allocations.values() for device in devices}
    assert all(len(d) == 1 for d in allocations.values()), allocations
    assert handed <= admitted and {pool for pool, _ in handed} <= eligible, (handed, admitted)
    assert all(pods[n]["spec"]["nodeName"] == allocations[n][0][0] for n in names)


def test_the_webhook_asks_nvidia_gpu_through_the_class_and_the_allocator_follows(
    classes: list[dict[str, Any]],
    slices: dict[str, dict[str, str]],
    dra_webhook: tuple[str, LiveWebhook],
    plane: ControlPlane,
    api: Api,
    tmp_path: Path,
) -> None:
    mode, hook = dra_webhook
    ns = f"{NS_REWRITE}-{mode}"
    api.ensure_namespace(ns)
    names = [f"rewritten-{i}" for i in range(REWRITTEN)]
    if mode == "claim":  # the template the rewrite names, as device-classes prints it
        printed = _cudasched(plane, "device-classes", "--cuda", "12.8", "--claim-templates", "1")
        for doc in yaml.safe_load_all(printed):
            if doc and doc["kind"] == "ResourceClaimTemplate":
                api.create({**doc, "metadata": {**doc["metadata"], "namespace": ns}})
    try:
        with registered(api, hook.registration(only_namespaces=[ns])):
            created = [api.create(_gpu_pod(name, ns)) for name in names]  # strict validation
        claims_asked, resources = _expected_spec(mode)
        assert [c["spec"]["containers"][0]["resources"] for c in created] == [
            resources
        ] * REWRITTEN, created[0]["spec"]
        assert [c["spec"].get("resourceClaims", []) for c in created] == [claims_asked] * REWRITTEN
        assert all("affinity" not in c["spec"] for c in created)

        _allocated_as_explained(api, plane, ns, names, mode, tmp_path)
    finally:
        _release(plane, api, ns)


def _replica_set(template: dict[str, Any], name: str) -> dict[str, Any]:
    """A ReplicaSet of no replicas with ``template``'s pod: the controller reads its key."""
    metadata = {k: v for k, v in template["metadata"].items() if k not in ("name", "namespace")}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": template["metadata"]["namespace"]},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {**metadata, "labels": {"app": name}},
                "spec": template["spec"],
            },
        },
    }


def _owning(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` already holding a claim named as the policy would name its first one (a claim
    of its own, made before it: the pod waits for it, it is only created here)."""
    pod["spec"]["resourceClaims"] = [{"name": "cudasched-gpu-0", "resourceClaimName": "held"}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "cudasched-gpu-0"}]
    return pod


def _key(pod: dict[str, Any]) -> str:
    """The pod's policy key as the API server computes it (the ServiceAccount defaulted)."""
    admitted = {**pod, "spec": {**pod["spec"], "serviceAccountName": "default"}}
    return str(pod_key(admitted, pod["metadata"]["namespace"]))


def _claim_mode_extras(api: Api, ns: str) -> None:
    """In ``claim`` mode, pods of the same keys asking two GPUs and already holding a claim
    named ``cudasched-gpu-0``: the template is picked by the pod's own count and the policy's
    claim takes the next free name, appended after the pod's own claims, all created with
    strict field validation (they wait for devices and a claim no node or test provides)."""
    two = _gpu_pod("two", ns)
    two["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
    created = api.create(two)["spec"]
    assert created["resourceClaims"] == [
        {"name": "cudasched-gpu-0", "resourceClaimTemplateName": f"x2.{CLASS}"}
    ]
    assert created["containers"][0]["resources"] == {"claims": [{"name": "cudasched-gpu-0"}]}
    owned = api.create(_owning(_gpu_pod("owned", ns)))["spec"]
    assert owned["resourceClaims"] == [
        {"name": "cudasched-gpu-0", "resourceClaimName": "held"},
        {"name": "cudasched-gpu-1", "resourceClaimTemplateName": CLASS},
    ]
    assert owned["containers"][0]["resources"] == {
        "claims": [{"name": "cudasched-gpu-0"}, {"name": "cudasched-gpu-1"}]
    }
    assert "affinity" not in created and "affinity" not in owned


def _recreated_is_left_alone(api: Api, moved: dict[str, Any]) -> None:
    """A pod the policy moved, created again as stored (``kubectl get -o yaml | kubectl
    create``; the policy sees the same pod when a later webhook makes the API server run it
    again): its key, learnt by the controller from the moved pods that run, has node affinity
    (its key pod asks through no template), yet the policy leaves the pod as it is, as the
    webhook would (it already asks through its class)."""
    spec = {k: v for k, v in moved["spec"].items() if k not in ("nodeName", "priority")}
    metadata = moved["metadata"]
    copy = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "recreated",
            "namespace": metadata["namespace"],
            "annotations": metadata["annotations"],
        },
        "spec": spec,
    }
    key = str(pod_key(copy, metadata["namespace"]))
    held = wait_for_keys(api, {key})
    assert "terms" in held[key], held[key]  # what the policy would wrongly add
    time.sleep(1)  # the API server's informer of the policy's parameters
    created = api.create(copy)["spec"]
    assert "affinity" not in created
    assert created.get("resourceClaims") == spec.get("resourceClaims")
    assert created["containers"][0]["resources"] == spec["containers"][0]["resources"]


@pytest.mark.parametrize("mode", ["extended-resource", "claim"])
def test_the_policy_asks_nvidia_gpu_through_the_class_without_a_webhook(
    classes: list[dict[str, Any]],
    slices: dict[str, dict[str, str]],
    plane: ControlPlane,
    api: Api,
    tmp_path: Path,
    mode: str,
) -> None:
    """The policy mode, installed from ``cudasched manifests --mode policy --dra MODE``: the
    controller decides ReplicaSet templates' keys with the webhook's code in that
    ``dra.mode``, the table keeps the class, and the API server's MutatingAdmissionPolicy (no
    webhook registered) moves each pod's ``nvidia.com/gpu`` to the class's extended resource
    or to a claim from the class's template for the pod's count."""
    ns = f"{NS_REWRITE}-policy-{mode}"
    api.ensure_namespace(ns)
    install_policy(plane, tmp_path / "policy", "--dra", mode)
    if mode == "claim":  # the templates the rewrite names, as device-classes prints them
        printed = _cudasched(plane, "device-classes", "--cuda", "12.8", "--claim-templates", "1,2")
        for doc in yaml.safe_load_all(printed):
            if doc and doc["kind"] == "ResourceClaimTemplate":
                api.create({**doc, "metadata": {**doc["metadata"], "namespace": ns}})
    templates = [_gpu_pod("template", ns), _owning(_gpu_pod("template", ns))]
    keys = {_key(t) for t in templates}
    names = [f"placed-{i}" for i in range(REWRITTEN)]
    field = "claimClass" if mode == "claim" else "deviceClass"
    try:
        with controller_process(
            tmp_path / "controller", plane.kubeconfig, "dra", config={"dra": {"mode": mode}}
        ):
            for i, template in enumerate(templates):
                api.create(_replica_set(template, f"gpu-{i}"))
            held = wait_for_keys(api, keys)
            time.sleep(1)  # the API server's informer of the policy's parameters
            created = [api.create(_gpu_pod(name, ns)) for name in names]  # strict validation
            if mode == "claim":
                _claim_mode_extras(api, ns)
            _recreated_is_left_alone(api, created[0])
        assert all(held[k] == {"requirement": held[k]["requirement"], field: CLASS} for k in keys)
        claims_asked, resources = _expected_spec(mode)
        asked = [c["spec"]["containers"][0]["resources"] for c in created]
        assert asked == [resources] * REWRITTEN, created[0]["spec"]
        assert [c["spec"].get("resourceClaims", []) for c in created] == [claims_asked] * REWRITTEN
        assert all(
            c["metadata"]["annotations"]["cudasched.io/requirement"].startswith("cuda>=12.8")
            for c in created
        )
        assert all("affinity" not in c["spec"] for c in created)
        _allocated_as_explained(api, plane, ns, names, mode, tmp_path)
    finally:
        _release(plane, api, ns)


NS_NARROW = "e2e-dra-narrow"
NVIDIA_CLASS = "gpu.nvidia.com"


@pytest.fixture(scope="module")
def nvidia_class(api: Api) -> Iterator[str]:
    """NVIDIA's own full-GPU class, as its DRA driver's chart creates it (no extended
    resource name here: the flip is another test's)."""
    expression = (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    )
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": NVIDIA_CLASS},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        }
    )
    try:
        yield NVIDIA_CLASS
    finally:
        api.delete(f"{DRA}/deviceclasses/{NVIDIA_CLASS}")


def _template_pod(name: str, ns: str, *, cuda: str | None) -> dict[str, Any]:
    """A pod asking its GPU through DRA itself: a claim from the template ``nvidia-gpu``
    (NVIDIA's class, no selectors); ``cuda=None``: an image whose CUDA nobody knows."""
    pod = _pod(name, claim=None)
    pod["metadata"]["namespace"] = ns
    if cuda is None:
        pod["metadata"]["annotations"] = {}
        pod["spec"]["containers"][0]["image"] = "registry.example.com/mystery/server:1"
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "nvidia-gpu"}]
    return pod


def test_a_pods_claims_from_its_template_are_narrowed_to_its_class(
    classes: list[dict[str, Any]],
    slices: dict[str, dict[str, str]],
    nvidia_class: str,
    dra_webhook: tuple[str, LiveWebhook],
    plane: ControlPlane,
    api: Api,
    tmp_path: Path,
) -> None:
    """A pod naming a ResourceClaimTemplate of NVIDIA's class: the claim
    kube-controller-manager makes for it reaches the webhook, which adds the CUDA-aware class's
    selectors to its request (the count and NVIDIA's class kept), and kube-scheduler
    allocates only devices ``explain`` admits. A pod whose CUDA is unknown gets its claim as
    its template wrote it."""
    mode, hook = dra_webhook
    ns = f"{NS_NARROW}-{mode}"
    api.ensure_namespace(ns)
    request = {"deviceClassName": nvidia_class, "allocationMode": "ExactCount", "count": 1}
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "nvidia-gpu", "namespace": ns},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}},
    }
    api.create(template)
    names = [f"narrowed-{i}" for i in range(REWRITTEN)]
    try:
        with registered(api, hook.registration(only_namespaces=[ns], dra=mode)):
            created = [api.create(_template_pod(n, ns, cuda="12.8")) for n in names]
            api.create(_template_pod("unknown", ns, cuda=None))
            _allocated_as_explained(api, plane, ns, names, "claim", tmp_path)
            pods = {p["metadata"]["name"]: p for p in api.list(f"/api/v1/namespaces/{ns}/pods")}
        claims = {
            c["metadata"]["name"]: c for c in api.list(f"{DRA}/namespaces/{ns}/resourceclaims")
        }
        asked = {n: claims[_claim_of(pods[n], "claim")]["spec"] for n in [*names, "unknown"]}
        (ours,) = [c for c in classes if c["metadata"]["name"] == CLASS]
        narrowed = {**request, "selectors": ours["spec"]["selectors"]}
        expected = {"devices": {"requests": [{"name": "gpu", "exactly": narrowed}]}}
        assert {n: asked[n] for n in names} == dict.fromkeys(names, expected)
        assert asked["unknown"] == template["spec"]["spec"]
        # The pods record what they need and get no node affinity: their claims place them.
        assert all("affinity" not in c["spec"] for c in created)
        assert all(
            c["metadata"]["annotations"]["cudasched.io/requirement"].startswith("cuda>=12.8")
            for c in created
        )
    finally:
        _release(plane, api, ns)
