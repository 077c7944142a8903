"""``-n``/``-l``: which objects a command reports, with kubectl's meaning."""

from __future__ import annotations

from cudasched.cluster.scope import Scope
from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.vocab.selectors import parse_selector

SAMPLE = bundled_snapshot()


def test_a_namespace_keeps_its_objects_and_every_cluster_scoped_one() -> None:
    scope = Scope("team-nlp")
    kept = [o for o in SAMPLE.objects() if scope.admits(o)]
    kinds = {o["kind"] for o in kept}
    assert {"Node", "ClusterServingRuntime", "InferenceService", "Pod"} <= kinds
    namespaced = [o for o in kept if o["kind"] not in ("Node", "ClusterServingRuntime")]
    assert len(namespaced) >= 8
    assert all(o["metadata"]["namespace"] == "team-nlp" for o in namespaced)
    assert sum(o["kind"] == "Node" for o in kept) == len(SAMPLE.nodes) == 21


def test_a_selector_applies_to_every_object_nodes_included() -> None:
    scope = Scope(None, parse_selector("aml.cpaas.io/runtime-type=vllm"))
    kept = [o for o in SAMPLE.objects() if scope.admits(o)]
    assert [o["metadata"]["name"] for o in kept if o["kind"] == "InferenceService"] == [
        "qwen2-7b",
        "gpt-oss-20b",
    ]
    assert not any(o["kind"] == "Node" for o in kept)


def test_workloads_scope_keeps_nodes_and_the_runtimes_in_scope_can_use() -> None:
    scoped = Scope("team-vision").workloads(SAMPLE)
    assert scoped.nodes == SAMPLE.nodes
    assert scoped.cluster_serving_runtimes == SAMPLE.cluster_serving_runtimes
    assert len(scoped.pods) == 4 and len(scoped.inference_services) == 4
    assert all(o["metadata"]["namespace"] == "team-vision" for o in scoped.serving_runtimes)
    assert Scope().workloads(SAMPLE) is SAMPLE
