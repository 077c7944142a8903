"""The shared builders (``tests/support/builders.py``) build what they say: objects a real API
server accepts, nodes that read back as the facts they were built from, in the label
generations asked for, and reviews the webhook's own parser reads."""

from __future__ import annotations

import orjson
import pytest

from cudasched.knowledge import KnowledgeBase
from cudasched.nodes.facts import facts_from_labels
from cudasched.nodes.labelers import AGENT_KEYS
from cudasched.vocab import labels as L
from cudasched.vocab.labelsyntax import label_value_ok
from cudasched.vocab.versions import parse_driver
from cudasched.webhook.admission.review import creation_review, parse_review
from tests.support import builders
from tests.support.k8s_schema import assert_valid, assert_valid_pod

GPUS_AND_DRIVERS = [
    ("NVIDIA-A100-SXM4-80GB", "535.104.05"),
    ("NVIDIA-H100-80GB-HBM3", "550.90.07"),
    ("Tesla-T4", "470.256.02"),
    ("NVIDIA-B200", "580.95.05"),
    ("NVIDIA-GeForce-RTX-4090", "570.124.06"),
]
SCHEMES = [
    (builders.OURS,),
    (builders.GFD,),
    (builders.GFD_DEPRECATED,),
    builders.GFD_SCHEMES,
    builders.ALL_SCHEMES,
]


@pytest.mark.parametrize("scheme", SCHEMES, ids="+".join)
@pytest.mark.parametrize(("gpu", "driver"), GPUS_AND_DRIVERS)
def test_a_node_reads_back_as_the_facts_it_was_built_from(
    kb: KnowledgeBase, gpu: str, driver: str, scheme: tuple[str, ...]
) -> None:
    built = builders.node("n", gpu=gpu, driver=driver, scheme=scheme)
    assert_valid(built)
    labels = built["metadata"]["labels"]
    assert all(label_value_ok(v) for v in labels.values())
    facts = facts_from_labels("n", labels, kb)
    info = kb.gpu(gpu)
    assert info is not None
    assert facts.driver == parse_driver(driver)
    assert facts.cuda == kb.max_cuda_for_driver(parse_driver(driver))
    assert facts.compute == info.compute
    assert facts.has_gpu
    assert built["status"]["capacity"]["nvidia.com/gpu"] == "8"


def test_each_label_generation_carries_its_own_keys() -> None:
    def keys(*scheme: str) -> set[str]:
        labels = builders.node(scheme=scheme)["metadata"]["labels"]
        return {k for k in labels if k.startswith(("nvidia.com/cuda.", L.PREFIX))}

    ours, new, old = keys(builders.OURS), keys(builders.GFD), keys(builders.GFD_DEPRECATED)
    assert ours == AGENT_KEYS - {L.PROBE_REASON}
    assert new == set(L.GFD_VERSION_KEYS)
    assert old == set(L.GFD_OLD_VERSION_KEYS)
    assert keys(*builders.ALL_SCHEMES) == ours | new | old
    assert len(ours | new | old) == 22


def test_cpu_and_unlabelled_gpu_nodes() -> None:
    cpu = builders.node("cpu-1", gpu=None, driver=None)
    assert_valid(cpu)
    assert set(cpu["metadata"]["labels"]) == {
        "kubernetes.io/arch",
        "kubernetes.io/hostname",
        "kubernetes.io/os",
    }
    assert "nvidia.com/gpu" not in cpu["status"]["capacity"]
    bare = builders.node("bare", gpu=None, driver=None, count=4, os=("ubuntu", "22.04"))
    assert bare["metadata"]["labels"][L.GFD_PRESENT] == "true"
    assert bare["status"]["capacity"]["nvidia.com/gpu"] == "4"
    assert bare["status"]["nodeInfo"]["osImage"] == "Ubuntu 22.04 LTS"
    removed = builders.node(labels={L.GFD_PRESENT: None, "team": "a"})["metadata"]["labels"]
    assert L.GFD_PRESENT not in removed and removed["team"] == "a"


def test_workloads_are_valid_objects() -> None:
    gpu_pod = builders.pod("p", "ml", predictor="llm", affinity=builders.required())
    assert_valid(builders.pod())
    assert_valid_pod(builders.pod(node_selector={"a": "b"}))
    assert gpu_pod["metadata"]["labels"]["serving.kserve.io/inferenceservice"] == "llm"
    assert gpu_pod["spec"]["containers"][0]["name"] == "kserve-container"
    service = builders.isvc("llm", "ml", runtime="vllm", cluster_runtime="vllm")
    assert service["spec"]["predictor"]["model"]["runtime"] == "vllm"
    assert service["status"] == {"clusterServingRuntimeName": "vllm"}
    assert builders.runtime("rt")["kind"] == "ClusterServingRuntime"
    assert builders.runtime("rt", "ml")["kind"] == "ServingRuntime"


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_reviews_parse_as_the_api_server_sends_them(operation: str) -> None:
    obj = builders.isvc("llm", "ml")
    doc = builders.review(obj, operation=operation, uid="u-1", dry_run=True)
    request = parse_review(orjson.dumps(doc))
    assert (request.uid, request.operation, request.namespace) == ("u-1", operation, "ml")
    assert (request.group, request.kind, request.dry_run) == (
        "serving.kserve.io",
        "InferenceService",
        True,
    )
    assert (request.obj is None) == (operation == "DELETE")
    assert (doc["request"]["oldObject"] is None) == (operation == "CREATE")
    if operation == "CREATE":
        expected = creation_review(obj, uid="u-1")
        expected["request"]["dryRun"] = True
        assert doc == expected
