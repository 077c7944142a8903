"""Images read from their layers and facts shared through the real control plane (issue 29):
``cudasched manifests --image-resolver``'s ImageFacts CRD, grant and policy applied strictly;
the webhook, running as its own service account, reads an Ollama-style image (no CUDA in its
config) from the real local registry in the background, keeps what it found in the image
digest's ImageFacts object and places the next pod by it; restarted, it places pods from the
kept facts without reading a layer; nobody else may write the facts, a person may correct them
(``spec.override``), and ``explain --live`` answers from them with no registry.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.fleet import cudasched_command
from tests.harness.kube import Api
from tests.harness.webhook import manifests, registered, webhook_process
from tests.support.layers import RUNNERS, layer, push_layered
from tests.support.registry import Registry, run_registry

NS = "e2e-facts"  # where the webhook's service account lives
PODS = "e2e-facts-pods"  # where the test's pods are admitted
SA = "cudasched-webhook"
FACTS = "/apis/cudasched.io/v1alpha1/imagefacts"


@dataclass
class Installed:
    registry: Registry
    image: str
    name: str  # the ImageFacts object of the image's digest
    kubeconfig: Path  # the webhook's service account's


@pytest.fixture(scope="module")
def installed(
    plane: ControlPlane, api: Api, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Installed]:
    tmp = tmp_path_factory.mktemp("imagefacts")
    wanted = {"Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole"}
    wanted |= {"ClusterRoleBinding", "ValidatingAdmissionPolicy"}
    wanted |= {"ValidatingAdmissionPolicyBinding"}
    objects = [
        o
        for o in manifests("--namespace", NS, "--self-signed", "--no-agent", "--image-resolver")
        if o["kind"] in wanted
    ]
    path = tmp / "install.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    plane.kubectl("apply", "--validate=strict", "-f", str(path))
    api.wait_for(
        "the ImageFacts CRD to be established",
        lambda: any(
            c["type"] == "Established" and c["status"] == "True"
            for c in api.get(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/imagefacts.cudasched.io"
            )
            .get("status", {})
            .get("conditions", [])
        ),
    )
    api.ensure_namespace(PODS)
    kubeconfig = plane.service_account_kubeconfig(NS, SA, tmp / "webhook.kubeconfig")
    with run_registry() as registry:
        base = layer({"etc/os-release": b"ID=ubuntu\n"})
        digest = push_layered(registry, "acme/ollama-build", "0.12.3", [base, RUNNERS])
        name = "sha256-" + digest.removeprefix("sha256:")
        try:
            yield Installed(registry, f"{registry.host}/acme/ollama-build:0.12.3", name, kubeconfig)
        finally:
            # Leave the shared control plane as found: the live tests compare `--live` answers
            # with a snapshot's, and bring the ImageFacts they answer by themselves.
            plane.kubectl("delete", "pods", "--all", "-n", PODS, "--force", "--grace-period=0")
            plane.kubectl("delete", "imagefacts", "--all", check=False)


def gpu_pod(image: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": PODS},
        "spec": {
            "containers": [
                {"name": "ollama", "image": image, "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def constrained(pod: dict[str, Any]) -> bool:
    """Whether admission placed the pod (cudasched's marker expression in its affinity)."""
    return "cudasched.io/injected" in yaml.safe_dump(pod["spec"].get("affinity") or {})


def layer_reads(metrics: str, outcome: str) -> float:
    found = re.search(
        rf'^cudasched_webhook_image_layer_reads_total\{{outcome="{outcome}"\}} (\S+)$',
        metrics,
        re.MULTILINE,
    )
    return float(found.group(1)) if found else -1.0


def settings(installed: Installed) -> dict[str, Any]:
    return {
        "imageResolver": {"enabled": True, "plainHttp": [installed.registry.host]},
        "onUnknownRequirement": "warn",
    }


def test_layers_read_once_kept_in_the_cluster_and_used_after_a_restart(
    plane: ControlPlane, api: Api, installed: Installed, tmp_path_factory: pytest.TempPathFactory
) -> None:
    image = installed.image
    work = tmp_path_factory.mktemp("webhook-facts")
    with webhook_process(work / "one", installed.kubeconfig, config=settings(installed)) as hook:
        with registered(api, hook.registration(name="e2e-facts", only_namespaces=[PODS])):
            first = api.create(gpu_pod(image, "ollama-1"))
            api.wait_for(
                "the webhook to keep the image's facts",
                lambda: (
                    api.exists(f"{FACTS}/{installed.name}")
                    and "contents" in api.get(f"{FACTS}/{installed.name}").get("status", {})
                ),
                timeout=60,
            )
            second = api.create(gpu_pod(image, "ollama-2"))
        metrics = hook.metrics()
    assert not constrained(first) and constrained(second)
    assert layer_reads(metrics, "answered") == 1.0
    kept = api.get(f"{FACTS}/{installed.name}")["status"]
    assert kept["contents"]["cuda"] == "12.8" and kept["references"] == [image]
    assert "runners cuda_v12, cuda_v13" in kept["contents"]["rule"]
    # Restarted (a new process: its caches empty): placed from the kept facts, no layer read.
    with webhook_process(work / "two", installed.kubeconfig, config=settings(installed)) as hook:
        with registered(api, hook.registration(name="e2e-facts", only_namespaces=[PODS])):
            api.create(gpu_pod(image, "ollama-3"))  # queues the config look-up
            api.wait_for(
                "the restarted webhook to place the image",
                lambda: constrained(api.create(gpu_pod(image, "ollama-x"), dry_run=True)),
                timeout=30,
            )
        metrics = hook.metrics()
    assert layer_reads(metrics, "answered") == 0.0
    assert 'cudasched_webhook_image_facts_total{result="found"} 1.0' in metrics


def test_only_the_webhook_writes_the_facts_and_a_person_corrects_them(
    plane: ControlPlane, api: Api, installed: Installed, tmp_path_factory: pytest.TempPathFactory
) -> None:
    api.wait_for("the image's facts", lambda: api.exists(f"{FACTS}/{installed.name}"), timeout=90)
    # The policy takes effect once the API server has compiled it: eventually.
    forged = {"status": {"contents": {"cuda": "11.8"}}}

    def refused() -> bool:
        answer = api.send(
            "PATCH",
            f"{FACTS}/{installed.name}/status",
            body=forged,
            params={"dryRun": "All"},
            content_type="application/merge-patch+json",
        )
        return answer.status_code == 403 and "only cudasched writes" in answer.text

    api.wait_for("the ImageFacts policy to be enforced", refused, timeout=60)
    corrected = api.patch(
        f"{FACTS}/{installed.name}",
        {"spec": {"override": {"cuda": "13.0", "reason": "the cuda_v12 runner crashes"}}},
    )
    assert corrected["spec"]["override"]["cuda"] == "13.0"
    shown = plane.kubectl("get", "imagefacts", installed.name)
    assert re.search(r"\s12\.8\s+13\.0\s", shown.stdout.splitlines()[1]), shown.stdout
    # explain --live answers from the kept facts, the override first, with no registry asked.
    pod = tmp_path_factory.mktemp("explain") / "pod.yaml"
    pod.write_text(yaml.safe_dump(gpu_pod(installed.image, "explained")))
    done = subprocess.run(
        [
            *cudasched_command(),
            "explain",
            "--workload",
            str(pod),
            "--kubeconfig",
            str(plane.kubeconfig),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)["summary"]
    assert summary["requirement"] == "cuda>=13.0", summary
    assert f"override in ImageFacts {installed.name}" in summary["requirementSource"]
