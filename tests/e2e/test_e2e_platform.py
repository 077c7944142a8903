"""What a platform engineer meets on a live cluster (issue 27), on the real API server: the
configured cluster is the default, a colon-separated ``$KUBECONFIG`` is merged, a namespace that
does not exist is said so, a Deployment's replicas on nodes that cannot run them are one finding
and one explain line (the ReplicaSet and its pod-template-hash as the real controller makes
them), a pod says where it is, an LLMInferenceService KServe made no pod for is explained, and
a webhook Service without endpoints is named as the likeliest cause of a misplaced pod.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import yaml

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.fleet import TEMPLATE_LABEL, cudasched_command
from tests.harness.kube import Api
from tests.harness.sample import Sample
from tests.harness.workloads import gpu_pod

NAMESPACE = "e2e-platform"
HOOK_NAMESPACE = "e2e-platform-hook"  # the webhook's Service: not the pods' namespace


def cudasched(
    plane: ControlPlane, *args: str, kubeconfig: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = plane.env()
    env["KUBECONFIG"] = kubeconfig or str(plane.kubeconfig)
    return subprocess.run(
        [*cudasched_command(), *args], capture_output=True, text=True, env=env, timeout=600
    )


def answer(done: subprocess.CompletedProcess[str], code: int = 0) -> str:
    assert done.returncode == code, f"exit {done.returncode}: {done.stderr}"
    return done.stdout


def test_the_configured_cluster_is_the_default(plane: ControlPlane, sample: Sample) -> None:
    """Item 5: no --live, no --sample: the cluster $KUBECONFIG names, as for kubectl."""
    doc = json.loads(answer(cudasched(plane, "explain", "-o", "json")))
    assert doc["cluster"]["sample"] is False
    assert doc["cluster"]["source"].startswith("live cluster https://")


def test_a_context_of_a_later_kubeconfig_file_is_found(plane: ControlPlane, tmp_path: Path) -> None:
    """Item 6: KUBECONFIG=a:b is merged as kubectl merges it; the first file's
    current-context wins, and --context reaches a context of the second."""
    own = yaml.safe_load(plane.kubeconfig.read_text())
    first = tmp_path / "first"
    first.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "nowhere", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "nobody", "user": {"token": "x"}}],
                "contexts": [
                    {"name": "elsewhere", "context": {"cluster": "nowhere", "user": "nobody"}}
                ],
                "current-context": "elsewhere",
            }
        )
    )
    merged = f"{first}:{tmp_path / 'missing'}:{plane.kubeconfig}"
    wrong = cudasched(plane, "snapshot", "--live", kubeconfig=merged)
    assert wrong.returncode == 2 and "context 'elsewhere'" in wrong.stderr
    context = own["current-context"]
    done = cudasched(plane, "snapshot", "--context", context, "-o", "json", kubeconfig=merged)
    assert json.loads(answer(done))["kind"] == "List"


def test_a_namespace_that_does_not_exist_is_said_so(plane: ControlPlane) -> None:
    """Item 9: -n nosuchns read as a clean namespace (no findings, exit 0)."""
    done = cudasched(plane, "audit", "-n", "nosuchns-e2e")
    assert done.returncode == 2 and done.stdout == ""
    assert "namespace 'nosuchns-e2e' does not exist in live cluster" in done.stderr


def _kepler_node(api: Api) -> str:
    nodes = api.list("/api/v1/nodes", labelSelector=f"{TEMPLATE_LABEL}=dc1-k80-01")
    return str(next(iter(nodes))["metadata"]["name"])


def test_a_deployments_misplaced_replicas_are_one_workload(
    plane: ControlPlane, api: Api, sample: Sample
) -> None:
    """Items 7, 9 and 11: three replicas of a CUDA 12.8 Deployment bound to a Kepler node
    (no webhook places pods of this namespace) are one audit finding about the Deployment
    with kubectl rollout restart, one explain -A line, and each pod says where it is."""
    api.ensure_namespace(NAMESPACE)
    kepler = _kepler_node(api)
    template = gpu_pod(
        "x",
        NAMESPACE,
        "nvidia/cuda:12.8.1-runtime-ubuntu22.04",
        labels={"app": "misplaced"},
        annotations={"cudasched.io/cuda-version": "12.8"},
    )
    template["spec"]["nodeName"] = kepler
    api.call(  # the harness's create knows no Deployment
        "POST",
        f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments",
        body={
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "misplaced", "namespace": NAMESPACE},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "misplaced"}},
                "template": {"metadata": template["metadata"], "spec": template["spec"]},
            },
        },
    )
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    deadline = time.monotonic() + 120
    while sum(1 for _ in api.list(path, labelSelector="app=misplaced")) < 3:
        assert time.monotonic() < deadline, "the Deployment's pods were not created"
        time.sleep(1)
    audit = json.loads(answer(cudasched(plane, "audit", "-n", NAMESPACE, "-o", "json"), 1))
    (finding,) = audit["findings"]
    assert (finding["code"], finding["object"]) == (
        "pod-on-incompatible-node",
        f"Deployment/{NAMESPACE}/misplaced",
    )
    assert finding["message"].startswith("3 of 3 pods on nodes that cannot run them")
    restart = f"kubectl rollout restart deployment/misplaced -n {NAMESPACE}"
    assert finding["fix"].startswith(f"restart Deployment misplaced ({restart})")
    overview = " ".join(answer(cudasched(plane, "explain", "-n", NAMESPACE)).split())
    assert f"{NAMESPACE}/Deployment/misplaced (3 pods):" in overview
    assert "3 of 3 pods on nodes that cannot run them" in overview
    pod = next(iter(api.list(path, labelSelector="app=misplaced")))["metadata"]["name"]
    first = answer(cudasched(plane, "explain", f"pod/{pod}", "-n", NAMESPACE)).splitlines()[0]
    assert first.startswith(f"bound to {kepler} (") and "it cannot run it" in first


def test_an_llminferenceservice_without_pods_is_explained(
    plane: ControlPlane, api: Api, sample: Sample
) -> None:
    """Item 8: KServe has made no pod for it (no controller runs here): explain judges the
    object as audit does, by name and in the namespace's set."""
    api.ensure_namespace(NAMESPACE)
    service = yaml.safe_load(
        (Path(__file__).parents[2] / "examples" / "qwen-llmisvc.yaml").read_text()
    )
    service["metadata"]["namespace"] = NAMESPACE
    service["apiVersion"] = "serving.kserve.io/v1alpha1"
    api.create(service, strict=False)
    name = service["metadata"]["name"]
    one = json.loads(
        answer(cudasched(plane, "explain", f"llmisvc/{name}", "-n", NAMESPACE, "-o", "json"))
    )
    assert one["summary"]["workload"] == f"{NAMESPACE}/LLMInferenceService/{name}"
    assert one["summary"]["requirement"] == "cuda>=13.0"
    every = json.loads(answer(cudasched(plane, "explain", "-n", NAMESPACE, "-o", "json")))
    assert f"{NAMESPACE}/LLMInferenceService/{name}" in [w["workload"] for w in every["workloads"]]


