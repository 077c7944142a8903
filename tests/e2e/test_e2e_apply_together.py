"""A serving runtime and its InferenceService in one ``kubectl apply`` (issue 27 item 1), as
``examples/aml-triton.yaml`` and every GitOps tool apply them: the service's review reaches the
webhook before the runtime reaches its watch cache. Before, such a service was admitted with no
warning, no ``cudasched.io/requirement`` and no Event; now the webhook reads the runtime from the
API server and judges the service by it. A runtime that exists nowhere is said to.

The runtimes are the example's Alauda runtime under names of this module's own (the webhook says
a runtime's label/image disagreement once per process), one of them labelled CUDA 13.2, which no
driver of the fleet runs.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.kube import Api
from tests.harness.webhook import LiveWebhook, registered

NS = "e2e-together"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aml-triton.yaml"
CSR = "/apis/serving.kserve.io/v1alpha1/clusterservingruntimes"


def _objects() -> list[dict[str, Any]]:
    """The example's runtime and service twice (the second runtime labelled CUDA 13.2), and a
    service naming a runtime that does not exist."""
    runtime, service = list(yaml.safe_load_all(EXAMPLE.read_text(encoding="utf-8")))
    out = []
    for suffix, cuda in (("fits", "12.1"), ("nofit", "13.2")):
        rt = copy.deepcopy(runtime)
        rt["metadata"]["name"] = f"aml-triton-{suffix}"
        rt["metadata"]["labels"]["cpaas.io/cuda-version"] = cuda
        isvc = copy.deepcopy(service)
        isvc["metadata"] = {"name": f"detector-{suffix}", "namespace": NS}
        isvc["spec"]["predictor"]["model"]["runtime"] = rt["metadata"]["name"]
        out += [rt, isvc]
    orphan = copy.deepcopy(service)
    orphan["metadata"] = {"name": "detector-orphan", "namespace": NS}
    orphan["spec"]["predictor"]["model"]["runtime"] = "aml-triton-nowhere"
    return [*out, orphan]


@pytest.fixture(scope="module")
def applied(
    plane: ControlPlane, api: Api, webhook: LiveWebhook, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """kubectl's stderr for the one apply of every object, the webhook registered for this
    module's namespace (and, for the cluster-scoped runtimes, for every object it matches)."""
    api.ensure_namespace(NS)
    objects = _objects()
    manifest = tmp_path_factory.mktemp("together") / "together.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))
    config = webhook.registration(name="cudasched-webhook-together", only_namespaces=[NS])
    with registered(api, config):
        done = plane.kubectl("apply", "-f", str(manifest))
        try:
            yield done.stderr
        finally:
            for obj in objects:
                if obj["kind"] == "ClusterServingRuntime":
                    api.delete(f"{CSR}/{obj['metadata']['name']}")


def _service(api: Api, name: str) -> dict[str, Any]:
    return api.get(f"/apis/serving.kserve.io/v1beta1/namespaces/{NS}/inferenceservices/{name}")


def test_the_service_is_judged_by_the_runtime_applied_with_it(applied: str, api: Api) -> None:
    assert (
        "Warning: cudasched: using cuda>=12.8, cc>=7.5, what its image needs: "
        "ClusterServingRuntime aml-triton-fits says cuda>=12.1"
    ) in applied, applied
    record = _service(api, "detector-fits")["metadata"]["annotations"]["cudasched.io/requirement"]
    assert record.startswith("cuda>=12.8, cc>=7.5 (ClusterServingRuntime aml-triton-fits")


def test_one_no_node_can_run_is_warned_recorded_and_reported(
    applied: str, api: Api, plane: ControlPlane
) -> None:
    assert "Warning: cudasched: no node can run cuda>=13.2, cc>=7.5" in applied, applied
    annotations = _service(api, "detector-nofit")["metadata"]["annotations"]
    assert annotations["cudasched.io/requirement"].startswith("cuda>=13.2, cc>=7.5")
    seen = ""

    def event_listed() -> bool:
        nonlocal seen
        seen = plane.kubectl("events", "-n", NS, "--for", "inferenceservice/detector-nofit").stdout
        return "NoCompatibleNode" in seen

    api.wait_for("a NoCompatibleNode event", event_listed, timeout=60, interval=1)


def test_a_runtime_that_exists_nowhere_is_said_to(applied: str, api: Api) -> None:
    assert (
        "Warning: cudasched: no node can run it, KServe runs no predictor for it: no "
        "ServingRuntime or ClusterServingRuntime aml-triton-nowhere (named by "
        "spec.predictor.model.runtime) exists"
    ) in applied, applied
    annotations = _service(api, "detector-orphan")["metadata"].get("annotations") or {}
    assert "cudasched.io/requirement" not in annotations
