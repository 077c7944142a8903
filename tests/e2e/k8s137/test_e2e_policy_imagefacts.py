"""The policy controller's image resolver on a real Kubernetes 1.37 API server, running as
its own ServiceAccount with what ``cudasched manifests --mode policy --image-resolver`` grants
it: an Ollama-style image (no CUDA in its config) pushed to a real registry (Debian's
``docker-registry``) is read from its layers in the background, the controller keeps what it
found in the image digest's ImageFacts object (the status policy admits its account beside
the webhook's) and the table's answer for the image becomes ``cuda>=12.8``; a person's
``spec.override`` of those facts reaches the table within the resolver's ``tagTtlSeconds``,
as it reaches the webhook's answers (``tests/e2e/test_e2e_imagefacts.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cudasched.install.policycontroller import CONTROLLER
from tests.harness.controlplane.plane import ControlPlane
from tests.harness.kube import Api
from tests.harness.policy import (
    NAMESPACE,
    controller_process,
    gpu_replica_set,
    install_policy,
    table_keys,
    template_key,
)
from tests.support.layers import RUNNERS, layer, push_layered
from tests.support.registry import run_registry

NS = "e2e-policy-facts"
FACTS = "/apis/cudasched.io/v1alpha1/imagefacts"
CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/imagefacts.cudasched.io"
JSON = dict[str, Any]


def _requirement(api: Api, key: str) -> str:
    return str(table_keys(api).get(key, {}).get("requirement", ""))


def test_the_controllers_resolver_shares_facts_and_an_override_reaches_the_tables(
    plane: ControlPlane, api: Api, tmp_path: Path
) -> None:
    install_policy(plane, tmp_path / "install", "--image-resolver")
    api.wait_for(
        "the ImageFacts CRD established",
        lambda: any(
            c["type"] == "Established" and c["status"] == "True"
            for c in api.get(CRD).get("status", {}).get("conditions", [])
        ),
    )
    kubeconfig = plane.service_account_kubeconfig(
        NAMESPACE, CONTROLLER, tmp_path / "controller.kubeconfig"
    )
    api.ensure_namespace(NS)
    with run_registry() as registry:
        base = layer({"etc/os-release": b"ID=ubuntu\n"})
        digest = push_layered(registry, "acme/ollama-policy", "0.12.3", [base, RUNNERS])
        facts = f"{FACTS}/sha256-{digest.removeprefix('sha256:')}"
        image = f"{registry.host}/acme/ollama-policy:0.12.3"
        rs = gpu_replica_set("ollama", image, NS)
        key = template_key(rs)
        config = {
            "imageResolver": {"enabled": True, "plainHttp": [registry.host], "tagTtlSeconds": 3}
        }
        try:
            with controller_process(
                tmp_path / "controller", kubeconfig, "facts", config=config
            ) as controller:
                api.create(rs)
                api.wait_for(
                    "the layers' answer in the table",
                    lambda: _requirement(api, key).startswith("cuda>=12.8"),
                    timeout=90,
                )
                kept = api.get(facts)["status"]
                api.patch(
                    facts, {"spec": {"override": {"cuda": "13.0", "reason": "runner crashes"}}}
                )
                api.wait_for(
                    "the person's override in the table",
                    lambda: _requirement(api, key).startswith("cuda>=13.0"),
                    timeout=60,
                )
                log = controller.log()
        finally:
            plane.kubectl("delete", "imagefacts", "--all", check=False)
            plane.kubectl("delete", "namespace", NS, "--wait=false", check=False)
    assert kept["contents"]["cuda"] == "12.8" and kept["references"] == [image]
    assert "round failed" not in log and "not written" not in log, log[-2000:]