def test_a_webhook_service_without_endpoints_is_the_likeliest_cause(
    plane: ControlPlane, api: Api, sample: Sample
) -> None:
    """Items 9 and 11: a pod on a node that cannot run it, and a cudasched webhook registered
    through a Service, in another namespace, with no EndpointSlice: the audit reads both from
    the API server and names the webhook as the likeliest cause, with -A and with -n of the
    pod's namespace alike. (The harness registers its webhook by URL, which the audit leaves
    alone; this registration matches no namespace, so it places nothing.)"""
    api.ensure_namespace(NAMESPACE)
    pod = gpu_pod(
        "unplaced",
        NAMESPACE,
        "nvidia/cuda:12.8.1-runtime-ubuntu22.04",
        annotations={"cudasched.io/cuda-version": "12.8"},
    )
    pod["spec"]["nodeName"] = _kepler_node(api)
    api.create(pod)
    hook = {
        "name": "probe.cudasched.io",
        "clientConfig": {"service": {"namespace": HOOK_NAMESPACE, "name": "nowhere", "path": "/m"}},
        "rules": [
            {
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
            }
        ],
        "namespaceSelector": {"matchLabels": {"e2e.cudasched.io/never": "true"}},
        "failurePolicy": "Ignore",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }
    path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    api.call(
        "POST",
        path,
        body={
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "e2e-unreachable"},
            "webhooks": [hook],
        },
    )
    try:
        audits = {
            scope: json.loads(answer(cudasched(plane, "audit", *scope, "-o", "json"), 1))
            for scope in (("-A",), ("-n", NAMESPACE))
        }
    finally:
        api.delete(f"{path}/e2e-unreachable")
    causes = {
        scope: [
            (f["code"], f["object"], f"Pod/{NAMESPACE}/unplaced" in f["message"])
            for f in audit["findings"]
            if f["code"].startswith("webhook-")
        ]
        for scope, audit in audits.items()
    }
    said = [("webhook-unreachable", f"Service/{HOOK_NAMESPACE}/nowhere", True)]
    assert causes == {("-A",): said, ("-n", NAMESPACE): said}
    (cause,) = [f for f in audits["-n", NAMESPACE]["findings"] if f["code"] == said[0][0]]
    assert f"Service {HOOK_NAMESPACE}/nowhere has no ready endpoint" in cause["message"]
