"""The synthetic fleet (``tests/support/synth``) that the benchmarks, the recorded answers and
the tests at scale share looks like a real one: distinct nodes named as their hostnames, varied
runtime images, predictor pods as the API server hands them to a webhook at CREATE."""

from __future__ import annotations

from tests.support import synth


def test_synthetic_cluster_looks_real() -> None:
    cluster = synth.make_cluster(40, runtimes=20, isvcs=16)
    names = [n["metadata"]["name"] for n in cluster.nodes]
    assert len(set(names)) == 40
    assert all(
        n["metadata"]["labels"]["kubernetes.io/hostname"] == n["metadata"]["name"]
        for n in cluster.nodes
    )
    assert len(cluster.serving_runtimes) + len(cluster.cluster_serving_runtimes) == 20
    images = {
        rt["spec"]["containers"][0]["image"]
        for rt in (*cluster.serving_runtimes, *cluster.cluster_serving_runtimes)
    }
    assert len(images) > 5
    assert all("status" not in p and "name" not in p["metadata"] for p in cluster.pods)
    body = synth.review_bodies(cluster, 3)[2]
    assert b'"operation":"CREATE"' in body
