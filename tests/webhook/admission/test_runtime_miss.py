"""A runtime and its InferenceService applied together (issue 27 item 1): the service's review
arrives before the runtime reaches the watch cache. Admission reads the namespace's runtimes
from the API server on such a miss (through the ``RuntimeSource`` the server gives it) and
judges the service by them: requirement recorded, no-fit warned and reported. A runtime that
exists nowhere is said to, with no node counted for the service; one that could not be read in
time is said to be not known yet. The objects are ``examples/aml-triton.yaml``'s: an Alauda
runtime labelled CUDA 12.1 whose Triton 25.02 image needs CUDA 12.8 and cc 7.5.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.vocab import labels as L
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.admission.review import Placement
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support import builders
from tests.support.admission import applied, ask

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "aml-triton.yaml"

Runtimes = tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]]


def _example() -> tuple[dict[str, Any], dict[str, Any]]:
    runtime, service = list(yaml.safe_load_all(EXAMPLE.read_text(encoding="utf-8")))
    return runtime, service


class _Source:
    """Answers ``runtimes`` (``None``: not read in time), recording the namespaces asked."""

    def __init__(self, runtimes: Runtimes | None) -> None:
        self.runtimes = runtimes
        self.asked: list[str] = []

    def read(self, namespace: str) -> Runtimes | None:
        self.asked.append(namespace)
        return self.runtimes


@pytest.fixture(scope="module")
def lagging(kb: KnowledgeBase) -> ClusterState:
    """The sample cluster as the cache holds it before the example's runtime arrives."""
    sample = bundled_snapshot()
    return ClusterState.from_objects(
        sample.nodes,
        sample.inference_services,
        sample.serving_runtimes,
        sample.cluster_serving_runtimes,
        kb=kb,
    )


def _admitter(kb: KnowledgeBase, source: _Source | None, **settings: Any) -> Admitter:
    config = WebhookConfig.from_mapping(settings)
    adm = Admitter.from_config(config, kb)
    return Admitter(config, kb, adm.images, source)


def _review(service: dict[str, Any]) -> dict[str, Any]:
    return builders.review(service, uid="3c1d2e4f-0000-4000-8000-00000000a001")


def test_a_runtime_the_cache_has_not_seen_is_read_and_the_service_judged(
    kb: KnowledgeBase, lagging: ClusterState
) -> None:
    runtime, service = _example()
    source = _Source(([], [runtime]))
    adm = _admitter(kb, source)
    placements: list[Placement] = []
    adm.on_placement = placements.append
    review = _review(service)
    resp = ask(adm, "isvc", review, lagging)
    assert source.asked == ["team-vision"]
    record = applied(review, resp)["metadata"]["annotations"][L.ANN_REQUIREMENT]
    assert record.startswith("cuda>=12.8, cc>=7.5 (ClusterServingRuntime aml-triton-cuda-12.1")
    # The runtime's label says less than its image needs: said once, as for a cached one.
    assert resp["warnings"] == [
        "cudasched: using cuda>=12.8, cc>=7.5, what its image needs: ClusterServingRuntime "
        "aml-triton-cuda-12.1 says cuda>=12.1"
    ]
    (placement,) = placements  # reported, so a NoCompatibleNode Event follows when none fits
    assert placement.name == "detector" and placement.no_fit is None
    # A runtime the cache holds is never read again.
    cached = ClusterState.from_objects(lagging.nodes, [], [], [runtime], kb=kb)
    again = _Source(None)
    ask(_admitter(kb, again), "isvc", review, cached)
    assert again.asked == []


def test_no_node_fits_is_warned_for_a_runtime_read_on_a_miss(
    kb: KnowledgeBase, lagging: ClusterState
) -> None:
    runtime, service = _example()
    runtime = copy.deepcopy(runtime)
    runtime["metadata"]["labels"]["cpaas.io/cuda-version"] = "13.2"
    resp = ask(_admitter(kb, _Source(([], [runtime]))), "isvc", _review(service), lagging)
    assert resp["warnings"][0].startswith("cudasched: no node can run cuda>=13.2, cc>=7.5")


def test_a_runtime_that_exists_nowhere_is_said_to(kb: KnowledgeBase, lagging: ClusterState) -> None:
    _, service = _example()
    said = (
        "cudasched: no node can run it, KServe runs no predictor for it: no ServingRuntime or "
        "ClusterServingRuntime aml-triton-cuda-12.1 (named by spec.predictor.model.runtime) "
        "exists"
    )
    for source in (_Source(([], [])), None):  # read from the API server, or no API at all
        review = _review(service)
        resp = ask(_admitter(kb, source), "isvc", review, lagging)
        assert resp["warnings"] == [said]
        assert "patch" not in resp  # nothing recorded for a service of which no pod can exist


def test_a_runtime_not_read_in_time_is_not_known_yet(
    kb: KnowledgeBase, lagging: ClusterState
) -> None:
    _, service = _example()
    resp = ask(_admitter(kb, _Source(None)), "isvc", _review(service), lagging)
    assert resp["warnings"] == [
        "cudasched: not judged: its runtime is not known yet (no ServingRuntime or "
        "ClusterServingRuntime aml-triton-cuda-12.1 (named by spec.predictor.model.runtime) "
        "exists in the webhook's cache, and the API server did not answer in time)"
    ]


def test_pods_never_read_runtimes(kb: KnowledgeBase, lagging: ClusterState) -> None:
    source = _Source(None)
    pod = builders.pod(
        "p", "team-vision", predictor="detector", image="nvcr.io/nvidia/tritonserver:24.05-py3"
    )
    body = orjson.dumps(builders.review(pod, uid="u-1"))
    _admitter(kb, source).review("pod", body, lagging)
    assert source.asked == []
