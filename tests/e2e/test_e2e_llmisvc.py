"""KServe LLMInferenceServices (v1alpha2, and v1alpha1 served beside it) through the real API
server: created strictly against the CRD this project wrote, admitted by the webhook, and their
model-server pods (as KServe's controller builds them, ``tests/data/kserve/llmisvc.yaml``)
constrained, the router scheduler pod (no GPU) left alone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.kube import Api
from tests.harness.sample import clean
from tests.harness.webhook import LiveWebhook, registered

NS = "llm"
DATA = Path(__file__).resolve().parents[1] / "data" / "kserve" / "llmisvc.yaml"


@pytest.fixture(scope="module")
def created(
    plane: ControlPlane, api: Api, webhook: LiveWebhook, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, dict[str, object]]]]:
    items = [clean(o) for o in yaml.safe_load(DATA.read_text())["items"]]
    for item in items:  # the recorded pods name no namespace: they belong with their services
        item["metadata"].setdefault("namespace", NS)
    services = [o for o in items if o["kind"] == "LLMInferenceService"]
    pods = [o for o in items if o["kind"] == "Pod"]
    tmp = tmp_path_factory.mktemp("llmisvc")
    (tmp / "services.yaml").write_text(yaml.safe_dump_all(services))
    (tmp / "pods.yaml").write_text(yaml.safe_dump_all(pods))
    api.ensure_namespace(NS)
    with registered(api, webhook.registration(name="cudasched-webhook-llm", only_namespaces=[NS])):
        applied = plane.kubectl("apply", "--validate=strict", "-f", str(tmp / "services.yaml"))
        webhook.wait_cached("llminferenceservices", len(services))
        plane.kubectl("create", "--validate=strict", "-f", str(tmp / "pods.yaml"))
    stored = {p["metadata"]["name"]: p for p in api.list(f"/api/v1/namespaces/{NS}/pods")}
    yield applied.stderr, stored
    plane.kubectl(
        "delete", "pods", "--all", "-n", NS, "--force", "--grace-period=0", "--wait=false"
    )


def test_both_versions_are_stored_and_served(created: object, api: Api) -> None:
    for version in ("v1alpha1", "v1alpha2"):
        names = {
            s["metadata"]["name"]
            for s in api.list(
                f"/apis/serving.kserve.io/{version}/namespaces/{NS}/llminferenceservices"
            )
        }
        assert names == {"qwen2-7b-instruct-single", "qwen2-7b-instruct-pd"}


def test_model_server_pods_are_constrained_router_is_not(
    created: tuple[str, dict[str, dict[str, object]]],
) -> None:
    """llm-d-cuda images resolve (cuda >= 13.0) and their pods get affinity; the pod of an image
    the table lacks (llm-d-dev, KServe 0.16's default) is admitted unconstrained, as admission
    answers it offline, its requirement recorded as unknown; the router scheduler asks no GPU
    and is never sent."""
    _, pods = created
    assert len(pods) == 5
    seen = set()
    for name, pod in pods.items():
        image = pod["spec"]["containers"][0]["image"]  # type: ignore[index]
        annotations = pod["metadata"].get("annotations", {})  # type: ignore[union-attr]
        affinity = pod["spec"].get("affinity", {})  # type: ignore[union-attr]
        if "llm-d-cuda" in image:
            seen.add("cuda")
            assert annotations.get("cudasched.io/requirement", "").startswith("cuda>=13.0"), name
            assert affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"
            ], name
        else:
            seen.add(kind := image.split(":")[0].rsplit("/", 1)[-1])
            # a GPU pod of unknown CUDA records so (issue 27 item 4); the router is never sent
            recorded = annotations.get("cudasched.io/requirement")
            if kind == "llm-d-dev":
                assert str(recorded).startswith("unknown (image not in the image table"), name
            else:
                assert recorded is None, name
            assert "nodeAffinity" not in affinity, name
    assert seen == {"cuda", "llm-d-dev", "llm-d-router-endpoint-picker"}
